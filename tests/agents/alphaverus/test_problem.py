"""How a reply becomes a program, and how the verifier's verdict becomes the next prompt's feedback."""

from __future__ import annotations

from veriloop.agents.alphaverus.problem import feedback, program_text
from veriloop.records import Diagnostic, VerifyResult, VerifyStatus

BARE = """Here is the complete Dafny program:

---
method Append(a: array<int>, b: int) returns (c: array<int>)
  ensures a[..] + [b] == c[..]
{
  c := new int[a.Length + 1];
}

function F(x: int): int { x }

Here is the complete Dafny program again:
method Append(a: array<int>) { }
"""


def test_a_fenced_reply_gives_its_block() -> None:
    assert program_text("Sure.\n```dafny\nmethod M() { }\n```\nDone.", "dafny") == "method M() { }"


def test_a_bare_reply_is_cut_to_its_declarations() -> None:
    code = program_text(BARE, "dafny")
    assert code.startswith("method Append(a: array<int>, b: int)") and code.endswith("function F(x: int): int { x }")
    assert "again" not in code
    nagini = "from nagini_contracts.contracts import *\ndef f() -> int:\n    return 1"
    assert program_text(f"Here:\n{nagini}\n", "nagini") == nagini


def test_feedback_lists_the_diagnostics() -> None:
    result = VerifyResult(
        status=VerifyStatus.FAILED,
        verified=1,
        errors=1,
        tool="dafny",
        diagnostics=[Diagnostic(severity="error", message="A postcondition might not hold.", line=8)],
    )
    assert feedback(result) == "dafny: failed (1 verified, 1 errors)\nline 8: error: A postcondition might not hold."
