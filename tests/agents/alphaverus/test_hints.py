"""Hints infill: slots, the annotation grammar, splicing, and refinement prompts (fast; Dafny runs in the bench)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from veriloop.agents.alphaverus.hints import (
    EXAMPLE_HINTS,
    EXAMPLE_PROGRAM_BASE,
    HintsProblem,
    hint_grammar,
    hint_slots,
    marked,
    parse_hints,
    splice,
)
from veriloop.llm.constraints import validate
from veriloop.records import Completion, Constraint, Diagnostic, Node, VerifyResult, VerifyStatus

BUNDLE = Path(__file__).parents[3] / "veriloop" / "tasks" / "data" / "dafnybench_subset.json"
PROGRAMS = [row["hints_removed"] for row in json.loads(BUNDLE.read_text())["programs"]]


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_bundled_program_has_slots_and_a_valid_grammar(program: str) -> None:
    slots = hint_slots(program)
    assert len(slots) == program.count("while")
    assert all(program[slot.brace] == "{" for slot in slots)
    validate(hint_grammar(program, slots))
    shown = marked(program, slots)
    assert all(f"// loop {index}" in shown for index in range(1, len(slots) + 1))


def test_splice_keeps_the_program_and_adds_only_hints() -> None:
    program = "method M(n: int)\n{\n  var i := 0;\n  while (i < n) {\n    i := i + 1;\n  }\n}\n"
    slots = hint_slots(program)
    spliced = splice(program, slots, parse_hints("// loop 1\ninvariant 0 <= i\nprose here\ndecreases n - i\n", 1))
    assert "  while (i < n)\n    invariant 0 <= i\n    decreases n - i\n  {" in spliced
    assert spliced.replace("\n    invariant 0 <= i\n    decreases n - i\n  ", " ") == program


def test_loops_in_comments_and_strings_are_not_slots() -> None:
    program = '// while x {\nmethod M() { var s := "while {"; /* while { */ }\n'
    assert hint_slots(program) == []


def test_hostile_replies_cannot_inject_code() -> None:
    program = EXAMPLE_PROGRAM_BASE
    slots = hint_slots(program)
    reply = "// loop 1\ninvariant true\n}\nmethod Evil() ensures false {}\nassume false;\n// loop 7\ninvariant 1 == 1\n"
    spliced = splice(program, slots, parse_hints(reply, len(slots)))
    assert "Evil" not in spliced and "assume" not in spliced
    assert spliced.count("invariant") == 1


def test_refinement_names_the_failing_hint() -> None:
    program = EXAMPLE_PROGRAM_BASE
    problem = HintsProblem(None, None, None, [], target="dafny", program_text=program)  # type: ignore[arg-type]
    code = problem.program(EXAMPLE_HINTS)
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "s == i" in text)
    diagnostic = Diagnostic(severity="error", line=line, message="this loop invariant could not be proved on entry")
    result = VerifyResult(status=VerifyStatus.FAILED, tool="dafny", verified=0, errors=1, diagnostics=[diagnostic])
    node = Node(
        run_id="r",
        task_id="t",
        code=code,
        verify_result=result,
        score=0.0,
        completion=Completion(text=EXAMPLE_HINTS),
        metadata={"feedback": "dafny: failed"},
    )
    turn = problem.refine_messages([node])[-1].content
    assert "`invariant s == i * (i + 1) / 2`: this loop invariant could not be proved on entry" in turn
    assert "keep the invariants that held" in turn


SEARCH = """method LinearSearch(a: array<int>, e: int) returns (n: int)
  ensures forall i :: 0 <= i < n ==> e != a[i]
{
  n := 0;
  while n != a.Length
  {
    if e == a[n] {
      return;
    }
    n := n + 1;
  }
}
"""


def test_each_hint_kind_has_its_own_shape(accepts: Callable[[Constraint, str], bool]) -> None:
    grammar = hint_grammar(SEARCH, hint_slots(SEARCH))
    good = "// loop 1\ninvariant 0 <= n <= a.Length\ninvariant forall k :: 0 <= k < n ==> a[k] != e\n"
    assert accepts(grammar, good)
    assert accepts(grammar, good + "decreases a.Length - n\n")
    assert not accepts(grammar, "// loop 1\ninvariant 0 <= n <= a.Length\n")  # at least two invariants
    two = "// loop 1\ninvariant 0 <= n <= a.Length\n"
    assert not accepts(grammar, two + "invariant a[n]\n")  # an invariant is a condition, not a number
    assert not accepts(grammar, two + "invariant 0 <= i <= n\n")  # `i` exists only inside the spec's forall
    assert not accepts(grammar, two + "invariant forall k :: 0 <= k < n ==> a[n] != e\n")  # body ignores k
    assert not accepts(grammar, two + "invariant 0 <= k\n")  # the bound variable only inside its forall
    assert not accepts(grammar, good + "decreases a[n]\n")  # a measure never indexes
    # Products and quotients chain as Dafny reads them: a closed form needs no extra parentheses.
    assert accepts(grammar, two + "invariant n * (n + 1) / 2 >= 0\n")
    assert accepts(grammar, two + "invariant forall k :: 0 <= k < n ==> a[k] * 2 / 2 != e\n")
