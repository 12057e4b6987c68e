"""Houdini pruning of hint candidates: union of samples, blame by diagnostic line, the pruning loop (fake verifier;
the real-Dafny case is `test_pruning_with_real_dafny_verifies_from_a_model_union`)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from veriloop.agents.alphaverus.hints import HintsProblem, hint_slots, splice_lines
from veriloop.agents.alphaverus.houdini import Pool, Pruning, blamed, prune, union
from veriloop.config import load_settings
from veriloop.records import Candidate, Diagnostic, Node, Run, Task, VerifyResult, VerifyStatus
from veriloop.search.score import scorer_for
from veriloop.store import TrajectoryStore

SUM = """method Sum(N: int) returns (s: int)
  requires N >= 0
  ensures s == N * (N + 1) / 2
{
  var n := 0;
  s := 0;
  while n != N
  {
    n := n + 1;
    s := s + n;
  }
}
"""
WRONG = {"invariant n == 3": "might not hold on entry", "invariant s <= n": "might not be maintained"}


class RefutingVerifier:
    """Refutes, one per check as Dafny 2.3 does, the first `WRONG` invariant present (on its line); with none
    left it verifies when both needed invariants are there, else fails on the postcondition (line 3)."""

    name = "dafny"

    def __init__(self) -> None:
        self.checked: list[str] = []

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        self.checked.append(candidate.code)
        lines = [line.strip() for line in candidate.code.splitlines()]
        for number, line in enumerate(lines, 1):
            if line in WRONG:
                return failed(Diagnostic(line=number, message=f"This loop invariant {WRONG[line]} by the loop."))
            if line == "decreases n":
                loop = next(i for i, text in enumerate(lines, 1) if text.startswith("while"))
                return failed(Diagnostic(line=loop, message="decreases expression might not decrease"))
        if {"invariant 0 <= n <= N", "invariant s == n * (n + 1) / 2"} <= set(lines):
            return VerifyResult(status=VerifyStatus.VERIFIED, tool="dafny", verified=2)
        return failed(Diagnostic(line=3, message="A postcondition might not hold on this return path."))


def failed(diagnostic: Diagnostic) -> VerifyResult:
    return VerifyResult(status=VerifyStatus.FAILED, tool="dafny", verified=1, errors=1, diagnostics=[diagnostic])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TrajectoryStore]:
    settings = load_settings(paths={"home": tmp_path})
    with TrajectoryStore.from_settings(settings) as opened:
        yield opened


def problem_for(program: str, verifier: object, spec: str | None = None) -> HintsProblem:
    task = Task(id="sum", suite="unit", prompt=program, language="dafny", spec=spec)
    return HintsProblem(task, verifier, scorer_for("dafny"), [], target="dafny", program_text=program)


def root(store: TrajectoryStore) -> Node:
    run = store.create_run(Run(agent="alphaverus", suite="unit", model="scripted"))
    return store.add_node(Node(run_id=run.id, task_id="sum", depth=1, role="refine", code=SUM, score=0.1))


REPLIES = [
    "// loop 1\ninvariant 0 <= n <= N\ninvariant n == 3\ndecreases n\n",
    "// loop 1\ninvariant  0 <= n <= N\ninvariant s <= n\ndecreases N - n\n",
    "// loop 1\ninvariant s == n * (n + 1) / 2\ninvariant 0 <= n <= N\n",
]


def test_union_dedupes_and_orders_by_how_many_samples_proposed_a_hint() -> None:
    pool = union(REPLIES, 1)
    assert pool.invariants[1] == [
        "invariant 0 <= n <= N",
        "invariant n == 3",
        "invariant s <= n",
        "invariant s == n * (n + 1) / 2",
    ]
    assert pool.decreases[1] == ["decreases n", "decreases N - n"]
    assert pool.hints() == {1: [*pool.invariants[1], "decreases n"]}  # one decreases at a time
    assert union(REPLIES, 1, limit=2).invariants[1] == ["invariant 0 <= n <= N", "invariant n == 3"]
    assert union(["prose\n// loop 9\ninvariant true\n"], 1).hints() == {1: []}  # no slot 9, nothing invented


def test_blame_maps_hint_lines_and_a_loops_termination_error_to_its_decreases() -> None:
    slots = hint_slots(SUM)
    spliced = splice_lines(SUM, slots, {1: ["invariant 0 <= n <= N", "invariant n == 3", "decreases n"]})
    lines = spliced.code.splitlines()
    entry = lines.index("    invariant n == 3") + 1
    loop = lines.index("  while n != N") + 1

    def node(*diagnostics: Diagnostic) -> Node:
        result = VerifyResult(status=VerifyStatus.FAILED, tool="dafny", diagnostics=list(diagnostics))
        return Node(run_id="r", task_id="t", verify_result=result)

    assert blamed(node(Diagnostic(line=entry, message="might not hold on entry")), spliced) == {(1, "invariant n == 3")}
    assert blamed(node(Diagnostic(line=loop, message="decreases expression might not decrease")), spliced) == {
        (1, "decreases n")
    }
    assert blamed(node(Diagnostic(line=loop, message="index out of range")), spliced) == set()
    assert blamed(node(Diagnostic(line=3, message="postcondition")), spliced) == set()
    both = node(
        Diagnostic(line=loop, message="decreases expression might not decrease"), Diagnostic(line=entry, message="x")
    )
    assert blamed(both, spliced) == {(1, "decreases n")}  # a second error of the same run may be spurious
    assert both.verify_result is not None
    both.verify_result.status = VerifyStatus.SYNTAX_ERROR  # front-end errors are all real
    assert blamed(both, spliced) == {(1, "decreases n"), (1, "invariant n == 3")}
    assert blamed(node(Diagnostic(severity="note", line=entry, message="related")), spliced) == set()


async def test_pruning_drops_what_the_verifier_refutes_until_it_verifies(store: TrajectoryStore) -> None:
    verifier = RefutingVerifier()
    problem = problem_for(SUM, verifier)
    parent = root(store)
    pool = union(REPLIES, 1)
    proposed = {line for reply in REPLIES for line in re.findall(r"^(?:invariant|decreases) .*$", reply, re.M)}
    out = await prune(problem, pool, parent, store, search_id="s", sources=["a", "b"], max_steps=8)
    assert out.solved and out.spend.verifier_calls == len(out.nodes) == 4 and out.spend.llm_calls == 0
    steps = [node.metadata["blamed"] for node in out.nodes]
    assert steps == [["invariant n == 3"], ["invariant s <= n"], ["decreases n"], []]
    for previous, node in zip([parent, *out.nodes], out.nodes, strict=False):
        assert node.parent_id == previous.id and node.depth == previous.depth + 1 and node.role == "refine"
        assert node.metadata["phase"] == "prune" and store.get_node(node.id).code == node.code
        hints = {line.strip() for line in (node.code or "").splitlines() if line.strip().startswith(("inv", "dec"))}
        assert hints <= {" ".join(line.split()) for line in proposed}  # only the model's text, never added
    again = await prune(problem, union(REPLIES, 1), parent, store, search_id="s")
    assert [node.id for node in again.nodes] == [node.id for node in out.nodes] and len(verifier.checked) == 4
    assert again.solved and again.spend.verifier_calls == 4  # a resumed run reuses its stored steps
    final = out.nodes[-1].code or ""
    assert "invariant s == n * (n + 1) / 2" in final and "decreases N - n" in final and "n == 3" not in final
    assert out.nodes[0].metadata["sources"] == ["a", "b"] and out.nodes[1].metadata["sources"] == []


async def test_pruning_stops_at_a_fixpoint_the_step_limit_or_an_empty_pool(store: TrajectoryStore) -> None:
    verifier = RefutingVerifier()
    problem = problem_for(SUM, verifier)
    parent = root(store)
    fixpoint = await prune(problem, union([REPLIES[0]], 1), parent, store, search_id="s1")
    assert not fixpoint.solved and [n.metadata["blamed"] for n in fixpoint.nodes][-1] == []  # postcondition: stop
    limited = await prune(problem, union(REPLIES, 1), parent, store, search_id="s2", max_steps=2)
    assert len(limited.nodes) == 2 and not limited.solved
    calls = len(verifier.checked)
    empty = await prune(problem, Pool(invariants={1: []}, decreases={1: []}), parent, store, search_id="s3")
    assert empty.nodes == [] and len(verifier.checked) == calls  # the bare program is not re-checked


async def test_a_guard_rejection_ends_pruning_without_calling_the_verifier(store: TrajectoryStore) -> None:
    verifier = RefutingVerifier()
    program = SUM.replace("  ensures s == N * (N + 1) / 2\n", "")
    problem = problem_for(program, verifier, spec=SUM)  # the task's contract has an ensures clause: rule broken
    out = await prune(problem, union(REPLIES, 1), root(store), store, search_id="s")
    assert len(out.nodes) == 1 and out.nodes[0].verify_result is not None
    assert out.nodes[0].verify_result.status is VerifyStatus.REJECTED and verifier.checked == []
    assert out.nodes[0].metadata["feedback"].endswith("No ensures clause found")


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.dafny
async def test_pruning_with_real_dafny_verifies_from_a_model_union(
    prune_with_real: Callable[..., Awaitable[Pruning]],
) -> None:
    out = await prune_with_real(
        "dafny", lambda verifier: problem_for(SUM, verifier), lambda _: union([REPLIES[0], REPLIES[2]], 1), 6
    )
    assert out.solved, [(node.metadata["feedback"], node.metadata["blamed"], node.code) for node in out.nodes]
    assert [node.metadata["blamed"] for node in out.nodes][:-1] != [] and out.nodes[-1].metadata["blamed"] == []
    dropped = {hint for node in out.nodes for hint in node.metadata["blamed"]}
    assert dropped == {"invariant n == 3", "decreases n"} and len(out.nodes) == 3
    assert "invariant s == n * (n + 1) / 2" in (out.nodes[-1].code or "")
