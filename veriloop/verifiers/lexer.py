"""The tools' own token rules for comments, strings and character literals: Dafny's scanner and rustc's lexer.

The guard looks for escapes in code only, so it must know where code is exactly where the tool does. A scanner
that knows only `"..."` is put out of step by a character literal `'"'`, a verbatim string `@"\"` or a raw string
`r#"..."#`, and then takes real code for a comment (or a comment for code). These lexers follow the tools' rules
(Dafny.atg's CHARACTERS/TOKENS/COMMENTS; rustc_lexer), and every reader of Dafny and Verus text in the guard works
on their output: `masked` (comments blanked, literal contents blanked, offsets and newlines kept) for structure,
`plain` (comments blanked, literals intact) for clause text.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["word", "number", "string", "char", "lifetime", "punct"]
LITERALS = ("string", "char")


@dataclass(frozen=True)
class Token:
    kind: Kind
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Reading:
    """One program as the tool's lexer reads it."""

    code: str
    tokens: tuple[Token, ...]
    comments: tuple[tuple[int, int], ...]
    errors: tuple[int, ...] = field(default=())
    """Offsets where the tool's lexer fails (an unterminated comment or literal, a bad escape): a parse error."""

    @functools.cached_property
    def plain(self) -> str:
        """The code with comments blanked (newlines kept), literals intact."""
        out = list(self.code)
        for start, end in self.comments:
            out[start:end] = _blank(self.code[start:end])
        return "".join(out)

    @functools.cached_property
    def masked(self) -> str:
        """The code with comments and the contents of string and character literals blanked: what is left is code,
        at the same offsets."""
        out = list(self.plain)
        for token in self.tokens:
            if token.kind in LITERALS:
                start, end = _contents(token)
                out[token.start + start : token.start + end] = _blank(token.text[start:end])
        return "".join(out)

    def words(self) -> list[Token]:
        return [t for t in self.tokens if t.kind != "punct" or t.text.strip()]


def _blank(text: str) -> list[str]:
    return ["\n" if ch == "\n" else " " for ch in text]


def _contents(token: Token) -> tuple[int, int]:
    """Where a literal's contents lie inside its text, between its delimiters (`@"` and `"`, `r##"` and `"##`,
    `b'` and `'`); a suffix after the closing delimiter stays code."""
    text = token.text
    if token.kind == "char":
        return text.find("'") + 1, text.rfind("'")
    opening = text.find('"')
    closing = text.rfind('"' + "#" * text[:opening].count("#"))
    return opening + 1, max(closing, opening + 1)


# --------------------------------------------------------------------------- Dafny

DAFNY_IDCHAR = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_?'")
DAFNY_ESCAPES = frozenset("'\"\\0nrt")
HEX = frozenset("0123456789abcdefABCDEF")


def _dafny_escape(code: str, i: int) -> int:
    """The length of the escape at `code[i]` (a backslash) in a Dafny string or character literal, 0 if invalid."""
    nxt = code[i + 1 : i + 2]
    if nxt and nxt in DAFNY_ESCAPES:
        return 2
    if nxt == "u" and len(code) >= i + 6 and all(c in HEX for c in code[i + 2 : i + 6]):
        return 6
    return 0


def _dafny_char(code: str, i: int) -> int:
    """The length of a character literal at `code[i]` (a tick), 0 if none: `'c'`, `'\\n'`, `'\\''`, `'\\u0041'`."""
    j = i + 1
    if j >= len(code):
        return 0
    if code[j] == "\\":
        size = _dafny_escape(code, j)
        if not size:
            return 0
        j += size
    elif code[j] in "'\r\n":
        return 0
    else:
        j += 1
    return j + 1 - i if code[j : j + 1] == "'" else 0


def _dafny_tick_ident(code: str, i: int) -> int:
    """The length of the identifier that starts with the tick at `code[i]` (Dafny.atg: `'`, `'a`, `'ab` where b is
    not a tick, or four and more identifier characters)."""
    run = 0
    while i + 1 + run < len(code) and code[i + 1 + run] in DAFNY_IDCHAR:
        run += 1
    if run >= 3:
        return 1 + run
    if run == 2 and code[i + 2] != "'":
        return 3
    return 2 if run >= 1 else 1


@functools.lru_cache(maxsize=256)
def dafny(code: str) -> Reading:
    """`code` as Dafny's scanner reads it: `//` and nested `/* */` comments, strings with escapes, verbatim strings
    (`@"..."`, `""` inside, newlines allowed), character literals, identifiers that contain ticks (`x'`, `a'b`)."""
    tokens: list[Token] = []
    comments: list[tuple[int, int]] = []
    errors: list[int] = []
    i, n = 0, len(code)
    while i < n:
        ch = code[i]
        if ch in " \t\r\n":
            i += 1
        elif code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            comments.append((i, j))
            i = j
        elif code.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                elif code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                else:
                    j += 1
            if depth:
                errors.append(i)
            comments.append((i, j))
            i = j
        elif ch == '"':
            j = i + 1
            while j < n and code[j] not in '"\r\n':
                if code[j] == "\\":
                    size = _dafny_escape(code, j)
                    if not size:
                        break
                    j += size
                else:
                    j += 1
            if j < n and code[j] == '"':
                tokens.append(Token("string", i, j + 1, code[i : j + 1]))
                i = j + 1
            else:  # Dafny's scanner fails here: a parse error; read on as code, so nothing is hidden
                errors.append(i)
                tokens.append(Token("punct", i, i + 1, ch))
                i += 1
        elif code.startswith('@"', i):
            j = i + 2
            while j < n:
                if code.startswith('""', j):
                    j += 2
                elif code[j] == '"':
                    break
                else:
                    j += 1
            if j < n:
                tokens.append(Token("string", i, j + 1, code[i : j + 1]))
                i = j + 1
            else:
                errors.append(i)
                tokens.append(Token("punct", i, i + 1, ch))
                i += 1
        elif ch == "'":
            as_char, as_ident = _dafny_char(code, i), _dafny_tick_ident(code, i)
            if as_char > as_ident:
                tokens.append(Token("char", i, i + as_char, code[i : i + as_char]))
                i += as_char
            else:
                tokens.append(Token("word", i, i + as_ident, code[i : i + as_ident]))
                i += as_ident
        elif ch.isdigit() and ch.isascii():
            match = _DAFNY_NUMBER.match(code, i)
            assert match is not None
            tokens.append(Token("number", i, match.end(), match.group()))
            i = match.end()
        elif ch in DAFNY_IDCHAR:
            j = i
            while j < n and code[j] in DAFNY_IDCHAR:
                j += 1
            tokens.append(Token("word", i, j, code[i:j]))
            i = j
        elif code.startswith("{:", i):
            tokens.append(Token("punct", i, i + 2, "{:"))
            i += 2
        else:
            tokens.append(Token("punct", i, i + 1, ch))
            i += 1
    return Reading(code, tuple(tokens), tuple(comments), tuple(errors))


_DAFNY_NUMBER = re.compile(r"0x[0-9a-fA-F](?:_?[0-9a-fA-F])*|[0-9](?:_?[0-9])*(?:\.[0-9](?:_?[0-9])*)?")


# --------------------------------------------------------------------------- Rust (Verus)


def _rust_ident_start(ch: str) -> bool:
    return ch == "_" or ch.isalpha()


def _rust_ident_continue(ch: str) -> bool:
    return ch == "_" or ch.isalnum()


def _rust_quoted(code: str, i: int) -> int:
    """The end of a `"` string starting at `code[i]` (rustc: a backslash skips a following backslash or quote), -1
    if it is not terminated."""
    j = i + 1
    n = len(code)
    while j < n:
        if code[j] == '"':
            return j + 1
        if code[j] == "\\" and code[j + 1 : j + 2] in ("\\", '"'):
            j += 2
        else:
            j += 1
    return -1


def _rust_single(code: str, i: int) -> int:
    """The end of a character literal whose tick is at `code[i]` (rustc's `single_quoted_string`), -1 if it is
    not terminated."""
    n = len(code)
    if i + 2 < n and code[i + 2] == "'" and code[i + 1] != "\\":
        return i + 3
    j = i + 1
    while j < n:
        ch = code[j]
        if ch == "'":
            return j + 1
        if ch == "/" or (ch == "\n" and code[j + 1 : j + 2] != "'"):
            return -1
        j += 2 if ch == "\\" else 1
    return -1


def _rust_raw(code: str, i: int) -> tuple[int, bool]:
    """The end of a raw string whose `r` is at `code[i]` (`r"..."`, `r#"..."#`), and whether it is one at all."""
    j = i + 1
    while j < len(code) and code[j] == "#":
        j += 1
    hashes = j - i - 1
    if j >= len(code) or code[j] != '"':
        return -1, hashes > 0 and not (j < len(code) and _rust_ident_start(code[j]))
    close = code.find('"' + "#" * hashes, j + 1)
    return (-1 if close < 0 else close + 1 + hashes), True


@functools.lru_cache(maxsize=256)
def rust(code: str) -> Reading:
    """`code` as rustc's lexer reads it: `//` and nested `/* */` comments, strings (which may span lines), raw
    strings `r#"..."#`, byte and C strings, character literals and lifetimes (`'a'` against `'a`), raw
    identifiers `r#name`."""
    tokens: list[Token] = []
    comments: list[tuple[int, int]] = []
    errors: list[int] = []
    i, n = 0, len(code)

    def literal(kind: Kind, start: int, end: int) -> int:
        if end < 0:  # not terminated: rustc stops here; read on as code, so nothing is hidden
            errors.append(start)
            tokens.append(Token("punct", start, start + 1, code[start]))
            return start + 1
        end = _suffix(code, end)
        tokens.append(Token(kind, start, end, code[start:end]))
        return end

    while i < n:
        ch = code[i]
        if ch.isspace():
            i += 1
        elif code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            comments.append((i, j))
            i = j
        elif code.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                errors.append(i)
            comments.append((i, j))
            i = j
        elif ch == '"':
            i = literal("string", i, _rust_quoted(code, i))
        elif ch == "'":
            i = _rust_tick(code, i, tokens, errors)
        elif _rust_ident_start(ch):
            prefix = re.match(r"(br|cr|b|c|r)(?=[\"'#])", code[i : i + 3])
            if prefix:
                word = prefix.group(1)
                after = i + len(word)
                if code[after] == "'" and word == "b":
                    i = literal("char", i, _rust_single(code, after))
                    continue
                if code[after] == '"' and word in ("b", "c"):
                    end = _rust_quoted(code, after)
                    i = literal("string", i, end)
                    continue
                if word in ("r", "br", "cr"):
                    end, is_raw = _rust_raw(code, after - 1)
                    if is_raw:
                        i = literal("string", i, end)
                        continue
            j = i
            while j < n and _rust_ident_continue(code[j]):
                j += 1
            if code[i:j] == "r" and code[j : j + 1] == "#" and j + 1 < n and _rust_ident_start(code[j + 1]):
                j += 1  # a raw identifier, r#name
                while j < n and _rust_ident_continue(code[j]):
                    j += 1
            tokens.append(Token("word", i, j, code[i:j]))
            i = j
        elif ch.isdigit():
            match = _RUST_NUMBER.match(code, i)
            assert match is not None
            tokens.append(Token("number", i, match.end(), match.group()))
            i = match.end()
        else:
            tokens.append(Token("punct", i, i + 1, ch))
            i += 1
    return Reading(code, tuple(tokens), tuple(comments), tuple(errors))


_RUST_NUMBER = re.compile(r"[0-9][0-9a-zA-Z_]*(?:\.[0-9][0-9a-zA-Z_]*)?")


def _suffix(code: str, end: int) -> int:
    """rustc eats an identifier right after a literal as its suffix (an error for strings, but one token)."""
    while end < len(code) and _rust_ident_continue(code[end]):
        end += 1
    return end


def _rust_tick(code: str, i: int, tokens: list[Token], errors: list[int]) -> int:
    """rustc's `lifetime_or_char`: a tick starts a character literal or a lifetime (`'a`, `'static`, a label)."""
    first, second = code[i + 1 : i + 2], code[i + 2 : i + 3]
    can_be_lifetime = second != "'" and bool(first) and (_rust_ident_start(first) or first.isdigit())
    if not can_be_lifetime:
        end = _rust_single(code, i)
        if end < 0:
            errors.append(i)
            tokens.append(Token("punct", i, i + 1, "'"))
            return i + 1
        end = _suffix(code, end)
        tokens.append(Token("char", i, end, code[i:end]))
        return end
    j = i + 2
    while j < len(code) and _rust_ident_continue(code[j]):
        j += 1
    if code[j : j + 1] == "'":  # `'ab'`: a character literal (too long, an error later, but one token)
        end = _suffix(code, j + 1)
        tokens.append(Token("char", i, end, code[i:end]))
        return end
    tokens.append(Token("lifetime", i, j, code[i:j]))
    return j


# --------------------------------------------------------------------------- Python (Nagini)


def python_tokens(text: str) -> list[str] | None:
    """Python's own tokens of `text` (comments and layout dropped, literals whole), or None where it does not
    tokenize."""
    try:
        found = tokenize.generate_tokens(io.StringIO(text).readline)
        skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
        return [t.string for t in found if t.type not in skip]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def python_blank_comments(code: str) -> str:
    """Python code with its `#` comments blanked, line for line (a `#` inside a string is not a comment)."""
    try:
        found = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return "\n".join(re.sub(r"#.*$", "", line) for line in code.splitlines())
    lines = code.splitlines(keepends=True)
    for token in reversed(found):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            line = lines[row - 1]
            lines[row - 1] = line[:col] + " " * (token.end[1] - col) + line[token.end[1] :]
    return "".join(lines).rstrip("\n") if not code.endswith("\n") else "".join(lines)


READERS = {"dafny": dafny, "rust": rust}
