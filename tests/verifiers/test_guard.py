"""The spec guard's rules without any tool: escapes, spec preservation, the Z3 semantic check, probe programs."""

from __future__ import annotations

import pytest

from veriloop.verifiers import semantic
from veriloop.verifiers.dafny_dialect import DAFNY
from veriloop.verifiers.guard import probes, static_check
from veriloop.verifiers.nagini_dialect import NAGINI
from veriloop.verifiers.spec import dafny_contracts, nagini_contracts, normalise

SPEC = """\
method Abs(x: int) returns (y: int)
  requires x > -1000
  ensures y >= 0 // never negative
  ensures y == x || y == -x
"""

HONEST = """\
// Absolute value.
method Abs(x: int) returns (y: int)
  requires x > -1000
  ensures y >=   0
  ensures y == x || y == -x /* either sign */
{
  if x < 0 { y := -x; } else { y := x; }
}
"""


def test_contracts_are_read_with_comments_and_layout_ignored() -> None:
    [contract] = dafny_contracts(HONEST)
    assert contract.name == "Abs" and contract.params == {"x": "int"} and contract.returns == {"y": "int"}
    assert [normalise(c) for c in contract.ensures] == ["y >= 0", "y == x || y == - x"]
    assert contract.body is not None and HONEST[contract.body[0]] == "{" and HONEST[contract.body[1]] == "}"
    [spec] = dafny_contracts(SPEC)
    assert spec.body is None and spec.requires == ["x > -1000"]


def test_honest_candidate_passes() -> None:
    assert static_check(DAFNY, HONEST, SPEC) is None
    assert static_check(DAFNY, HONEST, None) is None


def test_each_dafny_rule_rejects_its_hack() -> None:
    cases = {
        "assume": HONEST.replace("if x < 0", "assume x >= 0; if x < 0"),
        "{:axiom}": HONEST + "\nlemma {:axiom} L() ensures false\n",
        "{:verify false}": HONEST.replace("method Abs", "method {:verify false} Abs"),
        "has no body": HONEST + "\nmethod Helper(n: int) returns (m: int)\n  ensures m == n\n",
        "trivial postcondition": HONEST.replace("ensures y >=   0", "ensures true"),
        "is missing": HONEST.replace("Abs", "Abs2"),
        "weaker": HONEST.replace("ensures y == x || y == -x /* either sign */", "ensures y == x || y == -x || y == 1"),
        "stronger": HONEST.replace("requires x > -1000", "requires x > 0"),
        "unsatisfiable": HONEST.replace("requires x > -1000", "requires x > -1000 && x < -1000"),
    }
    for word, code in cases.items():
        reason = static_check(DAFNY, code, SPEC if word not in ("{:axiom}", "unsatisfiable") else None)
        assert reason is not None and word in reason, (word, reason)


@pytest.mark.parametrize(
    ("attribute", "word"),
    [
        ("{:verify(false)}", "verify false"),
        ("{:verify !true}", "verify false"),
        ("{:termination(false)}", "termination"),
    ],
)
def test_dafny_attributes_are_caught_in_every_spelling(attribute: str, word: str) -> None:
    """Dafny takes `{:verify(false)}` like `{:verify false}` (no space): the rule must not hang on the space."""
    reason = static_check(DAFNY, HONEST.replace("method Abs", f"method {attribute} Abs"), SPEC)
    assert reason is not None and word in reason, reason
    assert static_check(DAFNY, HONEST.replace("method Abs", "method {:verify true} Abs"), SPEC) is None


def test_textual_look_alike_that_weakens_is_rejected_by_z3() -> None:
    weaker = HONEST.replace("ensures y >=   0", "ensures y >= -0 - 1")
    reason = static_check(DAFNY, weaker, SPEC)
    assert reason is not None and "weaker" in reason
    same = HONEST.replace("ensures y >=   0", "ensures 0 <= y")
    assert static_check(DAFNY, same, SPEC) is None


def test_comments_do_not_hide_or_fake_escapes() -> None:
    assert static_check(DAFNY, HONEST.replace("// Absolute value.", "// we never assume anything"), SPEC) is None


def test_z3_decides_sequences_quantifiers_and_naturals() -> None:
    names = {"a": "seq<int>", "m": "int", "n": "nat"}
    pre, post = ["|a| > 0"], ["forall i :: 0 <= i < |a| ==> a[i] <= m", "m in a"]
    same = ["m in a && forall k | 0 <= k < |a| :: a[k] <= m"]
    assert semantic.spec_kept(names, pre, post, pre, same, semantic.dafny_term)[0] is True
    assert semantic.spec_kept(names, pre, post, pre, post[:1], semantic.dafny_term)[0] is False
    assert semantic.implies(names, [], ["n >= 0"], semantic.dafny_term) is True
    assert semantic.implies(names, [], ["F(n) > 0"], semantic.dafny_term) is None  # user function: unexpressible


def test_nagini_contracts_and_rules() -> None:
    code = (
        "from nagini_contracts.contracts import *\n\n"
        "def inc(x: int) -> int:\n"
        "    Requires(x >= 0)\n"
        "    Ensures(Result() > x)\n"
        "    return x + 1\n"
    )
    [contract] = nagini_contracts(code)
    assert contract.requires == ["x >= 0"] and contract.ensures == ["Result() > x"]
    assert static_check(NAGINI, code, code) is None
    assert "Assume" in (static_check(NAGINI, code.replace("    return", "    Assume(x > 0)\n    return"), code) or "")
    reformatted = code.replace("Ensures(Result() > x)", "Ensures(x < Result())")
    assert static_check(NAGINI, reformatted, code) is None
    weakened = code.replace("Ensures(Result() > x)", "Ensures(Result() >= x)")
    assert "weaker" in (static_check(NAGINI, weakened, code) or "")
    commented = code.replace("    return", "    # Assume(False) would be cheating\n    return")
    assert static_check(NAGINI, commented, code) is None


def test_probe_programs() -> None:
    found = {what: program for what, program, _ in probes(DAFNY, HONEST, SPEC)}
    assert set(found) == {"vacuous precondition", "trivial postcondition"}
    assert "{ assert false;\n  if x < 0" in found["vacuous precondition"]
    assert found["trivial postcondition"].rstrip().endswith("/* either sign */\n{ }")
    loop = "method L(n: nat) returns (r: nat)\n  ensures r == n\n{\n  r := 0;\n  while r < n { r := r + 1; }\n}\n"
    found = {what: program for what, program, _ in probes(DAFNY, loop, None)}
    assert found["unreachable end (a loop that never exits)"].rstrip().endswith("assert false; }")
