"""Contracts read from source text: per function its pre/postconditions, parameters and body span.

Dafny and Verus are scanned as text read by the tool's own token rules (`lexer`): structure on the masked text
(comments and literal contents blanked, offsets kept), clause texts from the plain one (literals intact). Nagini
programs are Python and read with `ast`. Only what the spec guard needs: clause texts, typed names, where the body is.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Literal

from veriloop.verifiers import lexer

TOKEN = re.compile(r"\w+|==>|<==>|<==|==|!=|<=|>=|&&|\|\||::|\S")
Language = Literal["dafny", "rust", "python"]


def blank_comments(code: str, *, hash_comments: bool = False) -> str:
    """Dafny `code` with comments replaced by spaces (newlines kept), literals left alone, as Dafny's scanner reads
    them (`hash_comments`: Python's `#` comments instead)."""
    if hash_comments:
        return lexer.python_blank_comments(code)
    return lexer.dafny(code).plain


def rust_comments(code: str) -> str:
    """Rust (Verus) `code` with comments blanked, as rustc reads them (raw strings, lifetimes, nested comments)."""
    return lexer.rust(code).plain


def normalise(text: str, language: Language = "dafny") -> str:
    """A clause as a token sequence: white space and comments do not count, a literal is one token."""
    if language == "python":
        tokens = lexer.python_tokens(text)
        return " ".join(tokens if tokens is not None else TOKEN.findall(text))
    reading = lexer.READERS[language](text)
    plain, out, pos = reading.plain, [], 0
    for token in reading.tokens:
        if token.kind in lexer.LITERALS:
            out += TOKEN.findall(plain[pos : token.start])
            out.append(token.text)
            pos = token.end
    out += TOKEN.findall(plain[pos:])
    return " ".join(out)


@dataclass
class Contract:
    """One function, method or lemma and its specification."""

    name: str
    kind: str
    requires: list[str] = field(default_factory=list)
    ensures: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    returns: dict[str, str] = field(default_factory=dict)
    body: tuple[int, int] | None = None
    """Offsets of the body's opening brace and closing brace (Dafny/Verus), or first/last body line (Python)."""
    header: tuple[int, int] = (0, 0)
    attributes: list[str] = field(default_factory=list)
    frames: dict[str, list[str]] = field(default_factory=dict)
    """`reads`, `modifies` and `decreases` clauses (Dafny; Verus `decreases`), each as written."""
    scope: str = ""
    """The classes, traits and modules around it (Dafny), so `A.M` and `B.M` are two declarations."""
    language: Language = "dafny"
    """How its clause texts are tokenised (`normalise`)."""

    @property
    def has_loop(self) -> bool:
        return "loop" in self.attributes

    @property
    def qualname(self) -> str:
        return f"{self.scope}.{self.name}" if self.scope else self.name


# --------------------------------------------------------------------------- Dafny

_NOT_ID = r"(?<![\w'?.])"
_END_ID = r"(?![\w'?])"
DAFNY_KINDS = {
    "method": "method",
    "constructor": "constructor",
    "lemma": "lemma",
    "colemma": "lemma",
    "function": "function",
    "predicate": "predicate",
    "copredicate": "predicate",
    "iterator": "iterator",
}
"""Every declaration kind with a contract, as the guard names it (`colemma`, `inductive lemma`, `twostate lemma`
are lemmas; `copredicate`, `least predicate` predicates)."""
DAFNY_DECL = re.compile(
    _NOT_ID + r"(?P<mods>(?:(?:ghost|static|abstract|protected|twostate|inductive|least|greatest)\s+)*)"
    r"(?P<kind>method|lemma|function|predicate|constructor|iterator|copredicate|colemma)"
    + _END_ID
    + r"(?:\s+method"
    + _END_ID
    + r")?"
)
DAFNY_NAME = re.compile(r"\s*(?P<name>[A-Za-z_?'][\w'?]*)")
DAFNY_CLAUSE = re.compile(r"\b(requires|ensures|modifies|reads|decreases)\b")
DAFNY_STOP = re.compile(
    r"\b(method|lemma|function|predicate|class|module|datatype|codatatype|constructor|twostate|ghost|iterator|trait|"
    r"copredicate|colemma|inductive|newtype|type|const|static|import|export|abstract|(least|greatest)\s+(predicate|lemma))"
    r"\b"
)
DAFNY_CONTAINER = re.compile(_NOT_ID + r"(?P<kind>class|trait|module)" + _END_ID)


def _match_close(text: str, start: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for index in range(start, len(text)):
        if text[index] == open_ch:
            depth += 1
        elif text[index] == close_ch:
            depth -= 1
            if depth == 0:
                return index
    return len(text) - 1


def skip_attributes(text: str, index: int) -> tuple[int, list[tuple[int, int]]]:
    """Past the `{:...}` attributes (nested braces and all) at `text[index]` (masked text), and where they lie."""
    spans: list[tuple[int, int]] = []
    while True:
        at = index
        while at < len(text) and text[at].isspace():
            at += 1
        if not text.startswith("{:", at):
            return index, spans
        close = _match_close(text, at, "{", "}")
        spans.append((at, close + 1))
        index = close + 1


def attribute_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Every outermost `{:...}` attribute in `text[start:end]` (masked text), nested braces and all."""
    end = len(text) if end is None else end
    spans, index = [], text.find("{:", start, end)
    while 0 <= index < end:
        close = _match_close(text, index, "{", "}")
        spans.append((index, close + 1))
        index = text.find("{:", close + 1, end)
    return spans


def without_attributes(masked: str, plain: str, start: int, end: int) -> str:
    """`plain[start:end]` with its attributes blanked, found on the masked text (a `"{:x}"` string is no attribute)."""
    out = list(plain[start:end])
    for a, b in attribute_spans(masked, start, end):
        out[a - start : min(b, end) - start] = " " * (min(b, end) - a)
    return "".join(out)


def _typed_names(text: str) -> dict[str, str]:
    names: dict[str, str] = {}
    for item in _split_commas(text, opening="<([", closing=">)]"):
        if ":" in item:
            name, _, typ = item.partition(":")
            name = re.sub(r"\b(ghost|new|nameonly)\b", "", name).strip()
            if name:
                names[name] = typ.strip()
    return names


def _body_open(text: str, start: int) -> int | None:
    """The offset of the `{` that opens a body, skipping `{:attr}` and set displays inside expressions; None where the
    declaration ends first (the next declaration, or the `}` of the class or module around it)."""
    depth = 0
    index = start
    while index < len(text):
        ch = text[index]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "}" and depth <= 0:
            return None
        elif ch == "{" and depth == 0:
            if text.startswith("{:", index):
                index = _match_close(text, index, "{", "}") + 1
                continue
            before = text[start:index].rstrip()
            operand_next = before[-1:] in set("=<>+-*,(|&!:") and not re.search(r"\bdecreases\s*\*$", before)
            display = re.search(r"\b(in|then|else|multiset|set|iset|map|imap|seq)$", before)
            if operand_next and _closes_length(before):
                operand_next = False  # `ensures |a| <= |b| {`: the bar closes a length, the brace opens the body
            if not before or (not operand_next and not display):
                return index
            index = _match_close(text, index, "{", "}") + 1
            continue
        elif depth == 0:
            stop = DAFNY_STOP.match(text, index)
            if stop and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] in "_'?")):
                return None
        index += 1
    return None


def _closes_length(before: str) -> bool:
    """Whether the `|` that ends `before` closes a `|...|` length: an even count of single bars in its clause."""
    if not before.endswith("|") or before.endswith("||"):
        return False
    clause = re.split(r"\b(?:requires|ensures|reads|modifies|decreases|returns)\b", before)[-1]
    return clause.replace("||", "").count("|") % 2 == 0


def _dafny_scopes(text: str) -> list[tuple[int, int, str, list[str]]]:
    """(body start, body end, name, attributes) of every class, trait and module (masked text)."""
    scopes = []
    for found in DAFNY_CONTAINER.finditer(text):
        after, spans = skip_attributes(text, found.end())
        name = re.match(r"\s*([A-Za-z_?'][\w'?.]*)", text[after:])
        if not name:
            continue
        index, depth = after + name.end(), 0
        while index < len(text):  # a class, trait or module header holds no expressions: the first `{` opens it
            ch = text[index]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == "{" and depth == 0:
                if text.startswith("{:", index):
                    index = _match_close(text, index, "{", "}") + 1
                    continue
                close = _match_close(text, index, "{", "}")
                scopes.append((index, close, name.group(1), [text[a:b] for a, b in spans]))
                break
            elif ch in "};" or (depth == 0 and DAFNY_STOP.match(text, index) and not text[index - 1].isalnum()):
                break
            index += 1
    return scopes


def dafny_contracts(code: str) -> list[Contract]:
    """Every Dafny declaration with a contract, read from the code as Dafny's scanner reads it."""
    reading = lexer.dafny(code)
    text, plain = reading.masked, reading.plain
    scopes = _dafny_scopes(text)
    found: list[Contract] = []
    for decl in DAFNY_DECL.finditer(text):
        kind = decl.group("kind")
        after, attr_spans = skip_attributes(text, decl.end())
        named = DAFNY_NAME.match(text, after)
        if kind == "constructor" and (not named or named.group("name") in ("requires", "ensures", "modifies")):
            name, name_end = "_ctor", after  # an anonymous constructor (Dafny's own name for it)
        elif named:
            name, name_end = named.group("name"), named.end()
        else:
            continue
        open_paren = text.find("(", name_end)
        if open_paren < 0:
            continue
        between = text[name_end:open_paren]
        if between.strip() and not between.strip().startswith("<"):
            continue
        close_paren = _match_close(text, open_paren, "(", ")")
        contract = Contract(name=name, kind=DAFNY_KINDS[kind], params=_typed_names(text[open_paren + 1 : close_paren]))
        contract.scope = ".".join(s[2] for s in scopes if s[0] < decl.start() < s[1])
        contract.attributes = [plain[a:b] for a, b in attr_spans]
        if any("autocontracts" in a for s in scopes if s[0] < decl.start() < s[1] for a in s[3]):
            contract.attributes.append("{:autocontracts}")
        rest = close_paren + 1
        returns = re.match(r"\s*(returns|yields)\s*\(", text[rest:])
        if returns:
            ret_open = rest + returns.end() - 1
            ret_close = _match_close(text, ret_open, "(", ")")
            contract.returns = _typed_names(text[ret_open + 1 : ret_close])
            rest = ret_close + 1
        else:
            colon = re.match(r"\s*:", text[rest:])
            if colon:
                type_end = _result_type_end(text, rest + colon.end())
                contract.returns = {"__result__": text[rest + colon.end() : type_end].strip()}
                rest = type_end
        body_open = _body_open(text, rest)
        header_end = body_open if body_open is not None else _header_end(text, rest)
        contract.header = (decl.start(), header_end)
        contract.attributes += [plain[a:b] for a, b in attribute_spans(text, rest, header_end)]
        clauses = list(DAFNY_CLAUSE.finditer(text, rest, header_end))
        for index, clause in enumerate(clauses):
            end = clauses[index + 1].start() if index + 1 < len(clauses) else header_end
            body = without_attributes(text, plain, clause.end(), end).strip()
            if clause.group(1) == "requires":
                contract.requires.append(body)
            elif clause.group(1) == "ensures":
                contract.ensures.append(body)
            else:
                contract.frames.setdefault(clause.group(1), []).append(body)
        if "{:autocontracts}" in contract.attributes and kind != "constructor" and name not in ("Valid", "_ctor"):
            contract.requires.append("Valid()")  # what {:autocontracts} adds to every member but its constructors
        if body_open is not None:
            body_close = _match_close(text, body_open, "{", "}")
            contract.body = (body_open, body_close)
            if re.search(r"\b(while|for)\b", text[body_open:body_close]):
                contract.attributes.append("loop")
        found.append(contract)
    return found


_TYPE_END = re.compile(
    r"[{}]|\b(requires|ensures|reads|modifies|decreases|witness)\b|" + DAFNY_STOP.pattern.replace(r"\b(", r"\b(?:", 1)
)


def _result_type_end(text: str, start: int) -> int:
    """Where a function's result type ends: at its first clause, its body, or whatever comes next."""
    end = _TYPE_END.search(text, start)
    return end.start() if end else len(text)


def _header_end(text: str, start: int) -> int:
    stop = DAFNY_STOP.search(text, start)
    end = stop.start() if stop else len(text)
    depth = 0
    for index in range(start, end):  # the enclosing class or module closes (a `}` not closing a display)
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth < 0:
                return index
    return end


# --------------------------------------------------------------------------- Verus

VERUS_FN = re.compile(r"\b(?:pub\s+)?(?:(?:spec|proof|exec)\s+)?fn\s+(?P<name>(?:r#)?\w+)")


def verus_contracts(code: str) -> list[Contract]:
    """Every Verus fn and its contract, read from the code as rustc's lexer reads it."""
    reading = lexer.rust(code)
    text, plain = reading.masked, reading.plain
    found: list[Contract] = []
    for decl in VERUS_FN.finditer(text):
        open_paren = text.find("(", decl.end())
        if open_paren < 0:
            continue
        close_paren = _match_close(text, open_paren, "(", ")")
        name = decl.group("name").removeprefix("r#")
        contract = Contract(name=name, kind="fn", params=_typed_names(text[open_paren + 1 : close_paren]))
        contract.language = "rust"
        rest = close_paren + 1
        ret = re.match(r"\s*->\s*\(\s*(\w+)\s*:\s*([^)]+)\)", text[rest:])
        if ret:
            contract.returns = {ret.group(1): ret.group(2).strip()}
        body_open = text.find("{", rest)
        header_end = body_open if body_open >= 0 else len(text)
        contract.header = (decl.start(), header_end)
        sections = list(re.finditer(r"\b(requires|ensures|recommends|decreases|returns)\b", text[rest:header_end]))
        for index, section in enumerate(sections):
            end = rest + (sections[index + 1].start() if index + 1 < len(sections) else header_end - rest)
            clauses = [plain[a:b].strip() for a, b in split_comma_spans(text, rest + section.end(), end)]
            clauses = [c for c in clauses if c]
            if section.group(1) == "requires":
                contract.requires += clauses
            elif section.group(1) == "ensures":
                contract.ensures += clauses
            elif section.group(1) == "decreases":
                contract.frames.setdefault("decreases", []).extend(clauses)
        if body_open >= 0:
            body_close = _match_close(text, body_open, "{", "}")
            contract.body = (body_open, body_close)
            if re.search(r"\b(while|loop|for)\b", text[body_open:body_close]):
                contract.attributes.append("loop")
        found.append(contract)
    return found


def split_comma_spans(
    text: str, start: int, end: int, opening: str = "([{", closing: str = ")]}"
) -> list[tuple[int, int]]:
    """The spans of `text[start:end]` between the commas that are not inside brackets (masked text: a comma in a
    string is no separator)."""
    spans, depth, part = [], 0, start
    for index in range(start, end):
        ch = text[index]
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            spans.append((part, index))
            part = index + 1
    spans.append((part, end))
    return spans


def _split_commas(text: str, opening: str = "([{", closing: str = ")]}") -> list[str]:
    """Split on the commas that are not inside any of the `opening`/`closing` brackets."""
    return [text[a:b] for a, b in split_comma_spans(text, 0, len(text), opening, closing)]


# --------------------------------------------------------------------------- Nagini (Python)


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
        return node.value.func.id
    return None


def nagini_contracts(code: str) -> list[Contract]:
    tree = ast.parse(code)
    found: list[Contract] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        contract = Contract(
            name=node.name, kind="def", header=(node.lineno, node.end_lineno or node.lineno), language="python"
        )
        contract.params = {a.arg: ast.unparse(a.annotation) if a.annotation else "" for a in node.args.args}
        if node.returns is not None:
            contract.returns = {"Result()": ast.unparse(node.returns)}
        contract.attributes = [ast.unparse(d) for d in node.decorator_list]
        first_stmt = None
        for stmt in node.body:
            name = _call_name(stmt)
            if name in ("Requires", "Ensures") and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                args = stmt.value.args
                if args:
                    (contract.requires if name == "Requires" else contract.ensures).append(ast.unparse(args[0]))
                continue
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue  # docstring
            if first_stmt is None and name not in ("Exsures", "Decreases"):
                first_stmt = stmt
        if first_stmt is not None:
            contract.body = (first_stmt.lineno, node.end_lineno or first_stmt.lineno)
        if any(isinstance(n, ast.While | ast.For) for n in ast.walk(node)):
            contract.attributes.append("loop")
        found.append(contract)
    return found
