"""Verus: the parser on recorded outputs in both of Verus's formats (plain, `--output-json`), the node score, the
guard's Verus rules; the real tool runs only when `verus` is on PATH (skipped, with the reason, when it is not)."""

from __future__ import annotations

import json
import shutil

import pytest

from veriloop.records import Candidate, Task, VerifyStatus
from veriloop.verifiers.guard import probes, static_check
from veriloop.verifiers.verus import VerusVerifier, judge, parse_output
from veriloop.verifiers.verus_dialect import VERUS

PLAIN_STDERR = """\
error: postcondition not satisfied
  --> /tmp/program.rs:12:9
   |
8  |         ensures r >= 0,
   |                 ------ failed this postcondition
...
12 |         x
   |         ^
   = note: this is the postcondition

error: invariant not satisfied at end of loop body
  --> /tmp/program.rs:20:17
   |
20 |                 i <= n,
   |                 ^^^^^^

note: recommendation not met: value may be out of range of the target type (use `#[verifier::truncate]` on the cast to silence this warning)
  --> /tmp/program.rs:25:13
   |
25 |             (x as u8)
   |             ^^^^^^^^^

error: possible arithmetic underflow/overflow
  --> /tmp/program.rs:30:9
   |
30 |         a + b
   |         ^^^^^

error: aborting due to 3 previous errors
"""  # noqa: E501
PLAIN_STDOUT = "verification results:: 2 verified, 3 errors\n"

JSON_STDOUT = json.dumps({"verification-results": {"verified": 4, "errors": 1, "success": False}})
JSON_STDERR = "\n".join(
    json.dumps(item)
    for item in [
        {
            "level": "error",
            "message": "precondition not satisfied",
            "spans": [
                {
                    "file_name": "program.rs",
                    "line_start": 9,
                    "line_end": 9,
                    "column_start": 5,
                    "is_primary": True,
                    "label": "failed precondition",
                }
            ],
        },
        {"level": "error", "message": "aborting due to 1 previous error", "spans": []},
    ]
)


def test_plain_output_blocks_summary_and_score() -> None:
    report = parse_output(PLAIN_STDOUT, PLAIN_STDERR)
    assert (report.verified, report.errors) == (2, 3)
    assert [(b.type, b.start_line) for b in report.blocks] == [
        ("error", 12),
        ("error", 20),
        ("note", 25),
        ("error", 30),
        ("error", None),
    ]
    assert (report.n_err, report.n_note) == (3, 1)
    result = judge(1, False, PLAIN_STDOUT, PLAIN_STDERR)
    assert result.status is VerifyStatus.FAILED
    assert [d.kind for d in result.diagnostics] == ["postcondition", "invariant", "recommendation", "arithmetic"]
    # AlphaVerus: v/(v+e) - (0.1 n_err + 0.04 n_note)/(v+e) = 2/5 - (0.3 + 0.04)/5
    assert result.score == pytest.approx(0.4 - 0.34 / 5)


def test_json_output() -> None:
    result = judge(1, False, JSON_STDOUT, JSON_STDERR)
    assert (result.status, result.verified, result.errors) == (VerifyStatus.FAILED, 4, 1)
    assert [(d.kind, d.line, d.column) for d in result.diagnostics] == [("precondition", 9, 5)]


def test_verified_syntax_error_and_timeout() -> None:
    ok = judge(0, False, "verification results:: 3 verified, 0 errors\n", "")
    assert ok.status is VerifyStatus.VERIFIED and ok.score == 1.0
    broken = judge(1, False, "", "error: this file contains an unclosed delimiter\n  --> program.rs:4:2\n")
    assert broken.status is VerifyStatus.SYNTAX_ERROR and broken.diagnostics[0].kind == "parse"
    assert broken.score == -1.0
    assert judge(None, True, "", "").status is VerifyStatus.TIMEOUT


HONEST = """\
use vstd::prelude::*;
verus! {
fn max(a: i32, b: i32) -> (r: i32)
    requires a > 0,
    ensures r >= a, r >= b,
{
    if a > b { a } else { b }
}
fn main() {}
}
"""


def test_verus_escapes_and_probes() -> None:
    assert static_check(VERUS, HONEST, HONEST) is None
    for hack, word in [
        (HONEST.replace("if a > b", "assume(a > b); if a > b"), "assume"),
        (HONEST.replace("{\n    if", "{\n    admit(); if"), "admit"),
        (HONEST.replace("fn max", "#[verifier::external_body]\nfn max"), "external"),
        (HONEST.replace("ensures r >= a, r >= b,", "ensures true,"), "trivial"),
        (HONEST.replace("ensures r >= a, r >= b,", "ensures r >= a,"), "weaker"),
    ]:
        reason = static_check(VERUS, hack, HONEST)
        assert reason is not None and word in reason, (word, reason)
    found = {what: program for what, program, _ in probes(VERUS, HONEST, HONEST)}
    assert "{ assert(false);" in found["vacuous precondition"]
    assert "-> (r: i32)\n    requires a > 0,\n    ensures r >= a, r >= b,\n{ }" in found["trivial postcondition"]


async def test_real_verus_when_installed() -> None:
    if shutil.which("verus") is None:
        pytest.skip("verus is not on PATH (the sandbox image installs a pinned release)")
    verifier = VerusVerifier()
    result = await verifier.verify(Candidate(task_id="t", code=HONEST), Task(id="t", suite="s", prompt=""))
    assert result.status is VerifyStatus.VERIFIED and result.version


async def test_missing_verus_is_an_infra_error() -> None:
    verifier = VerusVerifier(command="verus-not-installed-here")
    result = await verifier.verify(Candidate(task_id="t", code=HONEST), Task(id="t", suite="s", prompt=""))
    assert result.status is VerifyStatus.INFRA_ERROR and "not on PATH" in (result.reason or "")
