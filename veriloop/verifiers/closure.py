"""The task's specification closure: what a candidate may not change, and the check that it did not.

The closure starts at every callable the task declares (its methods, lemmas, functions, predicates; Nagini
functions with contracts; Verus fns): their signatures and their requires/ensures/reads/modifies/decreases.
Every name those mention that the task itself declares (a function, predicate, datatype, type, constant; a
Nagini pure function or module constant; a Verus spec fn) joins the closure with its whole definition, and so
on transitively. Redefining `Sum` as `0` changes what `ensures r == Sum(a)` means without touching the clause,
so a closure member must come back token for token (comments, layout and attributes aside), or Z3 must prove
the new definition equal to the old one (`semantic.same_definition`).

Frames: a candidate's `modifies`/`reads` items must all appear in the task's (no wider), and a `decreases`
the task states must stay as it is.
"""

from __future__ import annotations

import ast
import copy as copymod
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from veriloop.verifiers import lexer, semantic
from veriloop.verifiers.spec import (
    DAFNY_CLAUSE,
    Contract,
    Language,
    _split_commas,
    dafny_contracts,
    normalise,
    verus_contracts,
    without_attributes,
)

NAME = re.compile(r"[A-Za-z_][\w'?]*")
CALLABLE_KINDS = ("method", "lemma", "function", "predicate", "constructor", "fn", "def")
DAFNY_OTHER = re.compile(
    r"(?<![\w.])(?P<kind>datatype|codatatype|type|newtype|const)\b(?:\s*\{:[^{}]*\})*\s*(?P<name>[A-Za-z_][\w']*)"
)
DAFNY_TOP = re.compile(
    r"(?<![\w.])(method|lemma|function|predicate|constructor|datatype|codatatype|type|newtype|const|class|trait|"
    r"module|iterator|ghost|twostate|least|greatest|static|import|include|var|abstract|opaque|inductive|"
    r"copredicate|colemma)\b"
)


@dataclass
class Decl:
    """One declaration of a program: its kind, the tokens that define it and the names it mentions."""

    name: str
    kind: str
    text: str
    """The whole declaration, normalised (tokens; comments, layout and attributes do not count)."""
    signature: str
    """Up to the first clause or body, normalised: names, parameter and result types."""
    mentions: set[str] = field(default_factory=set)
    """Names in the signature and the clauses (for a root), or anywhere in the declaration (for a member)."""
    defines: set[str] = field(default_factory=set)
    """Every name in the whole declaration (what it depends on when it joins the closure)."""
    contract: Contract | None = None
    body_text: str | None = None
    """Functions: the body expression as written (for the Z3 equivalence check)."""

    @property
    def callable(self) -> bool:
        return self.kind in CALLABLE_KINDS


def _names(text: str) -> set[str]:
    return set(NAME.findall(text))


# --------------------------------------------------------------------------- Dafny


def _extent(text: str, start: int) -> int:
    """Where a non-callable declaration starting at `start` ends: the next declaration keyword at its own level,
    or the closing brace of the class or module around it."""
    depth = 0
    index = start
    while index < len(text):
        ch = text[index]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return index
        elif depth == 0 and (ch.isalpha() or ch == "_"):
            top = DAFNY_TOP.match(text, index)
            if top and index > start and not (text[index - 1].isalnum() or text[index - 1] in "_."):
                return index
            word = NAME.match(text, index)
            index = word.end() if word else index + 1
            continue
        index += 1
    return len(text)


_PROOF_HINT = re.compile(r"\b(assert|reveal)\b[^;{}]*;")


def dafny_decls(code: str) -> list[Decl]:
    reading = lexer.dafny(code)
    text, plain = reading.masked, reading.plain
    found: list[Decl] = []
    spans: list[tuple[int, int]] = []
    for contract in dafny_contracts(code):
        start = contract.header[0]
        end = contract.body[1] + 1 if contract.body else contract.header[1]
        spans.append((contract.body[0], contract.body[1]) if contract.body else (end, end))
        first_clause = DAFNY_CLAUSE.search(text, start, contract.header[1])
        sig_end = first_clause.start() if first_clause else contract.header[1]
        signature = without_attributes(text, plain, start, sig_end)
        clauses = " ".join([*contract.requires, *contract.ensures, *(c for v in contract.frames.values() for c in v)])
        body_text = plain[contract.body[0] + 1 : contract.body[1]] if contract.body else None
        # `decreases` only argues termination, which Dafny checks for the candidate's version anyway
        parts = [signature, *(f"requires {c}" for c in contract.requires), *(f"ensures {c}" for c in contract.ensures)]
        parts += [f"{k} {c}" for k in ("reads", "modifies") for c in contract.frames.get(k, [])]
        body = ""
        if contract.body:
            body_start, body_end = contract.body[0], contract.body[1] + 1
            body = without_attributes(text, plain, body_start, body_end)
            if contract.kind in ("function", "predicate"):  # proof hints: checked, not part of the value
                hints, out = without_attributes(text, text, body_start, body_end), list(body)
                for hint in _PROOF_HINT.finditer(hints):
                    out[hint.start() : hint.end()] = " " * (hint.end() - hint.start())
                body = "".join(out)
        parts.append(body)
        mentions = _names(reading_names(text, start, sig_end)) | _names(clauses)
        if "{:autocontracts}" in contract.attributes:
            mentions |= {"Valid", "Repr"}  # what {:autocontracts} adds to the contract
        found.append(
            Decl(
                name=contract.name,
                kind=contract.kind,
                text=normalise(" ".join(parts)),
                signature=normalise(signature),
                mentions=mentions,
                defines=_names(reading_names(text, start, end)),
                contract=contract,
                body_text=body_text if contract.kind in ("function", "predicate") else None,
            )
        )
    for match in DAFNY_OTHER.finditer(text):
        if any(a < match.start() < b for a, b in spans):
            continue
        end = _extent(text, match.end())
        whole = without_attributes(text, plain, match.start(), end)
        found.append(
            Decl(
                name=match.group("name"),
                kind=match.group("kind"),
                text=normalise(whole),
                signature=normalise(whole),
                mentions=_names(reading_names(text, match.start(), end)) | _names(whole),
                defines=_names(whole),
            )
        )
    return found


def reading_names(masked: str, start: int, end: int) -> str:
    """The code of `masked[start:end]` with its attributes blanked: the names it mentions as code."""
    return without_attributes(masked, masked, start, end)


# --------------------------------------------------------------------------- Verus


VERUS_SECTION = re.compile(r"\b(requires|ensures|recommends|decreases|returns)\b")


def verus_decls(code: str) -> list[Decl]:
    reading = lexer.rust(code)
    text, plain = reading.masked, reading.plain
    found: list[Decl] = []
    for contract in verus_contracts(code):
        start = contract.header[0]
        end = contract.body[1] + 1 if contract.body else contract.header[1]
        first = VERUS_SECTION.search(text, start, contract.header[1])
        signature = plain[start : first.start() if first else contract.header[1]]
        prefix = text[max(0, start - 30) : start]
        spec_fn = re.match(r"(?:pub\s+)?spec\b", text[start:]) or re.search(
            r"\bspec\s*(\(\s*checked\s*\))?\s*$", prefix
        )
        clauses = " ".join([*contract.requires, *contract.ensures, *contract.frames.get("decreases", [])])
        found.append(
            Decl(
                name=contract.name,
                kind="spec" if spec_fn else "fn",
                text=normalise(plain[start:end], "rust"),
                signature=normalise(signature, "rust"),
                mentions=_names(text[start : first.start() if first else contract.header[1]]) | _names(clauses),
                defines=_names(plain[start:end]),
                contract=contract,
            )
        )
    return found


# --------------------------------------------------------------------------- Nagini (Python)

CONTRACT_CALLS = ("Requires", "Ensures", "Exsures", "Decreases")


def _without_docstring(node: ast.FunctionDef) -> ast.FunctionDef:
    copy = copymod.copy(node)
    copy.body = list(node.body)
    if copy.body and isinstance(copy.body[0], ast.Expr) and isinstance(copy.body[0].value, ast.Constant):
        copy.body = copy.body[1:]
    return copy


def _py_names(nodes: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                names.add(sub.attr)
    return names


def nagini_decls(code: str) -> list[Decl]:
    tree = ast.parse(code)
    found: list[Decl] = []
    scopes: list[list[ast.stmt]] = [tree.body]
    scopes += [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    for body in scopes:
        for node in body:
            if isinstance(node, ast.FunctionDef):
                stripped = _without_docstring(node)
                clauses = [
                    s
                    for s in node.body
                    if isinstance(s, ast.Expr)
                    and isinstance(s.value, ast.Call)
                    and isinstance(s.value.func, ast.Name)
                    and s.value.func.id in CONTRACT_CALLS
                ]
                head: list[ast.AST] = [node.args, *node.decorator_list]
                if node.returns is not None:
                    head.append(node.returns)
                signature = ast.dump(node.args) + "->" + (ast.dump(node.returns) if node.returns else "")
                decorators = {ast.unparse(d) for d in node.decorator_list}
                kind = "pure" if decorators & {"Pure", "Predicate"} else "def"
                found.append(
                    Decl(
                        name=node.name,
                        kind=kind,
                        text=ast.dump(stripped),
                        signature=signature + "@" + ",".join(sorted(decorators)),
                        mentions=_py_names([*head, *clauses]),
                        defines=_py_names([stripped]),
                    )
                )
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        found.append(
                            Decl(
                                name=target.id,
                                kind="const",
                                text=ast.dump(node),
                                signature=ast.dump(node),
                                mentions=_py_names([node]),
                                defines=_py_names([node]),
                            )
                        )
            elif isinstance(node, ast.ClassDef):
                fields = [s for s in node.body if not isinstance(s, ast.FunctionDef)]
                bases = [ast.dump(b) for b in node.bases]
                text = "class " + node.name + repr(bases) + "".join(ast.dump(s) for s in fields)
                found.append(
                    Decl(
                        name=node.name,
                        kind="class",
                        text=text,
                        signature=text,
                        mentions=_py_names(node.bases),
                        defines=_py_names([*node.bases, *fields]),
                    )
                )
    return found


# --------------------------------------------------------------------------- the check


def _by_name(decls: list[Decl]) -> dict[str, list[Decl]]:
    table: dict[str, list[Decl]] = {}
    for decl in decls:
        table.setdefault(decl.name, []).append(decl)
    return table


def closure(spec: list[Decl]) -> tuple[list[Decl], list[Decl]]:
    """(roots, members): the task's callables, and every declaration their contracts reach, transitively."""
    table = _by_name(spec)
    roots = [d for d in spec if d.callable and d.kind != "pure"]
    members: dict[str, Decl] = {}
    todo = [name for root in roots for name in root.mentions]
    while todo:
        name = todo.pop()
        if name in members:
            continue
        for decl in table.get(name, []):
            if decl.callable and decl.kind in ("method", "lemma", "constructor", "def", "fn"):
                continue  # a callable's signature is a root of its own; its body stays free
            members[name] = decl
            todo.extend(decl.defines - {name})
    return roots, list(members.values())


def _items(clauses: list[str], language: Language) -> set[str]:
    return {normalise(part, language) for clause in clauses for part in _split_commas(clause) if part.strip()}


def frame_check(kind: str, name: str, wanted: Contract, got: Contract) -> str | None:
    """Frames no wider than the task's; a `decreases` the task states kept as it is."""
    language = wanted.language
    for frame in ("modifies", "reads"):
        allowed = _items(wanted.frames.get(frame, []), language)
        extra = sorted(_items(got.frames.get(frame, []), language) - allowed)
        if extra:
            return f"{kind} {name}: `{frame} {extra[0]}` is wider than the task's frame"
    wanted_dec = _items(wanted.frames.get("decreases", []), language)
    if wanted_dec and _items(got.frames.get("decreases", []), language) != wanted_dec:
        return f"{kind} {name}: the task's `decreases` clause was changed"
    return None


def check(
    spec_decls: list[Decl],
    cand_decls: list[Decl],
    translate: semantic.Translate | None = None,
) -> str | None:
    """The reason the candidate changed the task's closure, or None. Requires/ensures are compared elsewhere
    (the guard's `_compare`, with Z3); here signatures, frames and every member of the closure. A name declared
    more than once (methods of several classes) is compared declaration by declaration, in order."""
    roots, members = closure(spec_decls)
    spec_table, cand = _by_name(spec_decls), _by_name(cand_decls)
    for name in sorted({d.name for d in [*roots, *members]}):
        if len(cand.get(name, [])) > len(spec_table[name]):
            return f"{name} of the specification is declared more than once"
    for name in sorted({root.name for root in roots}):
        wanted = [d for d in spec_table[name] if d in roots]
        got = [d for d in cand.get(name, []) if d.callable or d.kind == "spec"]
        if not got:
            continue  # a missing callable with a contract is reported by the requires/ensures comparison
        for root, other in zip(wanted, got, strict=False):
            if other.kind != root.kind and {other.kind, root.kind} != {"spec", "fn"}:
                return f"{root.kind} {root.name} of the specification became a {other.kind}"
            if other.signature != root.signature:
                return f"the signature of {root.kind} {root.name} was changed"
            if root.contract is not None and other.contract is not None:
                reason = frame_check(root.kind, root.name, root.contract, other.contract)
                if reason:
                    return reason
    for name in sorted({member.name for member in members}):
        wanted = [d for d in spec_table[name] if not d.callable or d.kind in ("function", "predicate", "pure")]
        got = [d for d in cand.get(name, []) if not d.callable or d.kind in ("function", "predicate", "pure")]
        first = wanted[0]
        if not got:
            return f"{first.kind} {name}, which the specification uses, is missing"
        if sorted(d.text for d in wanted) == sorted(d.text for d in got):
            continue
        if len(wanted) == len(got) == 1 and translate is not None and _proved_same(first, got[0], translate):
            continue
        return f"{first.kind} {name}, which the specification uses, was changed"
    return None


def _proved_same(member: Decl, other: Decl, translate: semantic.Translate) -> bool:
    """A closure function rewritten in another form: same signature and contract, and Z3 proves the bodies equal."""
    if member.contract is None or other.contract is None or member.signature != other.signature:
        return False
    if member.body_text is None or other.body_text is None:
        return False
    language = member.contract.language
    if [normalise(c, language) for c in member.contract.requires] != [
        normalise(c, language) for c in other.contract.requires
    ]:
        return False
    if [normalise(c, language) for c in member.contract.ensures] != [
        normalise(c, language) for c in other.contract.ensures
    ]:
        return False
    names = {**member.contract.params}
    return semantic.same_value(names, member.contract.requires, member.body_text, other.body_text) is True
