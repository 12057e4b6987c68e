"""Dafny end to end on real programs: every fixture and a sample of DafnyBench with its known verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from veriloop.records import Candidate, Task, VerifyStatus
from veriloop.verifiers.dafny import DafnyVerifier
from veriloop.verifiers.dafny_dialect import DAFNY
from veriloop.verifiers.guard import GuardedVerifier, probe_check

DATA = Path(__file__).parent / "data"
V, F, S, T, R = (
    VerifyStatus.VERIFIED,
    VerifyStatus.FAILED,
    VerifyStatus.SYNTAX_ERROR,
    VerifyStatus.TIMEOUT,
    VerifyStatus.REJECTED,
)

EXPECTED: dict[str, tuple[VerifyStatus, str]] = {
    # name: (status, error class or a word of the rejection reason)
    "abs_ok": (V, ""),
    "max_array_ok": (V, ""),
    "sum_loop_ok": (V, ""),
    "post_fail": (F, "postcondition"),
    "invariant_entry_fail": (F, "invariant"),
    "invariant_maintained_fail": (F, "invariant"),
    "precondition_fail": (F, "precondition"),
    "decreases_fail": (F, "decreases"),
    "assertion_fail": (F, "assertion"),
    "index_fail": (F, "index"),
    "parse_error": (S, "parse"),
    "resolution_error": (S, "resolution"),
    "type_error": (S, "resolution"),
    "timeout_nonlinear": (T, "timeout"),
    "hack_assume": (R, "assume"),
    "hack_axiom": (R, "axiom"),
    "hack_bodiless": (R, "no body"),
    "hack_verify_false": (R, "verify false"),
    "hack_ensures_true": (R, "trivial postcondition"),
    "hack_contradictory_requires": (R, "unsatisfiable"),
    "hack_vacuous_predicate": (R, "vacuous precondition"),
    "hack_trivial_post_function": (R, "trivial postcondition"),
    "hack_decreases_star": (R, "decreases *"),
}

DAFNYBENCH = [
    "Clover_abs",
    "Clover_array_sum",
    "Clover_below_zero",
    "Clover_avg",
    "Clover_array_copy",
    "Clover_binary_search",
]
"""Ground-truth programs that Debian's Dafny 2.3 verifies (many DafnyBench files need newer syntax)."""


def fixture(name: str) -> str:
    return (DATA / "dafny" / f"{name}.dfy").read_text()


def task_for(spec: str | None = None) -> Task:
    return Task(id="t", suite="tests", prompt="", language="dafny", spec=spec)


def test_every_fixture_has_a_verdict() -> None:
    assert {path.stem for path in (DATA / "dafny").glob("*.dfy")} == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_fixture_verdicts(name: str, dafny: DafnyVerifier) -> None:
    status, detail = EXPECTED[name]
    result = await GuardedVerifier(dafny, DAFNY).verify(Candidate(task_id="t", code=fixture(name)), task_for())
    assert result.status is status, (result.reason, result.diagnostics)
    assert result.tool == "dafny" and result.version.startswith(("2.", "3.", "4."))
    if status is R:
        assert result.reason and detail in result.reason
    elif status is V:
        assert result.errors == 0 and result.verified >= 1 and result.score == 1.0
        assert result.cpu_s is not None and result.max_rss_mb is not None and result.max_rss_mb > 1
    else:
        assert detail in {d.kind for d in result.diagnostics if d.severity == "error"}
        assert all(d.line is not None for d in result.diagnostics if d.kind != "timeout" or d.line)
        assert result.score == -1.0 if status is not F else -1.0 < result.score < 1.0


GROUND_TRUTH = "dafnybench/DafnyBench/dataset/ground_truth"


def _bench(data_dir: Path, name: str) -> str:
    return (data_dir / GROUND_TRUTH / f"{name}.dfy").read_text()


@pytest.mark.slow
@pytest.mark.data(GROUND_TRUTH)
@pytest.mark.parametrize("name", DAFNYBENCH)
async def test_dafnybench_programs_verify_and_pass_the_guard_against_their_own_spec(
    name: str, dafny: DafnyVerifier, data_dir: Path
) -> None:
    code = _bench(data_dir, name)
    result = await GuardedVerifier(dafny, DAFNY).verify(Candidate(task_id=name, code=code), task_for(spec=code))
    assert result.status is V, (result.reason, result.diagnostics)


@pytest.mark.data(GROUND_TRUTH)
@pytest.mark.parametrize("name", DAFNYBENCH)
async def test_dafnybench_weakened_specs_are_rejected_before_the_tool_runs(name: str, data_dir: Path) -> None:
    code = _bench(data_dir, name)
    ensures = re.findall(r"^\s*ensures .*$", code, flags=re.M)
    assert ensures
    weakened = code.replace(ensures[-1] + "\n", "", 1)  # one postcondition dropped

    class Unused:
        name = "dafny"

        async def version(self) -> str:
            return "test"

        def options(self) -> dict[str, object]:
            return {}

        async def verify(self, candidate: Candidate, task: Task) -> object:
            raise AssertionError("a rejected candidate must not reach the tool")

    result = await GuardedVerifier(Unused(), DAFNY).verify(Candidate(task_id=name, code=weakened), task_for(code))
    assert result.status is R and result.reason


@pytest.mark.slow
async def test_spec_that_differs_only_in_form_passes(dafny: DafnyVerifier) -> None:
    spec = fixture("abs_ok")
    candidate = spec.replace("ensures y >= 0\n  ensures y == x || y == -x", "ensures (y == x || y == -x) && 0 <= y")
    assert candidate != spec
    result = await GuardedVerifier(dafny, DAFNY).verify(Candidate(task_id="t", code=candidate), task_for(spec))
    assert result.status is V, result.reason
    weakened = spec.replace("ensures y == x || y == -x", "ensures y == x || y == -x || y == x + 1")
    result = await GuardedVerifier(dafny, DAFNY).verify(Candidate(task_id="t", code=weakened), task_for(spec))
    assert result.status is R and "weaker" in (result.reason or "")


@pytest.mark.slow
async def test_loop_probe_catches_an_end_that_no_loop_leaves(dafny: DafnyVerifier) -> None:
    """With the static `decreases *` rule out of the way, the AlphaVerus loop probe still rejects the program."""
    code = fixture("hack_decreases_star")
    assert (await dafny.check(code)).status is V  # the hack works on the bare tool
    reason = await probe_check(DAFNY, code, None, dafny.check)
    assert reason is not None and "unreachable end" in reason


@pytest.mark.slow
@pytest.mark.data("mbpp_dfy/MBPP-DFY-153/src")
async def test_mbpp_dfy_programs_from_the_data_dir(dafny: DafnyVerifier, data_dir: Path) -> None:
    """MBPP-DFY is GPL: read at test time, never copied. Each either verifies or fails to parse with Dafny 2.3."""
    folder = data_dir / "mbpp_dfy" / "MBPP-DFY-153" / "src"
    verdicts = []
    for path in sorted(folder.glob("*.dfy"))[:4]:
        result = await GuardedVerifier(dafny, DAFNY).verify(
            Candidate(task_id=path.stem, code=path.read_text()), task_for()
        )
        verdicts.append(result.status)
        assert result.status in (V, S), (path.name, result.reason, result.diagnostics)
    assert V in verdicts
