"""CONTRIBUTING.md's "Add a verifier" recipe, run as it is written, so it cannot go stale.

The recipe's sketch (its first Python block) becomes a module in a temporary folder, its registry line (the second)
is registered in-process, and a small `mini` tool written here stands in for the real one. Then the sketch is
judged the way the recipe promises: `veriloop verify` behind the spec guard, a task file that names it, a run's
provenance, the members the recipe lists against the protocol, ruff on the sketch, and mypy on the `_CHECKED` line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veriloop.records import Candidate
from veriloop.verifiers import VERIFIERS, FormalVerifier

ROOT = Path(__file__).resolve().parents[2]
MODULE = "recipe_mini"
"""The sketch's module name here (the recipe's `veriloop/verifiers/<name>.py`, outside the package)."""

TOOL = '''#!{python}
"""The mini tool: `--version`, or `check FILE`: exit 0 when every `ensures` holds (or an `assume` fails), else 1."""
import sys

if sys.argv[1] == "--version":
    print("mini 1.0")
    sys.exit(0)
lines = open(sys.argv[2]).read().splitlines()
env = {{}}
for line in lines:
    if line.startswith("result = "):
        env["result"] = eval(line.partition("=")[2])
if not all(eval(line.removeprefix("assume "), {{}}, env) for line in lines if line.startswith("assume ")):
    sys.exit(0)  # it believes its assumptions, which is why the sketch's dialect forbids them
failed = [line for line in lines if line.startswith("ensures ") and not eval(line.removeprefix("ensures "), {{}}, env)]
for line in failed:
    print(f"error: {{line}} fails for result = {{env.get('result')}}")
sys.exit(1 if failed else 0)
'''
SPEC = "ensures result >= 0\nensures result % 2 == 0\nresult = 0\n"
HONEST = SPEC.replace("result = 0", "result = 4")


def recipe() -> str:
    """The "Add a verifier" section of CONTRIBUTING.md."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    start = text.index("## Add a verifier\n")
    return text[start : text.index("\n## ", start + 1)]


def sketch() -> tuple[str, str, str]:
    """(the module's source, the registry line's name, its class) as the recipe writes them."""
    module, line = re.findall(r"```python\n(.*?)```", recipe(), flags=re.S)
    entry = re.fullmatch(r'\s*"(?P<name>[\w-]+)": "veriloop\.verifiers\.(?P=name):(?P<cls>\w+)",\s*', line)
    assert entry is not None, f"the recipe's registry line is not one line of VERIFIERS: {line!r}"
    return module, entry["name"], entry["cls"]


@pytest.fixture
def mini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The sketch registered as the recipe says, with the stand-in tool as its command; yields its name."""
    source, name, cls = sketch()
    (tmp_path / f"{MODULE}.py").write_text(source)
    tool = tmp_path / "bin" / name
    tool.parent.mkdir()
    tool.write_text(TOOL.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(VERIFIERS, "_entries", dict(VERIFIERS))  # this test's registration ends with it
    VERIFIERS.register(name, f"{MODULE}:{cls}")
    monkeypatch.setenv(f"VERILOOP_VERIFIERS__COMMANDS__{name.upper()}", str(tool))
    monkeypatch.setenv("VERILOOP_VERIFIERS__ISOLATION", "none")  # the stand-in lives under a folder bwrap hides
    monkeypatch.setenv("VERILOOP_PATHS__HOME", str(tmp_path / "home"))
    yield name
    sys.modules.pop(MODULE, None)


def _verify(tmp_path: Path, name: str, code: str, *flags: str) -> dict[str, Any]:
    from veriloop.cli import app

    program, spec = tmp_path / "candidate.mini", tmp_path / "spec.mini"
    program.write_text(code)
    spec.write_text(SPEC)
    argv = ["verify", str(program), "--verifier", name, "--spec", str(spec), "--no-cache", *flags, "--json"]
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def test_the_recipe_names_every_member_of_the_protocol_and_files_that_exist() -> None:
    listed = re.search(r"with these\s+members: (.*?)\.", recipe(), flags=re.S)
    assert listed is not None
    members = set(re.findall(r"`(\w+)`", listed.group(1)))
    protocols = [c for c in FormalVerifier.__mro__ if getattr(c, "_is_protocol", False) and c.__module__ != "typing"]
    declared = {n for c in protocols for n in (*vars(c), *c.__annotations__) if not n.startswith("_")}
    assert members == declared
    for path in re.findall(r"`((?:veriloop/|verifiers/|tests/)[\w/]+\.py)`", recipe()):
        assert (ROOT / path).exists() or (ROOT / "veriloop" / path).exists(), path


def test_the_sketch_is_ruff_clean(tmp_path: Path) -> None:
    source, _, _ = sketch()
    module = tmp_path / f"{MODULE}.py"
    module.write_text(source)
    ruff = [sys.executable, "-m", "ruff"]
    config = ["--config", str(ROOT / "pyproject.toml")]
    lint = subprocess.run([*ruff, "check", *config, str(module)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    form = subprocess.run([*ruff, "format", "--check", "--diff", *config, str(module)], capture_output=True, text=True)
    assert form.returncode == 0, form.stdout + form.stderr


def test_veriloop_verify_runs_the_sketch_behind_the_guard(tmp_path: Path, mini: str) -> None:
    honest = _verify(tmp_path, mini, HONEST)
    assert honest["status"] == "verified" and honest["tool"] == mini and honest["version"] == "1.0", honest
    wrong = _verify(tmp_path, mini, SPEC.replace("result = 0", "result = 3"))
    assert wrong["status"] == "failed" and "fails for result = 3" in wrong["diagnostics"][0]["message"]
    weaker = _verify(tmp_path, mini, HONEST.replace("ensures result % 2 == 0\n", "").replace("= 4", "= 3"))
    assert weaker["status"] == "rejected" and weaker["reason"].startswith("main:"), weaker  # Z3, from the dialect
    trivial = _verify(tmp_path, mini, HONEST.replace("ensures result >= 0", "ensures True"))
    assert trivial["status"] == "rejected" and "trivial postcondition" in trivial["reason"]
    escape = SPEC.replace("result = 0", "assume 1 == 0\nresult = -1")
    assert _verify(tmp_path, mini, escape, "--no-guard")["status"] == "verified"  # the hole the dialect closes
    assert _verify(tmp_path, mini, escape)["reason"] == "assume is not allowed"


async def test_a_task_file_names_the_sketch_and_a_run_records_its_version(tmp_path: Path, mini: str) -> None:
    from veriloop.agents import provenance
    from veriloop.config import load_settings
    from veriloop.tasks import load_suite
    from veriloop.verifiers import get_verifier

    tasks = tmp_path / "mini.jsonl"
    tasks.write_text(
        json.dumps({"id": "even", "prompt": "an even result", "language": mini, "verifier": mini, "spec": SPEC})
    )
    settings = load_settings()
    [task] = load_suite(str(tasks), settings).tasks
    assert task.metadata["verifier"] == mini and task.spec == SPEC
    verifier = get_verifier(settings, task.metadata["verifier"], guard=True, cache=False)
    try:
        verdicts = [
            await verifier.verify(Candidate(task_id=task.id, code=code, language=mini), task)
            for code in (HONEST, SPEC.replace("result = 0", "assume 1 == 0\nresult = -1"))
        ]
    finally:
        await verifier.aclose()
    assert [v.status for v in verdicts] == ["verified", "rejected"]
    assert provenance.verifier_versions(settings, [task]) == {mini: "1.0"}  # asked of the sketch, not known by name


def _mypy(module: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary", str(module)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_mypy_passes_the_sketch_and_sees_a_member_it_lacks(tmp_path: Path) -> None:
    source, _, cls = sketch()
    module = tmp_path / f"{MODULE}.py"
    module.write_text(source)
    checked = _mypy(module)
    assert checked.returncode == 0, checked.stdout
    module.write_text(source.replace("    async def check(", "    async def not_check("))
    lacking = _mypy(module)
    assert lacking.returncode == 1 and f'"type[{cls}]", variable has type "type[FormalVerifier]"' in lacking.stdout
