"""Dafny suites: DafnyBench hints-removed and Dafny-source translation suites, filtered by the installed Dafny."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.records import VerifyStatus
from veriloop.tasks import load_suite
from veriloop.tasks.dafny import cached_filter, dafny_status

pytestmark = pytest.mark.dafny


def test_bundled_hints_suite_records_the_tool_version(tmp_path: Path) -> None:
    suite = load_suite("dafnybench-hints", load_settings(paths={"home": tmp_path, "data_dir": None}))
    assert len(suite.tasks) == 8 and "dafny==" in suite.version
    task = suite.tasks[0]
    assert task.language == "dafny" and task.spec == task.prompt and task.reference
    assert task.metadata["mode"] == "hints" and task.metadata["tool_version"] in suite.version


@pytest.mark.parametrize(
    ("name", "language"), [("alphaverus-dafny2nagini", "python"), ("alphaverus-dafny2verus", "rust")]
)
def test_translation_suites_carry_the_dafny_source(tmp_path: Path, name: str, language: str) -> None:
    suite = load_suite(name, load_settings(paths={"home": tmp_path, "data_dir": None}))
    assert suite.tasks and all(task.language == language for task in suite.tasks)
    task = suite.tasks[0]
    assert task.metadata["source"] == task.prompt and task.metadata["mode"] == "translate"
    assert task.metadata["verifier"] == name.removeprefix("alphaverus-dafny2")


def test_filter_verdicts_are_cached(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path, "data_dir": None})
    items = [{"key": "a"}, {"key": "b"}, {"key": "c"}]
    seen: list[str] = []

    def keep(item: dict[str, Any]) -> str | None:
        seen.append(item["key"])
        return "dropped" if item["key"] == "b" else None

    kept, version = cached_filter(settings, "unit", items, keep)
    assert [item["key"] for item in kept] == ["a", "c"] and version
    again, _ = cached_filter(settings, "unit", items, keep)
    assert again == kept and sorted(seen) == ["a", "b", "c"]  # the second load ran nothing


@pytest.mark.slow
def test_hints_suite_from_a_data_folder_keeps_what_needs_hints(tmp_path: Path) -> None:
    """From a data folder: one program that needs its hints, one that verifies without them, through real Dafny."""
    bundled = load_suite("dafnybench-hints", load_settings(paths={"home": tmp_path, "data_dir": None})).tasks[0]
    assert dafny_status(load_settings(), bundled.reference or "") is VerifyStatus.VERIFIED
    trivial = "method Id(x: int) returns (y: int)\n  ensures y == x\n{\n  y := x;\n}\n"
    rows = [
        {
            "test_ID": "000",
            "test_file": "Needs_hints.dfy",
            "ground_truth": bundled.reference,
            "hints_removed": bundled.prompt,
        },
        {"test_ID": "001", "test_file": "Trivial.dfy", "ground_truth": trivial, "hints_removed": trivial},
    ]
    folder = tmp_path / "data" / "dafnybench" / "DafnyBench"
    folder.mkdir(parents=True)
    (folder / "test.json").write_text(json.dumps(rows))
    settings = load_settings(paths={"home": tmp_path / "home", "data_dir": tmp_path / "data"})
    suite = load_suite("dafnybench-hints", settings)
    assert [task.id for task in suite.tasks] == ["dafnybench/Needs_hints"] and "scan=1" in suite.version
    records = list((tmp_path / "home" / "cache" / "suites").glob("dafnybench-hints-*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["verdicts"]["Trivial"] == "verifies without hints"
