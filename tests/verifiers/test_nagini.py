"""Nagini: the reply parser on recorded worker replies, and real programs through the shared warm worker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from veriloop.records import Candidate, Task, VerifyStatus
from veriloop.verifiers.guard import GuardedVerifier
from veriloop.verifiers.nagini import NaginiVerifier, WorkerError, classify, result_from_reply
from veriloop.verifiers.nagini_dialect import NAGINI

DATA = Path(__file__).parent / "data" / "nagini"
V, F, S, T, R = (
    VerifyStatus.VERIFIED,
    VerifyStatus.FAILED,
    VerifyStatus.SYNTAX_ERROR,
    VerifyStatus.TIMEOUT,
    VerifyStatus.REJECTED,
)

EXPECTED: dict[str, tuple[VerifyStatus, str]] = {
    "abs_ok": (V, ""),
    "max_ok": (V, ""),
    "sum_loop_ok": (V, ""),
    "list_ok": (V, ""),
    "class_ok": (V, ""),
    "post_fail": (F, "postcondition"),
    "precondition_fail": (F, "precondition"),
    "list_index_fail": (F, "precondition"),
    "invariant_entry_fail": (F, "invariant"),
    "invariant_preserved_fail": (F, "invariant"),
    "assert_fail": (F, "assertion"),
    "permission_fail": (F, "permission"),
    "syntax_error": (S, "syntax"),
    "type_error": (S, "type"),
    "hack_assume": (R, "Assume"),
    "hack_ensures_true": (R, "trivial postcondition"),
    "hack_trivial_post": (R, "trivial postcondition"),
    "hack_post_any_result": (R, "any result"),
    "hack_contradictory_requires": (R, "unsatisfiable"),
    "hack_vacuous_pure": (R, "vacuous precondition"),
    "hack_endless_loop": (R, "unreachable end"),
}

RECORDED_FAILURE = {
    "id": 1,
    "status": "failed",
    "errors": [
        {
            "id": "postcondition.violated:assertion.false",
            "message": "Postcondition of dec might not hold.",
            "line": 11,
            "column": 13,
        },
        {
            "id": "invariant.not.established:assertion.false",
            "message": "Loop invariant might not hold on entry.",
            "line": 22,
            "column": 19,
        },
    ],
    "text": "Verification failed",
}
PROGRAM = (
    "def inc(x: int) -> int:\n    return x\n\n\n" + "\n" * 5 + "def dec(x: int) -> int:\n    return x\n" + "\n" * 8
)
PROGRAM += "def loop(n: int) -> int:\n" + "    n = n\n" * 5 + "    return n\n"


def test_recorded_reply_is_parsed_into_classified_diagnostics() -> None:
    result = result_from_reply(PROGRAM, RECORDED_FAILURE, "1.2.0", 1.5)
    assert result.status is F and result.errors == 2
    assert [(d.kind, d.line, d.column) for d in result.diagnostics] == [
        ("postcondition", 11, 13),
        ("invariant", 22, 19),
    ]
    assert result.verified == 1  # of inc, dec and loop only inc has no error
    assert -1.0 < result.score < 1.0


def test_classes_of_nagini_error_ids() -> None:
    assert classify("call.precondition:assertion.false") == "precondition"
    assert classify("invariant.not.preserved:assertion.false") == "invariant"
    assert classify("assert.failed:assertion.false") == "assertion"
    assert classify("application.precondition:insufficient.permission") == "precondition"
    assert classify("exhale.failed:insufficient.permission") == "permission"
    assert classify("termination_check.failed") == "decreases"


def test_every_fixture_has_a_verdict() -> None:
    assert {path.stem for path in DATA.glob("*.nagini")} == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_fixture_verdicts(name: str, nagini: NaginiVerifier) -> None:
    status, detail = EXPECTED[name]
    code = (DATA / f"{name}.nagini").read_text()
    task = Task(id="t", suite="s", prompt="")
    result = await GuardedVerifier(nagini, NAGINI).verify(Candidate(task_id="t", code=code), task)
    assert result.status is status, (result.reason, result.diagnostics)
    assert result.tool == "nagini" and result.version == "1.2.0"
    if status is R:
        assert result.reason and detail in result.reason
    elif status is V:
        assert result.errors == 0 and result.score == 1.0
    else:
        assert detail in {d.kind for d in result.diagnostics}
        assert all(d.line is not None for d in result.diagnostics)


@pytest.mark.slow
async def test_spec_guard_against_a_task_spec(nagini: NaginiVerifier) -> None:
    spec = (DATA / "abs_ok.nagini").read_text()
    task = Task(id="t", suite="s", prompt="", spec=spec)
    reworded = spec.replace("Ensures(Result() == x or Result() == -x)", "Ensures(Result() == -x or x == Result())")
    result = await GuardedVerifier(nagini, NAGINI).verify(Candidate(task_id="t", code=reworded), task)
    assert result.status is V, result.reason
    weakened = spec.replace("    Ensures(Result() >= 0)\n", "")
    result = await GuardedVerifier(nagini, NAGINI).verify(Candidate(task_id="t", code=weakened), task)
    assert result.status is R and "weaker" in (result.reason or "")


@pytest.mark.slow
def test_worker_is_recycled_after_a_timeout_and_serves_again(nagini: NaginiVerifier, tmp_path: Path) -> None:
    """The session's shared worker: killed on a time-out, started afresh by the next request (one cold start)."""
    worker = nagini.worker
    path = tmp_path / "p.py"
    path.write_text((DATA / "sum_loop_ok.nagini").read_text())
    worker.ensure_started()
    started = worker.starts
    with pytest.raises(WorkerError, match="timeout"):
        worker.request(path.read_text(), timeout_s=0.01)
    assert not worker.alive
    reply = worker.request(path.read_text(), timeout_s=300)
    assert reply.payload["status"] == "verified" and worker.starts == started + 1


@pytest.mark.slow
async def test_warm_worker_is_faster_than_its_cold_start(nagini: NaginiVerifier) -> None:
    """Not a timing claim (bench verify measures it): the warm path must not pay the JVM start again."""
    code = (DATA / "max_ok.nagini").read_text()
    await nagini.check(code)
    starts = nagini.worker.starts
    began = time.perf_counter()
    result = await nagini.check(code)
    assert result.status is V and nagini.worker.starts == starts
    assert time.perf_counter() - began >= result.duration_s


@pytest.mark.slow
def test_the_warm_worker_outlives_the_event_loop_that_started_it(nagini: NaginiVerifier) -> None:
    """bwrap's --die-with-parent fires when the forking *thread* ends; a worker forked from an event loop's
    executor thread died with each `asyncio.run` (every CLI command and test paid a cold JVM start)."""
    import asyncio

    code = (DATA / "max_ok.nagini").read_text()
    assert asyncio.run(nagini.check(code)).status is V
    starts = nagini.worker.starts
    assert asyncio.run(nagini.check(code)).status is V
    assert nagini.worker.alive and nagini.worker.starts == starts


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "from nagini_contracts.contracts import *\n\ndef f(x: int) -> int:\n    Ensures(False)\n    Assume(False)\n"
        "    return x\x00\n",
        "from nagini_contracts.contracts import *\n\ndef f(x: int) -> int:\n    Ensures(False)\n    Assume(False)\n"
        "    return (x\n",
    ],
    ids=["null-byte", "unclosed-paren"],
)
async def test_an_escape_hidden_behind_a_syntax_error_is_never_a_proof(code: str, nagini: NaginiVerifier) -> None:
    """A program Python cannot parse: the guard's text scan still sees the escape (rejected), and without it Nagini's
    host-side parse answers syntax_error; either way never verified."""
    task = Task(id="t", suite="s", prompt="")
    result = await GuardedVerifier(nagini, NAGINI).verify(Candidate(task_id="t", code=code), task)
    assert result.status in (R, S) and result.status is not V
    honest = code.replace("    Assume(False)\n", "")
    unguarded = await GuardedVerifier(nagini, NAGINI).verify(Candidate(task_id="t", code=honest), task)
    assert unguarded.status is S  # the same syntax error with no escape: Nagini's own verdict
