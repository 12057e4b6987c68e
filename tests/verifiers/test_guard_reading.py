"""Property tests: the guard reads a program where Dafny reads it.

Programs are made of pieces that trip scanners that are not Dafny's lexer (character literals such as `'"'`,
strings with escapes, verbatim strings with `""`, backslashes and newlines, nested comments, identifiers with
ticks), with an escape placed either as code or inside one of those literals or comments. Without the tool, the
guard must find the escape exactly where the program was built to hold it as code; with the tool (`dafny`), Dafny's
own verdict decides: an escape Dafny acted on is rejected, and one it read as text changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.verifiers import lexer
from veriloop.verifiers.dafny import DafnyVerifier
from veriloop.verifiers.dafny_dialect import DAFNY, dafny_scan
from veriloop.verifiers.guard import GuardedVerifier, static_check
from veriloop.verifiers.verus_dialect import VERUS

FRAGMENTS = ["a", " ", "/", "*", "/*", "*/", "//", '"', "'", "\\", "{:", "}", "\n", "x'", "assume false;", "{:axiom}"]
"""What literal and comment contents are made of: the characters scanners disagree on, and escapes to hide."""

CHARS = ["'\"'", "'\\''", "'\\\\'", "'\\\"'", "'/'", "'*'", "'a'", "' '", "'{'", "'\\u0022'", "'\\n'"]
"""Dafny character literals, the awkward ones first."""


@dataclass(frozen=True)
class Piece:
    """One line of a generated method body, and whether it holds the escape as code."""

    text: str
    escape_as_code: bool = False


def _dafny_string(content: str) -> str:
    escaped = content.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def _verbatim(content: str) -> str:
    return '@"' + content.replace('"', '""') + '"'


def _comment_text(content: str) -> str:
    """Text that may sit inside a block comment without opening or closing one."""
    text = content.replace("/*", "/ *").replace("*/", "* /")
    return text.rstrip("/*") or "c"


contents = st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join)


@st.composite
def pieces(draw: st.DrawFn, index: int) -> Piece:
    kind = draw(st.sampled_from(["char", "string", "verbatim", "line", "block", "nested", "tick"]))
    text = draw(contents)
    if kind == "char":
        return Piece(f"var c{index} := {draw(st.sampled_from(CHARS))};")
    if kind == "string":
        return Piece(f"var s{index} := {_dafny_string(text)};")
    if kind == "verbatim":
        return Piece(f"var v{index} := {_verbatim(text)};")
    if kind == "line":
        return Piece("// " + text.replace("\n", " "))
    if kind == "block":
        return Piece("/* " + _comment_text(text) + " */")
    if kind == "nested":
        inner = _comment_text(draw(contents))
        return Piece("/* " + _comment_text(text) + " /* " + inner + " */ " + _comment_text(text) + " */")
    return Piece(f"var x'{index} := {index}; var a'b{index} := x'{index};")


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, bool]:
    """A method `ensures false` whose body is noise, with `assume false;` as code or hidden in a literal or comment;
    and whether it is code."""
    body = [draw(pieces(i)) for i in range(draw(st.integers(1, 6)))]
    where = draw(st.integers(0, len(body)))
    hide = draw(st.sampled_from(["code", "string", "verbatim", "line", "block"]))
    escape = {
        "code": Piece("assume false;", escape_as_code=True),
        "string": Piece(f"var h := {_dafny_string('assume false;')};"),
        "verbatim": Piece('var h := @"\nassume false;\n";'),
        "line": Piece("// assume false;"),
        "block": Piece("/*\nassume false;\n*/"),
    }[hide]
    body.insert(where, escape)
    code = "method M()\n  ensures false\n{\n" + "".join("  " + p.text + "\n" for p in body) + "}\n"
    return code, escape.escape_as_code


@st.composite
def declarations(draw: st.DrawFn) -> tuple[str, bool]:
    """Top-level constants holding awkward literals around `lemma {:axiom} Ax() ensures false`, which is code or
    held in a comment or verbatim string; a method uses it when it is code."""
    noise = [
        f"const K{i}: {kind} := {draw(value)}"
        for i, (kind, value) in enumerate(
            draw(
                st.lists(
                    st.sampled_from(
                        [
                            ("char", st.sampled_from(CHARS)),
                            ("string", contents.map(_dafny_string)),
                            ("string", contents.map(_verbatim)),
                        ]
                    ),
                    min_size=1,
                    max_size=4,
                )
            )
        )
    ]
    hide = draw(st.sampled_from(["code", "block", "verbatim"]))
    axiom = "lemma {:axiom} Ax()\n  ensures false"
    escape = {"code": axiom, "block": "/* " + axiom + " */", "verbatim": f'const H: string := @"{axiom}"'}[hide]
    noise.insert(draw(st.integers(0, len(noise))), escape)
    use = "  Ax();\n" if hide == "code" else ""
    code = "\n".join(noise) + "\n\nmethod M()\n  ensures false\n{\n" + use + "}\n"
    return code, hide == "code"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_the_guard_finds_an_escape_exactly_where_it_is_code(case: tuple[str, bool]) -> None:
    code, as_code = case
    reading = lexer.dafny(code)
    assert not reading.errors, code
    assert len(reading.masked) == len(code) and reading.masked.count("\n") == code.count("\n")
    assert ("assume statements are not allowed" in dafny_scan(code)) is as_code, code


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(declarations())
def test_the_guard_finds_a_declaration_exactly_where_it_is_code(case: tuple[str, bool]) -> None:
    code, as_code = case
    assert ("{:axiom} is not allowed" in dafny_scan(code)) is as_code, code
    assert any(c.name == "Ax" for c in DAFNY.contracts(code)) is as_code, code


@st.composite
def rust_programs(draw: st.DrawFn) -> tuple[str, bool]:
    """A Verus body of awkward Rust literals (raw strings, byte strings, chars, lifetimes, nested comments) with
    `assume(false);` as code or hidden in one of them."""
    raw = draw(contents).replace('"#', '" #')
    noise = [
        "let a = '\"';",
        "let b = b'\"';",
        "let c = '\\'';",
        'let d = r"C:\\";',
        f'let e = r#"{raw}"#;',
        f'let f = b"{draw(contents).replace(chr(92), "").replace(chr(34), "")}";',
        'let g: &\'static str = "x";',
        "/* a /* b */ c */",
        "'outer: loop { break 'outer; }",
    ]
    body = draw(st.permutations(noise))[: draw(st.integers(1, len(noise)))]
    hide = draw(st.sampled_from(["code", "raw", "nested", "line"]))
    escape = {
        "code": "assume(false);",
        "raw": 'let h = r#"assume(false);"#;',
        "nested": "/* /* */ assume(false); */",
        "line": "// assume(false);",
    }[hide]
    body.insert(draw(st.integers(0, len(body))), escape)
    return "fn f() {\n" + "".join("    " + line + "\n" for line in body) + "}\n", hide == "code"


@settings(max_examples=200, deadline=None)
@given(rust_programs())
def test_the_verus_guard_finds_an_escape_exactly_where_it_is_code(case: tuple[str, bool]) -> None:
    code, as_code = case
    assert not lexer.rust(code).errors, code
    assert (static_check(VERUS, code, None) == "assume statements are not allowed") is as_code, code


# --------------------------------------------------------------------------- against the tool

TOOL_EXAMPLES = 12
"""Each example is one Dafny run (about a second): enough to meet every kind of piece, few enough for CI."""


def _verdict(dafny: DafnyVerifier, code: str) -> VerifyStatus:
    return asyncio.run(dafny.check(code)).status


@pytest.mark.dafny
@pytest.mark.slow
@settings(max_examples=TOOL_EXAMPLES, deadline=None, derandomize=True, database=None)
@given(case=programs())
def test_dafny_and_the_guard_agree_on_hidden_statements(case: tuple[str, bool], dafny: DafnyVerifier) -> None:
    code, _ = case
    status = _verdict(dafny, code)
    event(status.value)
    assert status in (VerifyStatus.VERIFIED, VerifyStatus.FAILED), (status, code)
    if status is VerifyStatus.VERIFIED:  # Dafny acted on an `assume false`
        assert static_check(DAFNY, code, None) is not None, code
    else:  # Dafny read every `assume false` as text: the guard must not see one
        assert static_check(DAFNY, code, None) is None, code


@pytest.mark.dafny
@pytest.mark.slow
@settings(max_examples=TOOL_EXAMPLES, deadline=None, derandomize=True, database=None)
@given(case=declarations())
def test_dafny_and_the_guard_agree_on_hidden_declarations(case: tuple[str, bool], dafny: DafnyVerifier) -> None:
    code, _ = case
    status = _verdict(dafny, code)
    event(status.value)
    assert status in (VerifyStatus.VERIFIED, VerifyStatus.FAILED), (status, code)
    if status is VerifyStatus.VERIFIED:
        assert static_check(DAFNY, code, None) is not None, code
    else:
        assert static_check(DAFNY, code, None) is None, code


# --------------------------------------------------------------------------- the tool's own reading, after `verified`


def _line_comment_blind(code: str) -> str:
    """A lexer with a classic bug: it opens a block comment at a `/*` inside a line comment (Dafny does not)."""
    out = lexer.dafny(re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), code, flags=re.S)).masked
    return out


BLIND = dataclasses.replace(DAFNY, strip=_line_comment_blind, scan=lambda code: dafny_scan(_line_comment_blind(code)))
"""The Dafny dialect with that bug in its reading (a stand-in for any way a lexer can differ from the tool's)."""

LINE_COMMENT_HACK = "method M()\n  ensures false\n{\n  // see /*\n  assume false;\n  // */\n}\n"


class Printing:
    """A verifier that verifies anything and prints back a given reading of the program."""

    name = "dafny"

    def __init__(self, printed: str | None) -> None:
        self.printed = printed

    async def version(self) -> str:
        return "recorded"

    def options(self) -> dict[str, object]:
        return {}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await self.check(candidate.code)

    async def check(self, code: str) -> VerifyResult:
        return VerifyResult(status=VerifyStatus.VERIFIED, tool="dafny", version="recorded", verified=1)

    async def parsed(self, code: str) -> str | None:
        return self.printed

    async def aclose(self) -> None:
        return None


def _task(spec: str | None = None) -> Task:
    return Task(id="t", suite="reading", prompt="", language="dafny", spec=spec)


async def test_an_escape_in_the_tools_reading_is_rejected() -> None:
    assert static_check(BLIND, LINE_COMMENT_HACK, None) is None  # the buggy reading misses it
    printed = "method M()\n  ensures false\n{\n  assume false;\n}\n"
    guarded = GuardedVerifier(Printing(printed), BLIND)
    result = await guarded.verify(Candidate(task_id="t", code=LINE_COMMENT_HACK), _task())
    assert result.status is VerifyStatus.REJECTED and "own reading" in (result.reason or "")
    assert "assume" in (result.reason or "")


async def test_a_bodiless_declaration_in_the_tools_reading_is_rejected() -> None:
    printed = "lemma L()\n  ensures false\n\nmethod M()\n  ensures false\n{\n  L();\n}\n"
    result = await GuardedVerifier(Printing(printed), DAFNY).verify(Candidate(task_id="t", code=printed), _task())
    assert result.status is VerifyStatus.REJECTED and "no body" in (result.reason or "")


async def test_a_clean_reading_changes_nothing() -> None:
    code = "method M(x: int) returns (y: int)\n  ensures y == x\n{\n  y := x;\n}\n"
    for printed in (code, None):  # (the probes, which this double would fail, come after)
        assert await GuardedVerifier(Printing(printed), DAFNY)._reading(code, None) is None


@pytest.mark.dafny
async def test_dafnys_own_reading_catches_what_a_buggy_lexer_misses(dafny: DafnyVerifier) -> None:
    """Dafny's `/dprint` drops comments, so the buggy reading of a line comment no longer matters."""
    printed = await dafny.parsed(LINE_COMMENT_HACK)
    assert printed is not None and "assume false" in printed and "//" not in printed.split("\n", 3)[-1]
    result = await GuardedVerifier(dafny, BLIND).verify(Candidate(task_id="t", code=LINE_COMMENT_HACK), _task())
    assert result.status is VerifyStatus.REJECTED and "own reading" in (result.reason or ""), result.reason
