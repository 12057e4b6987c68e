"""Nagini hints infill: slots, the invariant grammar, splicing, the second check on parsed lines, blame and
Houdini pruning (fake verifier); the real-Nagini cases are `test_pruning_with_real_nagini_*` below and
`tests/tasks/test_nagini_suite.py`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from veriloop.agents.alphaverus import HINT_LANGUAGES, AlphaVerusOptions, uses_hints
from veriloop.agents.alphaverus.hints import HintsProblem, marked, parse_hints
from veriloop.agents.alphaverus.houdini import Pruning, blamed, prune, union
from veriloop.agents.alphaverus.nagini_hints import NAGINI, admits, hint_grammar, hint_slots, splice_lines
from veriloop.config import load_settings
from veriloop.llm.constraints import validate
from veriloop.records import Candidate, Completion, Constraint, Diagnostic, Node, Run, Task, VerifyResult, VerifyStatus
from veriloop.search.score import scorer_for
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.verifiers.guard import static_check
from veriloop.verifiers.nagini_dialect import NAGINI as NAGINI_DIALECT

TASKS = load_suite("nagini-hints", load_settings()).tasks
INDEX_OF = next(task for task in TASKS if task.id.endswith("/index_of"))
RIGHT = (
    "# loop 1\nInvariant(Acc(list_pred(xs)))\nInvariant(0 <= i and i <= len(xs))\n"
    "Invariant(Forall(int, lambda j: Implies(0 <= j and j < i, xs[j] != x)))\n"
)
WRONG_LINE = "Invariant(i == 0)"
WRONG = f"# loop 1\nInvariant(Acc(list_pred(xs)))\n{WRONG_LINE}\nInvariant(0 <= i and i <= len(xs))\n"


def ground_truth_reply(task: Task) -> str:
    hints = [line.strip() for line in (task.reference or "").splitlines() if line.strip().startswith("Invariant(")]
    return "# loop 1\n" + "\n".join(hints) + "\n"


def problem_for(task: Task, verifier: object = None) -> HintsProblem:
    return HintsProblem(
        task, verifier, scorer_for("nagini"), [], target="nagini", program_text=task.prompt, language=NAGINI
    )


@pytest.mark.parametrize("task", TASKS, ids=[task.id for task in TASKS])
def test_each_task_has_one_slot_and_its_ground_truth_is_a_grammar_sentence(
    task: Task, accepts: Callable[[Constraint, str], bool]
) -> None:
    problem = problem_for(task)
    assert len(problem.slots) == task.prompt.count("while ") == 1
    validate(problem.constraint)
    reply = ground_truth_reply(task)
    assert accepts(problem.constraint, reply), reply
    assert problem.program(reply) == task.reference  # spliced back exactly where the invariants were
    assert "# loop 1" in marked(task.prompt, problem.slots, NAGINI)
    assert uses_hints(task, "nagini", AlphaVerusOptions()) and not uses_hints(task, "verus", AlphaVerusOptions())


def test_hints_go_first_in_the_body_with_its_indentation_and_lines_are_tracked() -> None:
    program = (
        "def f(n: int) -> int:\n    i = 0\n    while i < n:\n        j = 0\n        while j < i:\n"
        "            j += 1\n        i += 1\n    while i > 0: i -= 1\n    while (i < 0 and\n           n > 0): i += 1\n"
        "    return i\n"
    )
    slots = hint_slots(program)
    assert len(slots) == 2  # the one-line loops have no body line of their own to put an invariant before
    spliced = splice_lines(program, slots, {1: ["Invariant(A)", "Invariant(B)"], 2: ["Invariant(C)"]})
    lines = spliced.code.splitlines()
    assert lines[3:6] == ["        Invariant(A)", "        Invariant(B)", "        j = 0"]
    assert lines[6:8] == ["        while j < i:", "            Invariant(C)"]
    assert {line: lines[line - 1].strip() for line in spliced.hints} == {
        line: hint for line, (_, hint) in spliced.hints.items()
    }
    assert spliced.loops == {3: 1, 7: 2}
    forall, bounds, permission = RIGHT.splitlines()[:0:-1]
    code = splice_lines(INDEX_OF.prompt, hint_slots(INDEX_OF.prompt), {1: [forall, bounds, permission]}).code
    spliced_hints = [line.strip() for line in code.splitlines() if line.strip().startswith("Invariant(")]
    assert spliced_hints == [permission, forall, bounds]  # permissions first, the rest in the model's order


HOSTILE = {
    "an assumption": "Invariant(Assume(False))",
    "a bare Assume statement": "Assume(False)",
    "a second statement after ;": "Invariant(0 <= i); Assume(False)",
    "a call of a function the program lacks": "Invariant(evil(i) == 0)",
    "Result()": "Invariant(Result() == 0)",
    "Old(...)": "Invariant(Old(i) == 0)",
    "an attribute": "Invariant(i.__class__ == 0)",
    "an assignment expression": "Invariant((i := 0) == 0)",
    "a string": 'Invariant(len("ab") == 2)',
    "a name the program lacks": "Invariant(y == 0)",
    "a name from the spec's own lambda": "Invariant(k == 0)",
}


@pytest.mark.parametrize("line", HOSTILE.values(), ids=list(HOSTILE))
def test_the_grammar_and_the_splice_both_refuse_a_hostile_hint(
    line: str, accepts: Callable[[Constraint, str], bool]
) -> None:
    problem = problem_for(INDEX_OF)
    assert not accepts(problem.constraint, f"# loop 1\n{line}\n")
    assert not admits(INDEX_OF.prompt, line)
    forged = f"# loop 1\nInvariant(0 <= i)\n{line}\n"  # as a backend with no grammar might answer
    code = problem.program(forged)
    assert code.count("Invariant(") == 1 and "Assume" not in code and "evil" not in code


def test_a_smuggled_newline_statement_is_not_spliced_and_the_guard_rejects_a_forced_one() -> None:
    problem = problem_for(INDEX_OF)
    code = problem.program("# loop 1\nInvariant(0 <= i)\n    Assume(False)\nreturn 0\n")
    assert "Assume" not in code and code.count("return") == INDEX_OF.prompt.count("return")
    assert static_check(NAGINI_DIALECT, code, INDEX_OF.spec) is None
    forced = splice_lines(INDEX_OF.prompt, problem.slots, {1: ["Invariant(0 <= i); Assume(False)"]}).code
    assert "Assume" in (static_check(NAGINI_DIALECT, forced, INDEX_OF.spec) or "")
    weakened = INDEX_OF.prompt.replace("    Ensures(Implies(Result() >= 0, xs[Result()] == x))\n", "")
    assert static_check(NAGINI_DIALECT, weakened, INDEX_OF.spec) is not None  # the spec stays the task's


def test_grammar_shapes(accepts: Callable[[Constraint, str], bool]) -> None:
    power = next(task for task in TASKS if task.id.endswith("/power"))
    grammar = hint_grammar(power.prompt, hint_slots(power.prompt))
    assert accepts(grammar, "# loop 1\nInvariant(r == pow_spec(b, i))\n")  # the program's pure function
    assert not accepts(grammar, "# loop 1\nInvariant(r == pow_spec(b))\n")  # with its own arity
    assert not accepts(grammar, "# loop 1\nInvariant(Acc(list_pred(b)))\n")  # no list in this program
    assert not accepts(grammar, "# loop 1\nInvariant(r)\n")  # an invariant is a condition
    assert not accepts(grammar, "# loop 1\n" + "Invariant(0 <= i)\n" * 5)  # at most four
    assert not accepts(grammar, "# loop 1\nDecreases(e - i)\n")  # Nagini loops need no measure


NAGINI_MESSAGES = {WRONG_LINE: "Loop invariant might not be preserved. Assertion i == 0 might not hold."}


class RefutingNagini:
    """Fails on the first `NAGINI_MESSAGES` invariant present (its line, as Nagini reports it); else verifies when
    the three right invariants are there, else fails on the postcondition (line 8)."""

    name = "nagini"

    def __init__(self) -> None:
        self.checked: list[str] = []

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        self.checked.append(candidate.code)
        lines = [line.strip() for line in candidate.code.splitlines()]
        for number, line in enumerate(lines, 1):
            if line in NAGINI_MESSAGES:
                diagnostic = Diagnostic(kind="invariant", line=number, column=18, message=NAGINI_MESSAGES[line])
                return VerifyResult(status=VerifyStatus.FAILED, tool="nagini", errors=1, diagnostics=[diagnostic])
        if set(RIGHT.splitlines()[1:]) <= set(lines):
            return VerifyResult(status=VerifyStatus.VERIFIED, tool="nagini", verified=1)
        diagnostic = Diagnostic(kind="postcondition", line=8, message="Postcondition of index_of might not hold.")
        return VerifyResult(status=VerifyStatus.FAILED, tool="nagini", errors=1, diagnostics=[diagnostic])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TrajectoryStore]:
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as opened:
        yield opened


def root(store: TrajectoryStore, task: Task) -> Node:
    run = store.create_run(Run(agent="alphaverus", suite="unit", model="scripted"))
    return store.add_node(Node(run_id=run.id, task_id=task.id, depth=1, role="refine", code=task.prompt, score=0.1))


async def test_refinement_and_pruning_blame_the_invariant_nagini_names(store: TrajectoryStore) -> None:
    verifier = RefutingNagini()
    problem = problem_for(INDEX_OF, verifier)
    code = problem.program(WRONG)
    evaluation = await problem.evaluate(code)
    node = Node(
        run_id="r",
        task_id=INDEX_OF.id,
        code=code,
        verify_result=evaluation.result,
        completion=Completion(text=WRONG),
        metadata={"feedback": evaluation.feedback},
    )
    turn = problem.refine_messages([node])[-1].content
    assert f"- `{WRONG_LINE}`: Loop invariant might not be preserved" in turn and turn.startswith("Nagini did not")
    spliced = splice_lines(INDEX_OF.prompt, problem.slots, problem.hints(WRONG))
    assert blamed(node, spliced, NAGINI) == {(1, WRONG_LINE)}
    pool = union([WRONG, RIGHT, "# loop 1\nInvariant(Assume(False))\n"], 1, language=NAGINI, parse=problem.hints)
    assert "Invariant(Assume(False))" not in pool.invariants[1]  # what the splice refuses is never a candidate
    out = await prune(problem, pool, root(store, INDEX_OF), store, search_id="s", max_steps=4)
    assert out.solved and [n.metadata["blamed"] for n in out.nodes] == [[WRONG_LINE], []]
    assert parse_hints(RIGHT, 1, NAGINI) == {1: RIGHT.splitlines()[1:]}
    assert set(HINT_LANGUAGES) == {"dafny", "nagini"}


@pytest.mark.slow
@pytest.mark.nagini
@pytest.mark.bwrap
async def test_pruning_with_real_nagini_drops_the_refuted_invariant_and_verifies(
    prune_with_real: Callable[..., Awaitable[Pruning]],
) -> None:
    """The guarded Nagini verifier names the wrong invariant's line; pruning drops it and the rest verifies."""
    out = await prune_with_real(
        "nagini",
        lambda verifier: problem_for(INDEX_OF, verifier),
        lambda problem: union([WRONG, RIGHT], 1, language=NAGINI, parse=problem.hints),
        4,
    )
    assert out.solved, [(node.metadata["feedback"], node.metadata["blamed"]) for node in out.nodes]
    assert [node.metadata["blamed"] for node in out.nodes] == [[WRONG_LINE], []]
    first = out.nodes[0].verify_result
    assert first is not None and first.status is VerifyStatus.FAILED
    assert any(d.kind == "invariant" for d in first.diagnostics)
