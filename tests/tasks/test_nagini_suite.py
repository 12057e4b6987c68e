"""`nagini-hints`: the bundled programs verify with their invariants (guarded, against the task's spec) and fail
without them, with the real Nagini through one warm worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from veriloop.config import load_settings
from veriloop.records import Candidate, Task, VerifyStatus
from veriloop.tasks import load_suite
from veriloop.tasks.nagini_hints import remove_hints
from veriloop.verifiers.guard import NAGINI, GuardedVerifier
from veriloop.verifiers.nagini import NaginiVerifier, default_python

TASKS = load_suite("nagini-hints", load_settings()).tasks


def test_the_suite_is_ten_hints_tasks_with_the_spec_kept() -> None:
    assert len(TASKS) == 10 and len({task.id for task in TASKS}) == 10
    for task in TASKS:
        assert task.metadata == {"verifier": "nagini", "mode": "hints"} and task.language == "python"
        assert task.spec == task.prompt == remove_hints(task.reference or "") and "Invariant(" not in task.prompt
        removed = set((task.reference or "").splitlines()) - set(task.prompt.splitlines())
        assert removed and all(line.strip().startswith("Invariant(") for line in removed)
        assert "Ensures(" in task.prompt and "while " in task.prompt


@pytest.fixture(scope="module")
def guarded() -> Iterator[GuardedVerifier]:
    yield GuardedVerifier(NaginiVerifier(default_python(load_settings()), timeout_s=300), NAGINI)


@pytest.mark.slow
@pytest.mark.nagini
@pytest.mark.bwrap
@pytest.mark.parametrize("task", TASKS, ids=[task.id.split("/")[1] for task in TASKS])
async def test_ground_truth_verifies_and_the_hints_removed_program_fails(task: Task, guarded: GuardedVerifier) -> None:
    truth = await guarded.verify(Candidate(task_id=task.id, code=task.reference or ""), task)
    assert truth.status is VerifyStatus.VERIFIED, (truth.reason, truth.diagnostics)
    bare = await guarded.verify(Candidate(task_id=task.id, code=task.prompt), task)
    assert bare.status is VerifyStatus.FAILED, (bare.reason, bare.diagnostics)
    assert all(diagnostic.line is not None for diagnostic in bare.diagnostics)
