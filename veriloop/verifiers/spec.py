"""Contracts read from source text: per function its pre/postconditions, parameters and body span.

Dafny and Verus are scanned as text (comments blanked out first, so positions stay put); Nagini programs
are Python and read with `ast`. Only what the spec guard needs: clause texts, typed names, where the body is.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

TOKEN = re.compile(r"\w+|==>|<==>|<==|==|!=|<=|>=|&&|\|\||::|\S")


def blank_comments(code: str, *, hash_comments: bool = False) -> str:
    """`code` with comments replaced by spaces (newlines kept), string literals left alone."""
    out = list(code)
    i, n = 0, len(code)
    while i < n:
        ch = code[i]
        if ch == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            i = j + 1
        elif code.startswith("//", i) and not hash_comments:
            j = code.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif code.startswith("/*", i) and not hash_comments:
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out[i:j] = ["\n" if c == "\n" else " " for c in code[i:j]]
            i = j
        else:
            i += 1
    return "".join(out)


def normalise(text: str) -> str:
    """A clause as a token sequence: white space and comments do not count."""
    return " ".join(TOKEN.findall(blank_comments(text)))


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

    @property
    def has_loop(self) -> bool:
        return "loop" in self.attributes


# --------------------------------------------------------------------------- Dafny

DAFNY_DECL = re.compile(
    r"\b(?P<kind>method|lemma|function|predicate|constructor)(?:\s+method)?\b"
    r"(?P<attrs>(?:\s*\{:[^}]*\})*)\s*(?P<name>[A-Za-z_][\w']*)?"
)
DAFNY_CLAUSE = re.compile(r"\b(requires|ensures|modifies|reads|decreases)\b")
DAFNY_STOP = re.compile(r"\b(method|lemma|function|predicate|class|module|datatype|constructor|twostate|ghost)\b")


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


def _typed_names(text: str) -> dict[str, str]:
    names: dict[str, str] = {}
    for item in _split_commas(text, opening="<([", closing=">)]"):
        if ":" in item:
            name, _, typ = item.partition(":")
            name = name.replace("ghost", "").strip()
            if name:
                names[name] = typ.strip()
    return names


def _body_open(text: str, start: int) -> int | None:
    """The offset of the `{` that opens a body, skipping `{:attr}` and set displays inside expressions."""
    depth = 0
    index = start
    while index < len(text):
        ch = text[index]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
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
            if stop and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")):
                return None
        index += 1
    return None


def _closes_length(before: str) -> bool:
    """Whether the `|` that ends `before` closes a `|...|` length: an even count of single bars in its clause."""
    if not before.endswith("|") or before.endswith("||"):
        return False
    clause = re.split(r"\b(?:requires|ensures|reads|modifies|decreases|returns)\b", before)[-1]
    return clause.replace("||", "").count("|") % 2 == 0


def dafny_contracts(code: str) -> list[Contract]:
    text = blank_comments(code)
    found: list[Contract] = []
    for decl in DAFNY_DECL.finditer(text):
        name = decl.group("name")
        if not name:
            continue
        open_paren = text.find("(", decl.end())
        if open_paren < 0:
            continue
        between = text[decl.end() : open_paren]
        if between.strip() and not between.strip().startswith("<"):
            continue
        close_paren = _match_close(text, open_paren, "(", ")")
        contract = Contract(name=name, kind=decl.group("kind"), params=_typed_names(text[open_paren + 1 : close_paren]))
        contract.attributes = re.findall(r"\{:[^}]*\}", decl.group("attrs") or "")
        rest = close_paren + 1
        returns = re.match(r"\s*returns\s*\(", text[rest:])
        if returns:
            ret_open = rest + returns.end() - 1
            ret_close = _match_close(text, ret_open, "(", ")")
            contract.returns = _typed_names(text[ret_open + 1 : ret_close])
            rest = ret_close + 1
        else:
            result_type = re.match(r"\s*:\s*([^{]+?)(?=\s*(requires|ensures|reads|decreases|\{|$))", text[rest:])
            if result_type:
                contract.returns = {"__result__": result_type.group(1).strip()}
        body_open = _body_open(text, rest)
        header_end = body_open if body_open is not None else _header_end(text, rest)
        contract.header = (decl.start(), header_end)
        contract.attributes += re.findall(r"\{:[^}]*\}", text[rest:header_end])
        clauses = list(DAFNY_CLAUSE.finditer(text, rest, header_end))
        for index, clause in enumerate(clauses):
            end = clauses[index + 1].start() if index + 1 < len(clauses) else header_end
            body = re.sub(r"\{:[^}]*\}", " ", text[clause.end() : end]).strip()
            if clause.group(1) == "requires":
                contract.requires.append(body)
            elif clause.group(1) == "ensures":
                contract.ensures.append(body)
            else:
                contract.frames.setdefault(clause.group(1), []).append(body)
        if body_open is not None:
            body_close = _match_close(text, body_open, "{", "}")
            contract.body = (body_open, body_close)
            if re.search(r"\b(while|for)\b", text[body_open:body_close]):
                contract.attributes.append("loop")
        found.append(contract)
    return found


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

VERUS_FN = re.compile(r"\b(?:pub\s+)?(?:(?:spec|proof|exec)\s+)?fn\s+(?P<name>\w+)")


def verus_contracts(code: str) -> list[Contract]:
    text = blank_comments(code)
    found: list[Contract] = []
    for decl in VERUS_FN.finditer(text):
        open_paren = text.find("(", decl.end())
        if open_paren < 0:
            continue
        close_paren = _match_close(text, open_paren, "(", ")")
        contract = Contract(name=decl.group("name"), kind="fn", params=_typed_names(text[open_paren + 1 : close_paren]))
        rest = close_paren + 1
        ret = re.match(r"\s*->\s*\(\s*(\w+)\s*:\s*([^)]+)\)", text[rest:])
        if ret:
            contract.returns = {ret.group(1): ret.group(2).strip()}
        body_open = text.find("{", rest)
        header_end = body_open if body_open >= 0 else len(text)
        contract.header = (decl.start(), header_end)
        header = text[rest:header_end]
        sections = list(re.finditer(r"\b(requires|ensures|recommends|decreases|returns)\b", header))
        for index, section in enumerate(sections):
            end = sections[index + 1].start() if index + 1 < len(sections) else len(header)
            clauses = [c.strip() for c in _split_commas(header[section.end() : end]) if c.strip()]
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


def _split_commas(text: str, opening: str = "([{", closing: str = ")]}") -> list[str]:
    """Split on the commas that are not inside any of the `opening`/`closing` brackets."""
    parts, depth, part = [], 0, ""
    for ch in text:
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    return parts


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
        contract = Contract(name=node.name, kind="def", header=(node.lineno, node.end_lineno or node.lineno))
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
