"""`veriloop verify` and `veriloop bench verify` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.cli import main

DATA = Path(__file__).parent / "data"
KEYS = {"status", "verified", "errors", "diagnostics", "score", "tool", "version", "duration_s", "cache_hit", "reason"}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--home", str(tmp_path), "verify", str(tmp_path / "nope.dfy"), "--verifier", "dafny")
    assert code != 0 and err.strip() == f"error: program {tmp_path / 'nope.dfy'} does not exist"
    program = DATA / "dafny" / "abs_ok.dfy"
    code, _, err = _run(capsys, "--home", str(tmp_path), "verify", str(program), "--verifier", "coq")
    assert code != 0 and "unknown verifier 'coq'" in err and "dafny" in err and "Traceback" not in err


def test_rejected_candidate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = DATA / "dafny" / "hack_assume.dfy"
    code, out, _ = _run(capsys, "--home", str(tmp_path), "verify", str(program), "--verifier", "dafny", "--json")
    payload = json.loads(out)
    assert code == 1 and set(payload) == KEYS
    assert payload["status"] == "rejected" and "assume" in payload["reason"]


def test_tests_verifier_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program, tests = tmp_path / "add.py", tmp_path / "tests.py"
    program.write_text("def add(a, b):\n    return a + b\n")
    tests.write_text("def check(candidate):\n    assert candidate(2, 3) == 5\n")
    argv = [
        "--home",
        str(tmp_path),
        "verify",
        str(program),
        "--verifier",
        "tests",
        "--tests",
        str(tests),
        "--entry-point",
        "add",
        "--json",
    ]
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and json.loads(out)["status"] == "verified"


def test_stored_task_supplies_spec_and_tests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veriloop.config import load_settings
    from veriloop.records import Task
    from veriloop.store import TrajectoryStore

    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        store.upsert_tasks(
            [
                Task(
                    id="demo/add",
                    suite="demo",
                    prompt="",
                    entry_point="add",
                    tests="def check(candidate):\n    assert candidate(2, 3) == 5\n",
                )
            ]
        )
    program = tmp_path / "add.py"
    program.write_text("def add(a, b):\n    return a * b\n")
    argv = ["--home", str(tmp_path), "verify", str(program), "--verifier", "tests", "--task", "demo/add", "--json"]
    code, out, _ = _run(capsys, *argv)
    assert code == 1 and json.loads(out)["status"] == "failed"
    code, _, err = _run(capsys, *argv[:-3], "--task", "demo/none")
    assert code != 0 and err.startswith("error: ") and "demo/none" in err


@pytest.mark.slow
@pytest.mark.dafny
def test_dafny_failure_with_spec_and_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = DATA / "dafny" / "invariant_maintained_fail.dfy"
    argv = ["--home", str(tmp_path), "verify", str(program), "--verifier", "dafny", "--spec", str(program), "--json"]
    code, out, _ = _run(capsys, *argv)
    first = json.loads(out)
    assert code == 1 and first["status"] == "failed" and not first["cache_hit"]
    [error] = [d for d in first["diagnostics"] if d["severity"] == "error"]
    assert (error["class"], error["line"]) == ("invariant", 8)
    assert set(error) == {"severity", "class", "message", "line", "column"}
    code, out, _ = _run(capsys, *argv)
    assert json.loads(out)["cache_hit"] is True
    code, out, _ = _run(capsys, *argv[:-1], "--no-cache")
    assert code == 1 and "failed: 0 verified, 1 errors" in out and "[invariant] 8:" in out and "(cached)" not in out


@pytest.mark.slow
@pytest.mark.dafny
def test_bench_verify_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--home", str(tmp_path), "bench", "verify", "--dafny", "2", "--nagini", "0")
    report = json.loads(out)
    assert code == 0 and report["dafny"]["programs"] == 2 and report["dafny"]["agree"]
    assert {"cold_s", "warm_s", "cache_s", "cold_over_warm", "warm_over_cache"} <= set(report["dafny"])
