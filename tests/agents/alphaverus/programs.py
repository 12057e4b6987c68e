"""Dafny programs and the hints task shape that several AlphaVerus test files share."""

from __future__ import annotations

from veriloop.records import Task

SUM_NO_HINTS = """function Tri(n: nat): nat { n * (n + 1) / 2 }

method SumTo(n: nat) returns (s: nat)
  ensures s == Tri(n)
{
  s := 0;
  var i := 0;
  while i < n
  {
    i := i + 1;
    s := s + i;
  }
}
"""
"""Verifies once its loop gets `invariant 0 <= i <= n` and `invariant s == Tri(i)`, and not before."""


def hints_task(name: str, program: str) -> Task:
    """A hints-infill task checked by Dafny: the program is its own spec (hints may be added, nothing changed)."""
    return Task(
        id=name,
        suite="unit-hints",
        prompt=program,
        language="dafny",
        spec=program,
        metadata={"mode": "hints", "verifier": "dafny"},
    )
