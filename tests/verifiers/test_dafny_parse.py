"""Dafny's output, parsed without running Dafny: recorded outputs of Dafny 2.3 and the exit-code rules."""

from __future__ import annotations

from veriloop.records import VerifyStatus
from veriloop.verifiers.dafny import judge, parse_output

FAILED = """\
Prover error: line 18 column 28: unknown parameter 'model_compress'
Legal parameters are:
  auto_config (bool) (default: true)
program.dfy(3,0): Error BP5003: A postcondition might not hold on this return path.
program.dfy(2,12): Related location: This is the postcondition that might not hold.
program.dfy(12,16): Error BP5004: This loop invariant might not hold on entry.
program.dfy(12,16): Related message: loop invariant violation
program.dfy(18,14): Error BP5002: A precondition for this call might not hold.
program.dfy(17,28): Related location: This is the precondition that might not hold.
program.dfy(19,60): Error: failure to decrease termination measure
program.dfy(22,4): Error BP5001: This assertion might not hold.

Dafny program verifier finished with 1 verified, 5 errors
"""

TIMED_OUT = """\
program.dfy(1,7): Verification of 'Impl$$_module.__default.SumTo' timed out after 20 seconds
program.dfy(8,16): Timed out on BP5005: This loop invariant might not be maintained by the loop.
program.dfy(8,16): Related message: loop invariant violation

Dafny program verifier finished with 1 verified, 0 errors, 1 time out
"""


def test_every_diagnostic_is_classified_with_its_position() -> None:
    report = parse_output(FAILED)
    errors = [d for d in report.diagnostics if d.severity == "error"]
    notes = [d for d in report.diagnostics if d.severity == "note"]
    assert [(d.kind, d.line, d.column) for d in errors] == [
        ("postcondition", 3, 0),
        ("invariant", 12, 16),
        ("precondition", 18, 14),
        ("decreases", 19, 60),
        ("assertion", 22, 4),
    ]
    assert [(d.kind, d.line) for d in notes] == [("postcondition", 2), ("invariant", 12), ("precondition", 17)]
    assert (report.verified, report.errors, report.timeouts) == (1, 5, 0)
    assert all("model_compress" not in d.message for d in report.diagnostics)


def test_exit_codes_decide_first() -> None:
    assert judge(4, False, FAILED)[0] is VerifyStatus.FAILED
    assert judge(0, False, "Dafny program verifier finished with 2 verified, 0 errors\n")[0] is VerifyStatus.VERIFIED
    parse = "program.dfy(4,10): Error: invalid UnaryExpression\n1 parse errors detected in program.dfy\n"
    status, report, _ = judge(2, False, parse)
    assert status is VerifyStatus.SYNTAX_ERROR and report.diagnostics[0].kind == "parse"
    resolve = "program.dfy(3,7): Error: unresolved identifier: z\n1 resolution/type errors detected in program.dfy\n"
    status, report, _ = judge(2, False, resolve)
    assert status is VerifyStatus.SYNTAX_ERROR and report.diagnostics[0].kind == "resolution"
    assert judge(None, True, "")[0] is VerifyStatus.TIMEOUT
    assert judge(1, False, "Unhandled Exception: Mono crashed")[0] is VerifyStatus.INFRA_ERROR


def test_solver_time_outs_are_timeouts() -> None:
    status, report, reason = judge(0, False, TIMED_OUT)
    assert status is VerifyStatus.TIMEOUT and report.timeouts == 1
    assert any(d.kind == "timeout" and d.line == 8 for d in report.diagnostics) and reason


def test_newer_dafny_summary_and_time_outs() -> None:
    text = (
        "program.dfy(5,2): Error: a postcondition could not be proved on this return path\n\n"
        "Dafny program verifier finished with 3 verified, 1 error, 2 time outs\n"
    )
    report = parse_output(text)
    assert (report.verified, report.errors, report.timeouts) == (3, 1, 2)
    assert report.diagnostics[0].kind == "postcondition"
