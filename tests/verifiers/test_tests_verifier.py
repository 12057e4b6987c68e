"""The `tests` verifier: the task's tests in the real sandbox, mapped onto VerifyResult."""

from __future__ import annotations

from pathlib import Path

from veriloop.config import load_settings
from veriloop.records import Candidate, ExecResult, ExecStatus, Task, TestOutcome, VerifyStatus
from veriloop.verifiers import get_verifier
from veriloop.verifiers.tests import result_from_exec

TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
TASK = Task(id="add", suite="s", prompt="def add(a, b):\n", entry_point="add", tests=TESTS)


def test_exec_results_map_onto_verdicts() -> None:
    passed = result_from_exec(ExecResult(status=ExecStatus.PASSED, tests=[TestOutcome(name="t1", passed=True)]))
    assert (passed.status, passed.verified, passed.errors, passed.score) == (VerifyStatus.VERIFIED, 1, 0, 1.0)
    half = result_from_exec(
        ExecResult(
            status=ExecStatus.FAILED,
            tests=[TestOutcome(name="a", passed=True), TestOutcome(name="b", passed=False, message="assert 1 == 2")],
        )
    )
    assert (half.status, half.verified, half.errors, half.score) == (VerifyStatus.FAILED, 1, 1, 0.5)
    assert half.diagnostics[0].kind == "test" and "assert 1 == 2" in half.diagnostics[0].message
    compile_error = result_from_exec(ExecResult(status=ExecStatus.COMPILE_ERROR, stderr="SyntaxError: bad"))
    assert compile_error.status is VerifyStatus.SYNTAX_ERROR and compile_error.diagnostics[0].kind == "syntax"
    assert result_from_exec(ExecResult(status=ExecStatus.TIMEOUT)).status is VerifyStatus.TIMEOUT


async def test_real_sandbox_runs_the_tests(tmp_path: Path) -> None:
    verifier = get_verifier(load_settings(paths={"home": tmp_path}, sandbox={"timeout_s": 2}), "tests")
    try:
        good = await verifier.verify(Candidate(task_id="add", code="def add(a, b):\n    return a + b\n"), TASK)
        bad = await verifier.verify(Candidate(task_id="add", code="def add(a, b):\n    return a - b\n"), TASK)
        broken = await verifier.verify(Candidate(task_id="add", code="def add(a, b) return\n"), TASK)
        slow = await verifier.verify(Candidate(task_id="add", code="def add(a, b):\n    while True: pass\n"), TASK)
    finally:
        await verifier.aclose()
    assert good.status is VerifyStatus.VERIFIED and good.tool == "tests"
    assert bad.status is VerifyStatus.FAILED and bad.errors >= 1
    assert broken.status in (VerifyStatus.SYNTAX_ERROR, VerifyStatus.FAILED)
    assert slow.status is VerifyStatus.TIMEOUT
