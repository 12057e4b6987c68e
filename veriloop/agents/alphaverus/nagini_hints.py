"""Hints infill for Nagini: each `while` loop's body opens with the model's `Invariant(...)` lines.

Nagini reads a loop's invariants from the first statements of its body, so a slot is the line of the body's
first statement, and the hints are inserted there with the body's indentation. A reply is one block per loop,

    # loop 1
    Invariant(Acc(list_pred(xs)))
    Invariant(0 <= i and i <= len(xs))

decoded under a Lark grammar over the program's own names: the loop's function's parameters and locals, its
lists (`len`, indexing, `Acc(list_pred(...))`), the program's `@Pure` functions, `Implies` and one `Forall`
over a fresh integer; never `Result()`, `Old`, `Assume` or a statement. Nagini loops need no termination
measure (partial correctness), so the kinds are invariants only. A parsed line is spliced only if it is one
`Invariant(...)` call whose names are the program's and Nagini's expression functions (`admits`), so a reply
that bypasses the grammar cannot add a statement either; the spec guard then judges the spliced program.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from functools import lru_cache

from veriloop.agents.alphaverus.hints import HintLanguage, Slot, Spliced
from veriloop.records import Constraint

MIN_INVARIANTS = 1
MAX_INVARIANTS = 4
QUANTIFIED = ("k", "j", "m", "t")
"""Bound variable names for a `Forall`: the first one the program does not use."""
CONTRACT_FUNCTIONS = frozenset({"Invariant", "Acc", "list_pred", "Forall", "Implies", "len", "int"})
"""Names a hint may use besides the program's own (the lambda's bound variable is the program's fresh one)."""


def _parse(program: str) -> ast.Module | None:
    try:
        return ast.parse(program)
    except SyntaxError:
        return None


def _offsets(program: str) -> list[int]:
    """Offset of the start of each line (1-based line n at index n - 1)."""
    starts = [0]
    for found in re.finditer("\n", program):
        starts.append(found.end())
    return starts


def hint_slots(program: str) -> list[Slot]:
    """Every `while` loop whose body starts on a line of its own, in source order: the offset of that line,
    its indentation, and the offset of the `while`."""
    tree = _parse(program)
    if tree is None:
        return []
    lines, starts = program.splitlines(), _offsets(program)
    slots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.While) and node.body[0].lineno > (node.test.end_lineno or node.lineno):
            first = node.body[0]
            line = first.lineno
            indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
            slots.append(Slot(brace=starts[line - 1], indent=indent, keyword=starts[node.lineno - 1] + node.col_offset))
    return sorted(slots, key=lambda slot: slot.brace)


PERMISSION = "Invariant(Acc("


def splice_lines(program: str, slots: Sequence[Slot], hints: dict[int, list[str]]) -> Spliced:
    """The program with each slot's hints as the first lines of its loop body, remembering where they landed.

    Permission invariants go first: Viper reads a loop's invariants in order, so `len(xs)` in an invariant before
    `Acc(list_pred(xs))` is ill-formed ("the precondition of function len might not hold")."""
    hints = {slot: sorted(lines, key=lambda line: not line.startswith(PERMISSION)) for slot, lines in hints.items()}
    out: list[str] = []
    where: dict[int, tuple[int, str]] = {}
    loops: dict[int, int] = {}
    last, added = 0, 0
    for index, slot in enumerate(slots, 1):
        before = sum(len(hints.get(i, [])) for i, other in enumerate(slots, 1) if other.brace <= slot.keyword)
        loops[program.count("\n", 0, slot.keyword) + 1 + before] = index
        out.append(program[last : slot.brace])
        first = program.count("\n", 0, slot.brace) + 1 + added
        for offset, hint in enumerate(hints.get(index, [])):
            where[first + offset] = (index, hint)
            out.append(f"{slot.indent}{hint}\n")
        added += len(hints.get(index, []))
        last = slot.brace
    out.append(program[last:])
    return Spliced("".join(out), where, loops)


@lru_cache(maxsize=256)
def _facts(program: str) -> tuple[frozenset[str], frozenset[str], frozenset[str], dict[str, int]]:
    """(plain names, lists, booleans, pure functions -> arity) a hint may use: names of the functions that hold
    a loop (their parameters and assigned locals) and the program's `@Pure` functions."""
    tree = _parse(program)
    names: set[str] = set()
    lists: set[str] = set()
    flags: set[str] = set()
    pure: dict[str, int] = {}
    for node in ast.walk(tree) if tree is not None else []:
        if not isinstance(node, ast.FunctionDef):
            continue
        if any(isinstance(d, ast.Name) and d.id == "Pure" for d in node.decorator_list):
            pure[node.name] = len(node.args.args)
        if not any(isinstance(inner, ast.While) for inner in ast.walk(node)):
            continue
        for arg in node.args.args:
            text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            (lists if re.match(r"(List|list)\b", text) else flags if text == "bool" else names).add(arg.arg)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                value = inner.value
                for target in targets:
                    if isinstance(target, ast.Name):
                        if isinstance(value, ast.List) or (
                            isinstance(inner, ast.AnnAssign)
                            and re.match(r"(List|list)\b", ast.unparse(inner.annotation))
                        ):
                            lists.add(target.id)
                        elif isinstance(value, ast.Constant) and isinstance(value.value, bool):
                            flags.add(target.id)
                        else:
                            names.add(target.id)
    names -= lists | flags | set(pure) | CONTRACT_FUNCTIONS
    return frozenset(names), frozenset(lists), frozenset(flags), pure


def _bound(program: str) -> str:
    used = set(re.findall(r"[A-Za-z_]\w*", program))
    return next((name for name in QUANTIFIED if name not in used), "k_")


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _alternatives(names: Sequence[str]) -> str:
    return " | ".join(_literal(name) for name in sorted(names, key=lambda n: (-len(n), n)))


def hint_grammar(program: str, slots: Sequence[Slot]) -> Constraint:
    """A Lark grammar for one block per slot: 1-4 `Invariant(...)` lines each.

    An invariant is a permission to a list (`Acc(list_pred(xs))`, which a loop that reads the list must
    restate), a boolean formula over integer terms (comparisons joined by `and`/`or`, `Implies`, the program's
    boolean names), or one `Forall(int, lambda k: Implies(lo <= k and k < hi, body))` whose body reads the lists
    at the bound variable; terms are the program's names, small numbers, `len(xs)`, `xs[i]` and calls of the
    program's `@Pure` functions."""
    names, lists, flags, pure = _facts(program)
    bound = _literal(_bound(program))
    loops = " ".join(f"loop{index}" for index in range(1, len(slots) + 1))
    optional = " ".join(["inv"] * (MIN_INVARIANTS - 1) + ["inv?"] * (MAX_INVARIANTS - MIN_INVARIANTS))
    rules = [f"start: {loops}"]
    for index in range(1, len(slots) + 1):
        rules.append(f'loop{index}: "# loop {index}\\n" inv {optional}')
    rules += [
        'inv: "Invariant(" expr ")\\n"',
        "expr: disj" + (' | "Acc(list_pred(" coll "))" | quant' if lists else ""),
        'disj: conj (" or " conj)*',
        'conj: cmp (" and " cmp)*',
        'cmp: sum cmpop sum | "Implies(" disj ", " disj ")"' + (' | "not "? flag' if flags else ""),
        'cmpop: " <= " | " < " | " == " | " != " | " >= " | " > "',
        'sum: term ((" + " | " - ") term)*',
        'term: atom ((" * " | " // " | " % ") atom)?',
        'atom: name | NUMBER | "(" sum ")"'
        + (' | "len(" coll ")" | coll "[" sum "]"' if lists else "")
        + (" | call" if pure else ""),
        f"name: {_alternatives(sorted(names))}" if names else 'name: "0"',
        "NUMBER: /[0-9]{1,3}/",
    ]
    if pure:
        rules.append("call: " + " | ".join(f'{_literal(name + "(")} args{arity} ")"' for name, arity in pure.items()))
        for arity in sorted(set(pure.values())):
            rules.append(f"args{arity}: " + ' ", " '.join(["arg"] * arity) if arity else f'args{arity}: ""')
        rules.append("arg: sum" + (" | coll" if lists else ""))
    if lists:
        rules += [
            f'quant: "Forall(int, lambda " {bound} ": Implies(" qlow ", " qbody "))"',
            f'qlow: sum " <= " {bound} " and " {bound} " < " sum',
            'qbody: qcmp ((" and " | " or ") qcmp)*',
            "qcmp: qsum cmpop qsum",
            'qsum: qterm ((" + " | " - ") qterm)*',
            'qterm: qatom ((" * " | " // " | " % ") qatom)?',
            f'qatom: name | {bound} | NUMBER | "(" qsum ")" | coll "[" {bound} "]" | coll "[" sum "]"'
            + (" | call" if pure else ""),
            f"coll: {_alternatives(sorted(lists))}",
        ]
    if flags:
        rules.append(f"flag: {_alternatives(sorted(flags))}")
    return Constraint(kind="lark", value="\n".join(rules) + "\n")


FORBIDDEN = (ast.NamedExpr, ast.Attribute, ast.Starred, ast.Await, ast.Yield, ast.YieldFrom)
"""Expression nodes a hint never needs: assignment, attribute access (a way to any object), unpacking."""


def admits(program: str, line: str) -> bool:
    """Whether `line` is one `Invariant(...)` call of a single expression that names only the program's own
    names, its pure functions and Nagini's expression functions (no `Result()`, `Old`, `Assume`, assignment,
    attribute or second statement)."""
    tree = _parse(line.strip())
    if tree is None or len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return False
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Invariant"):
        return False
    if len(call.args) != 1 or call.keywords:
        return False
    names, lists, flags, pure = _facts(program)
    allowed = names | lists | flags | set(pure) | CONTRACT_FUNCTIONS
    bound: set[str] = set()
    for node in ast.walk(call):
        if isinstance(node, ast.Lambda):
            bound |= {arg.arg for arg in node.args.args}
        elif isinstance(node, FORBIDDEN) or (isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)):
            return False
    return all(node.id in allowed | bound for node in ast.walk(call) if isinstance(node, ast.Name))


EXAMPLE_PROGRAM = """from nagini_contracts.contracts import *


def sum_to(n: int) -> int:
    Requires(n >= 0)
    Ensures(Result() == n * (n + 1) // 2)
    i = 0
    s = 0
    while i < n:
        i = i + 1
        s = s + i
    return s
"""
EXAMPLE_HINTS = "# loop 1\nInvariant(0 <= i and i <= n)\nInvariant(s == i * (i + 1) // 2)\n"
LIST_PROGRAM = """from typing import List

from nagini_contracts.contracts import *


def first_negative(a: List[int]) -> int:
    Requires(Acc(list_pred(a)))
    Ensures(Acc(list_pred(a)))
    Ensures(0 <= Result() and Result() <= len(a))
    Ensures(Forall(int, lambda k: Implies(0 <= k and k < Result(), a[k] >= 0)))
    i = 0
    while i < len(a) and a[i] >= 0:
        i = i + 1
    return i
"""
LIST_HINTS = (
    "# loop 1\nInvariant(Acc(list_pred(a)))\nInvariant(0 <= i and i <= len(a))\n"
    "Invariant(Forall(int, lambda j: Implies(0 <= j and j < i, a[j] >= 0)))\n"
)
"""Two worked examples (not bench tasks): a counting loop and a list loop, so the model sees the permission
invariant a list loop needs."""

NAGINI = HintLanguage(
    target="nagini",
    title="Nagini",
    comment="#",
    starts=("Invariant(",),
    decreases="Decreases(",
    termination=re.compile(r"terminat|decrease", re.I),
    slots=hint_slots,
    grammar=hint_grammar,
    splice=splice_lines,
    examples=((EXAMPLE_PROGRAM, EXAMPLE_HINTS), (LIST_PROGRAM, LIST_HINTS)),
    kinds="loop invariants",
    admits=admits,
)
