"""`veriloop solve FILE`: method choice, clear refusals, and the real Dafny filling in a removed loop invariant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from veriloop.cli import main
from veriloop.cli.solve_cmd import plan_solve
from veriloop.config import load_settings
from veriloop.errors import ConfigError
from veriloop.records import Prompt
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend, prompt_text

NAGINI_NO_INVARIANT = """from nagini_contracts.contracts import *


def count(n: int) -> int:
    Requires(n >= 0)
    Ensures(Result() == n)
    i = 0
    while i < n:
        i += 1
    return i
"""
NAGINI_WITH_INVARIANT = NAGINI_NO_INVARIANT.replace("        i += 1\n", "        Invariant(i <= n)\n        i += 1\n")

NO_INVARIANT = """method CountUp(n: nat) returns (i: nat)
  ensures i == n
{
  i := 0;
  while i < n
  {
    i := i + 1;
  }
}
"""
WITH_INVARIANT = NO_INVARIANT.replace("  while i < n\n", "  while i < n\n    invariant i <= n\n")
WEAKENED = WITH_INVARIANT.replace("  ensures i == n\n", "  ensures i >= 0\n")


def _plan(path: Path, code: str, **flags: str | None) -> str:
    options = {"spec": None, "tests": None, "to": None, "source": None, **flags}
    return plan_solve(path, code, width=2, depth=1, turns=1, n=1, max_tokens=64, **options).method  # type: ignore[arg-type]


def test_the_method_follows_the_file_and_the_flags(tmp_path: Path) -> None:
    assert _plan(tmp_path / "a.dfy", NO_INVARIANT) == "alphaverus"
    assert _plan(tmp_path / "a.py", "def f():\n    return 1\n") == "alphaverus"  # Nagini
    assert _plan(tmp_path / "a.py", "def f():\n    return 1\n", tests="assert f() == 1\n") == "mucode"
    assert _plan(tmp_path / "a.cpp", "int f() { return 1; }", to="python", tests="#TOFILL\n") == "f2strans"
    assert _plan(tmp_path / "a.cpp", "int f() { return 1; }", to="python") == "f2strans"  # builds-and-runs only
    with pytest.raises(ConfigError, match=r"cannot tell the language of a\.txt"):
        _plan(tmp_path / "a.txt", "x")
    with pytest.raises(ConfigError, match="does not parse as Python \\(line 1"):
        _plan(tmp_path / "a.py", "def f(:\n", tests="assert True\n")
    with pytest.raises(ConfigError, match="needs --to LANG"):
        _plan(tmp_path / "a.java", "class A {}")


def test_missing_files_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "solve", str(tmp_path / "nope.dfy")]) == 3
    err = capsys.readouterr().err
    assert "error: program" in err and "does not exist" in err and "Traceback" not in err


def _invariant_model(prompt: Prompt) -> str:
    """A scripted model that proposes the missing invariant for any prompt holding the program."""
    assert "CountUp" in prompt_text(prompt) or any("CountUp" in m.content for m in prompt if not isinstance(m, str))
    if "// loop 1" in prompt_text(prompt) or any("// loop 1" in m.content for m in prompt if not isinstance(m, str)):
        return "// loop 1\ninvariant i <= n\n"  # hints mode (the default): only the loop's annotations
    return f"```dafny\n{WITH_INVARIANT}```"


@pytest.mark.dafny
@pytest.mark.slow
def test_solve_fills_in_a_removed_loop_invariant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "count.dfy"
    program.write_text(NO_INVARIANT)
    out = tmp_path / "fixed.dfy"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([_invariant_model])))
    home = tmp_path / "home"
    args = ["--home", str(home), "--backend", "scripted", "solve", str(program), "--width", "1", "--depth", "1"]
    assert main([*args, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "verdict: verified" in captured.out
    assert "+    invariant i <= n" in captured.out and "--- a/count.dfy" in captured.out
    assert out.read_text() == WITH_INVARIANT and "alphaverus on" in captured.err
    run_id = captured.out.rsplit("run id: ", 1)[1].split()[0]
    assert main(["--home", str(home), "runs", "show", run_id, "--json"]) == 0
    assert run_id in capsys.readouterr().out
    with TrajectoryStore.from_settings(load_settings(paths={"home": home})) as store:
        run = store.get_run(run_id)
        [attempt] = store.list_attempts(run_id)
        assert run.agent == "alphaverus" and attempt.status == "passed"
        assert run.settings["solve"]["file"] == str(program.resolve())
        [task] = store.list_tasks(suite=run.suite.rsplit("/", 1)[1].removesuffix(".jsonl"))
        assert task.spec == NO_INVARIANT and task.metadata["verifier"] == "dafny"


@pytest.mark.dafny
@pytest.mark.slow
def test_solve_refuses_a_proof_that_weakens_the_spec_and_a_program_that_does_not_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "count.dfy"
    program.write_text(NO_INVARIANT)
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([f"```dafny\n{WEAKENED}```"])))
    home = tmp_path / "home"
    args = ["--home", str(home), "--backend", "scripted", "solve", str(program), "--width", "1", "--depth", "1"]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"].startswith("not verified") and report["run_id"]
    broken = tmp_path / "broken.dfy"
    broken.write_text("method M( {\n}\n")
    assert main(["--home", str(home), "solve", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "does not parse for dafny" in err and "fix the syntax first" in err and "Traceback" not in err


@pytest.mark.bwrap
def test_solve_repairs_python_against_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "add.py"
    program.write_text("def add(a, b):\n    return a - b\n")
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(1, 2) == 3\nassert add(0, 0) == 0\n")
    reply = "```python\ndef add(a, b):\n    return a + b\n```"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([reply])))
    code = main(
        [
            "--home",
            str(tmp_path / "home"),
            "--backend",
            "scripted",
            "solve",
            str(program),
            "--tests",
            str(tests),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["method"] == "mucode" and report["verdict"] == "passed"
    assert "-    return a - b\n+    return a + b\n" in report["diff"]


@pytest.mark.bwrap
def test_solve_translates_with_f2strans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "twice.cpp"
    source.write_text("int twice(int x) {\n  return 2 * x;\n}\n")
    harness = tmp_path / "harness.py"
    harness.write_text(
        "#TOFILL\n\nif __name__ == '__main__':\n    cases = [(1, 2), (5, 10)]\n"
        "    passed = sum(f_filled(x) == y for x, y in cases)\n    print(f'#Results: {passed}, {len(cases)}')\n"
    )
    reply = "```python\ndef twice(x):\n    return 2 * x\n```"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([reply])))
    code = main(
        [
            "--home",
            str(tmp_path / "home"),
            "--backend",
            "scripted",
            "solve",
            str(source),
            "--to",
            "python",
            "--tests",
            str(harness),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["method"] == "f2strans" and report["verdict"] == "passed", report
    assert "return 2 * x" in report["program"]


@pytest.mark.dafny
@pytest.mark.slow
@pytest.mark.model
def test_solve_with_the_embedded_model_reports_what_it_gets(
    model_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "count.dfy"
    program.write_text(NO_INVARIANT)
    code = main(
        [
            "--home",
            str(model_home),
            "--backend",
            "embedded",
            "solve",
            str(program),
            "--width",
            "1",
            "--depth",
            "1",
            "--max-tokens",
            "160",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["run_id"] and report["status"] == "finished"
    assert report["verdict"] == "verified" or report["verdict"].startswith("not verified (")
    if report["program"] is not None:
        assert report["diff"] or report["program"] == NO_INVARIANT


def _nagini_python() -> Path:
    from veriloop.verifiers.nagini import default_python

    return default_python(load_settings())  # the `nagini` marker has skipped the test when it is missing


def _nagini_invariant_model(prompt: Prompt) -> str:
    """Proposes the missing loop invariant, but only when the prompt holds the Nagini program."""
    seen = prompt_text(prompt) if isinstance(prompt, str) else "\n".join(m.content for m in prompt)
    assert "def count(n: int)" in seen and "Invariant(" not in seen.split("def count", 1)[1].split("return i")[0]
    return f"```python\n{NAGINI_WITH_INVARIANT}```"


@pytest.mark.slow
@pytest.mark.nagini
def test_solve_fills_in_a_removed_nagini_invariant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real Nagini twice: the input fails (precheck), the scripted model's invariant verifies."""
    from veriloop.verifiers.nagini import close_workers

    monkeypatch.setenv("VERILOOP_VERIFIERS__NAGINI_PYTHON", str(_nagini_python()))
    monkeypatch.setenv("VERILOOP_VERIFIERS__TIMEOUT_S", "300")  # a loaded 2-core CI machine, as tests/verifiers do
    program = tmp_path / "count.py"
    program.write_text(NAGINI_NO_INVARIANT)
    out = tmp_path / "fixed.py"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([_nagini_invariant_model])))
    home = tmp_path / "home"
    args = ["--home", str(home), "--backend", "scripted", "solve", str(program), "--width", "1", "--depth", "1"]
    try:
        assert main([*args, "--out", str(out)]) == 0
    finally:
        close_workers()
    captured = capsys.readouterr()
    assert "verdict: verified" in captured.out and "alphaverus on" in captured.err and "(nagini)" in captured.err
    assert "+        Invariant(i <= n)" in captured.out and "--- a/count.py" in captured.out
    assert out.read_text() == NAGINI_WITH_INVARIANT
    run_id = captured.out.rsplit("run id: ", 1)[1].split()[0]
    with TrajectoryStore.from_settings(load_settings(paths={"home": home})) as store:
        [attempt] = store.list_attempts(run_id)
        assert store.get_run(run_id).agent == "alphaverus" and attempt.status == "passed"
        node = store.get_node(attempt.best_node_id or "")
        assert node.verify_result is not None and node.verify_result.status.value == "verified"


def test_solve_on_verus_without_verus_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERILOOP_VERIFIERS__VERUS", str(tmp_path / "no-such-verus"))
    program = tmp_path / "abs.rs"
    program.write_text("use vstd::prelude::*;\nverus! {\nfn abs(x: i32) -> (r: i32) ensures r >= 0 { x }\n}\n")
    assert main(["--home", str(tmp_path / "home"), "solve", str(program)]) == 7
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("error: verus could not check the program") and "set verifiers.verus" in line
    assert captured.out == "" and not (tmp_path / "home" / "solves").exists()  # no run was started


def test_solve_translates_without_tests_and_says_it_only_built_and_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --tests: the real sandbox only runs the translation; a wrong one is not called a pass, a broken one fails."""
    source = tmp_path / "twice.cpp"
    source.write_text("int twice(int x) {\n    return 2 * x;\n}\n")
    replies = iter(
        [
            "```python\ndef twice(x):\n    return 3 * x\n```",  # wrong, yet it runs: "builds and runs", no more
            "```python\ndef twice(x)\n    return 2 * x\n```",  # a syntax error: does not run
        ]
    )
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([next(replies)])))
    args = [
        "--home",
        str(tmp_path / "home"),
        "--backend",
        "scripted",
        "solve",
        str(source),
        "--to",
        "python",
        "--turns",
        "1",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "verdict: builds and runs (not functionally checked: no --tests)" in out
    assert "note: no --tests: the translation was only built and run, not functionally checked" in out
    assert "return 3 * x" in out
    run_id = out.rsplit("run id: ", 1)[1].split()[0]
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path / "home"})) as store:
        [attempt] = store.list_attempts(run_id)
        node = store.get_node(attempt.best_node_id or "")
        assert node.exec_result is not None and [t.name for t in node.exec_result.tests] == ["builds_and_runs"]
        [task] = store.list_tasks(suite=store.get_run(run_id).suite.rsplit("/", 1)[1].removesuffix(".jsonl"))
        assert "not functionally checked" in task.metadata["check"] and task.prompt == source.read_text()
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "failed to build or run" and report["functionally_checked"] is False


@pytest.mark.slow
def test_solve_without_tests_builds_a_cpp_translation_for_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The C++ build-only program compiles with the sandbox's g++ around a translated function."""
    source = tmp_path / "twice.py"
    source.write_text("def twice(x):\n    return 2 * x\n")
    reply = "```cpp\nint twice(int x) {\n    return 2 * x;\n}\n```"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([reply])))
    assert (
        main(
            [
                "--home",
                str(tmp_path / "home"),
                "--backend",
                "scripted",
                "solve",
                str(source),
                "--to",
                "cpp",
                "--turns",
                "1",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "builds and runs (not functionally checked: no --tests)", report
    assert "int twice(int x)" in report["program"]


BUILD_ONLY_FUNCTIONS = {
    "c": "int twice(int x) {\n    return 2 * x;\n}",
    "java": "static int twice(int x) {\n    return 2 * x;\n}",
    "go": "func twice(x int) int {\n\treturn 2 * x\n}",
    "rust": "fn twice(x: i32) -> i32 {\n    2 * x\n}",
}


@pytest.fixture(scope="module")
def box() -> Iterator[Any]:
    from veriloop.sandbox.bwrap import BwrapSandbox

    sandbox = BwrapSandbox(warm_workers=1)
    yield sandbox
    sandbox.close()


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("language", sorted(BUILD_ONLY_FUNCTIONS))
def test_the_build_only_program_builds_around_a_function(box: Any, language: str) -> None:
    """The C, Java, Go and Rust build-only programs (Python and C++ run above) compile in the real sandbox."""
    import asyncio

    from veriloop.records import ExecStatus
    from veriloop.sandbox.build_only import CHECK, build_only_program
    from veriloop.sandbox.languages import available, harness_job

    if not available(language, box.toolchain):
        pytest.skip(f"the {language} toolchain is not installed here (scripts/setup-sandbox.sh installs it)")
    job = harness_job(language, box.toolchain, BUILD_ONLY_FUNCTIONS[language], build_only_program(language))
    result = asyncio.run(box.run(job))
    assert result.status is ExecStatus.PASSED, result
    assert [test.name for test in result.tests] == [CHECK]
