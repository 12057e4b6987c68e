"""`nagini-hints`: the bundled programs verify with their invariants and fail without them (the real Nagini)."""

from __future__ import annotations

import ast

import pytest

from veriloop.config import load_settings
from veriloop.records import VerifyResult, VerifyStatus
from veriloop.tasks import load_suite
from veriloop.tasks.nagini_hints import remove_hints
from veriloop.verifiers.guard import static_check
from veriloop.verifiers.nagini import NaginiVerifier, default_python, functions
from veriloop.verifiers.nagini_dialect import NAGINI

TASKS = load_suite("nagini-hints", load_settings()).tasks


def test_the_suite_is_ten_hints_tasks_with_the_spec_kept() -> None:
    assert len(TASKS) == 10 and len({task.id for task in TASKS}) == 10
    for task in TASKS:
        assert task.metadata == {"verifier": "nagini", "mode": "hints"} and task.language == "python"
        assert task.spec == task.prompt == remove_hints(task.reference or "") and "Invariant(" not in task.prompt
        removed = set((task.reference or "").splitlines()) - set(task.prompt.splitlines())
        assert removed and all(line.strip().startswith("Invariant(") for line in removed)
        assert "Ensures(" in task.prompt and "while " in task.prompt


def combined(programs: list[str]) -> str:
    """One module holding every program's functions (imports once, a shared helper once): Nagini checks each
    function on its own, so one run judges all programs."""
    imports: dict[str, None] = {}
    functions: dict[str, str] = {}
    for program in programs:
        lines = program.splitlines()
        for node in ast.parse(program).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                imports[ast.unparse(node)] = None
            elif isinstance(node, ast.FunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                text = "\n".join(lines[first - 1 : node.end_lineno])
                assert functions.setdefault(node.name, text) == text, f"two different {node.name}"
    return "\n".join(imports) + "\n\n\n" + "\n\n\n".join(functions.values()) + "\n"


def failing_functions(code: str, result: VerifyResult) -> set[str]:
    return {name for name, first, last in functions(code) for d in result.diagnostics if first <= (d.line or 0) <= last}


@pytest.mark.slow
@pytest.mark.nagini
@pytest.mark.bwrap
async def test_ground_truths_verify_and_every_hints_removed_program_fails() -> None:
    """Two Nagini runs (ground truths, then hints-removed programs, each batched into one module); the ground
    truths also pass the guard's static rules against their task's spec (the probes run in the hints tests)."""
    nagini = NaginiVerifier(default_python(load_settings()), timeout_s=600)
    for task in TASKS:
        assert static_check(NAGINI, task.reference or "", task.spec) is None, task.id
    truths = combined([task.reference or "" for task in TASKS])
    result = await nagini.check(truths)
    assert result.status is VerifyStatus.VERIFIED, [(d.line, d.message) for d in result.diagnostics]
    removed = combined([task.prompt for task in TASKS])
    result = await nagini.check(removed)
    assert result.status is VerifyStatus.FAILED and all(d.line is not None for d in result.diagnostics)
    assert failing_functions(removed, result) == {task.id.split("/")[1] for task in TASKS}
