"""The README's "Your own tasks" examples are real: each one validates with `veriloop suites validate`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veriloop.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
FORMATS = {
    "veriloop",
    "humaneval",
    "mbpp",
    "evalplus",
    "apps",
    "codecontests",
    "livecodebench",
    "dafnybench",
    "transcoder",
}


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Your own tasks\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def examples() -> dict[str, list[str]]:
    """Format -> its example rows: the ```jsonl block (the veriloop schema) and each row of the formats table."""
    found: dict[str, list[str]] = {}
    block = re.search(r"```jsonl\n(.*?)```", section(), re.S)
    assert block is not None, "the section lost its jsonl example"
    found["veriloop"] = [line for line in block.group(1).splitlines() if line.strip()]
    for line in section().splitlines():
        row = re.match(r"\| `(\w+)`[^|]*\| `(\{.*?\})`", line)
        if row:
            found.setdefault(row.group(1), []).append(row.group(2))
    return found


def test_the_section_shows_every_format_and_the_schema() -> None:
    assert set(examples()) == FORMATS
    assert "veriloop suites schema" in section() and "`id` and `prompt` are required" in section()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_readme_example_validates(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(row) for row in examples()[name]]
    if name == "dafnybench":  # DafnyBench's test.json is a JSON array
        path = tmp_path / "example.json"
        path.write_text(json.dumps(rows))
    else:
        path = tmp_path / "example.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code = main(["--home", str(tmp_path / "home"), "suites", "validate", str(path), "--format", name, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["valid"] and report["tasks"] == len(rows), report
