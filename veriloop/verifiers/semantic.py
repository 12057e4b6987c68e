"""Semantic spec checks with Z3: is a candidate's contract as strong as the task's, is a postcondition trivial?

Clauses over integers, booleans and sequences (Dafny `int`, `nat`, `bool`, `seq<T>`, `array<T>`; Nagini's
`int`, `bool`, `List[int]`) are translated to Z3; anything else (heap reads, `old`, user functions) makes the
question unanswerable and the guard falls back to its textual rules. Every answer is True, False or None.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from typing import Any

import z3  # type: ignore[import-untyped]

SOLVER_TIMEOUT_MS = 2000


class Unsupported(Exception):
    """The clause uses something outside the integer/boolean/sequence fragment."""


BOUNDED: dict[str, tuple[int, int]] = {
    **{f"u{bits}": (0, 2**bits - 1) for bits in (8, 16, 32, 64, 128)},
    **{f"i{bits}": (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) for bits in (8, 16, 32, 64, 128)},
    "usize": (0, 2**64 - 1),
    "isize": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
"""Verus's machine integers (usize as on the 64-bit hosts Verus runs on) and Dafny's common newtypes."""


def _sort(type_text: str) -> tuple[z3.SortRef, tuple[int | None, int | None] | None] | None:
    """Z3 sort of a declared type, and the range its values lie in (None: unbounded)."""
    text = type_text.replace(" ", "").lstrip("&").removeprefix("mut")
    if text in ("int",):
        return z3.IntSort(), None
    if text == "nat":
        return z3.IntSort(), (0, None)
    if text in BOUNDED:
        low, high = BOUNDED[text]
        return z3.IntSort(), (low, high)
    if text == "bool":
        return z3.BoolSort(), None
    inner = re.fullmatch(r"(?:seq|array|List|list|Seq|Vec|\[)[<\[]?(\w+)[>\]]", text)
    if inner:
        element = _sort(inner.group(1))
        if element is not None:
            return z3.SeqSort(element[0]), None
    return None


def _function_sort(type_text: str) -> Any | None:
    """`T1,T2->R` as an uninterpreted function's domain and range (the closure keeps its definition fixed)."""
    params, _, result = type_text.rpartition("->")
    domain = []
    for part in [p for p in params.split(";") if p.strip()]:
        sort = _sort(part)
        if sort is None:
            return None
        domain.append(sort[0])
    ranged = _sort(result)
    if ranged is None:
        return None
    return domain, ranged[0]


class Env:
    """Typed Z3 constants for a contract's parameters and results, plus their range facts (nat >= 0, u8 < 256);
    names ending in `(` are the task's functions, uninterpreted."""

    def __init__(self, names: dict[str, str], prefix: str = "") -> None:
        self.vars: dict[str, Any] = {}
        self.facts: list[Any] = []
        for name, type_text in names.items():
            if name.endswith("("):
                signature = _function_sort(type_text)
                if signature is not None:
                    self.vars[name] = z3.Function(prefix + name[:-1], *signature[0], signature[1])
                continue
            sort = _sort(type_text)
            if sort is None:
                continue
            const = z3.Const(prefix + name, sort[0])
            self.vars[name] = const
            old = z3.Const(prefix + "old!" + name, sort[0])
            self.vars["old!" + name] = old
            if sort[1] is not None:
                for value in (const, old):
                    self.facts += _in_range(value, sort[1])
            element = _element_range(type_text)
            if element is not None:
                for value in (const, old):
                    index = z3.Int(f"{prefix}{name}!index")
                    within = z3.And(index >= 0, index < z3.Length(value))
                    self.facts.append(z3.ForAll([index], z3.Implies(within, z3.And(*_in_range(value[index], element)))))


def _in_range(value: Any, bounds: tuple[int | None, int | None]) -> list[Any]:
    low, high = bounds
    return [
        fact
        for fact in (value >= low if low is not None else None, value <= high if high is not None else None)
        if fact is not None
    ]


def _element_range(type_text: str) -> tuple[int | None, int | None] | None:
    """The range of a sequence's elements (Vec<u8>: 0..255), or None."""
    inner = re.fullmatch(r"(?:seq|array|List|list|Seq|Vec|\[)[<\[]?(\w+)[>\]]", type_text.replace(" ", "").lstrip("&"))
    if inner is None:
        return None
    element = _sort(inner.group(1))
    return element[1] if element is not None else None


# --------------------------------------------------------------------------- Dafny expressions

_DAFNY_TOKEN = re.compile(r"\s*(<==>|==>|<==|&&&|\|\|\||&&|\|\||===|==|!=|<=|>=|::|\.\.|!in\b|\d+|[A-Za-z_][\w']*|\S)")
_MULTISET = z3.Function("multiset!int", z3.SeqSort(z3.IntSort()), z3.ArraySort(z3.IntSort(), z3.IntSort()))


class DafnyParser:
    """A small Pratt parser for Dafny expressions, producing Z3 terms."""

    def __init__(self, text: str, env: dict[str, Any]) -> None:
        self.tokens = [t for t in _DAFNY_TOKEN.findall(text) if t]
        self.pos = 0
        self.env = dict(env)

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise Unsupported(f"expected {expected!r}, got {token!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        expr = self.expr()
        if self.peek() is not None:
            raise Unsupported(f"trailing {self.peek()!r}")
        return expr

    def expr(self) -> Any:
        left = self.implies()
        while self.peek() == "<==>":
            self.take()
            left = left == self.implies()
        return left

    def implies(self) -> Any:
        left = self.logic()
        if self.peek() == "==>":
            self.take()
            return z3.Implies(left, self.implies())
        if self.peek() == "<==":
            self.take()
            return z3.Implies(self.implies(), left)
        return left

    def logic(self) -> Any:
        if self.peek() in ("&&&", "|||"):  # Verus's bulleted conjunctions
            self.take()
        left = self.relation()
        while self.peek() in ("&&", "||", "&&&", "|||"):
            op = self.take()
            right = self.relation()
            left = z3.And(left, right) if op in ("&&", "&&&") else z3.Or(left, right)
        return left

    def relation(self) -> Any:
        first = self.additive()
        parts: list[Any] = []
        left = first
        while self.peek() in ("==", "!=", "<", "<=", ">", ">=", "in", "!in", "==="):
            op = self.take()
            op = "==" if op == "===" else op
            right = self.additive()
            parts.append(_compare(op, left, right))
            left = right
        if not parts:
            return first
        return parts[0] if len(parts) == 1 else z3.And(*parts)

    def additive(self) -> Any:
        left = self.multiplicative()
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.multiplicative()
            left = left + right if op == "+" else left - right
        return left

    def multiplicative(self) -> Any:
        left = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            right = self.unary()
            left = left * right if op == "*" else (left / right if op == "/" else left % right)
        return left

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return z3.Not(self.unary())
        if self.peek() == "-":
            self.take()
            return -self.unary()
        return self.postfix(self.primary())

    def postfix(self, value: Any) -> Any:
        while True:
            token = self.peek()
            if token == "[":
                self.take()
                value = self.index(value)
            elif token == "@":  # Verus's view of a Vec or slice: the sequence itself here
                self.take()
            elif token == "as":  # Verus casts to int/nat: the mathematical value is the same
                self.take()
                self.take()
            elif token == "." and self.pos + 1 < len(self.tokens):
                member = self.tokens[self.pos + 1]
                if member == "Length":
                    self.pos += 2
                    value = self._length(value)
                elif member in ("len", "subrange", "to_multiset", "view") and self._at(self.pos + 2, "("):
                    self.pos += 3
                    args = []
                    while self.peek() != ")":
                        args.append(self.expr())
                        if self.peek() == ",":
                            self.take()
                    self.take(")")
                    value = self._method(value, member, args)
                else:
                    raise Unsupported(f"member {member!r}")
            else:
                return value

    def _at(self, pos: int, token: str) -> bool:
        return pos < len(self.tokens) and self.tokens[pos] == token

    @staticmethod
    def _length(value: Any) -> Any:
        if not z3.is_seq(value):
            raise Unsupported("length of a non-sequence")
        return z3.Length(value)

    def _method(self, value: Any, member: str, args: list[Any]) -> Any:
        if member == "len" and not args:
            return self._length(value)
        if member == "view" and not args:
            return value
        if member == "subrange" and len(args) == 2:
            return _slice(value, args[0], args[1])
        if member == "to_multiset" and not args:
            return _multiset(value)
        raise Unsupported(f"method {member}")

    def index(self, value: Any) -> Any:
        """After `[`: an index `a[i]`, or a slice `a[i..j]`, `a[..j]`, `a[i..]`, `a[..]`."""
        low = None if self.peek() == ".." else self.expr()
        if self.peek() == "..":
            self.take()
            high = None if self.peek() == "]" else self.expr()
            self.take("]")
            return _slice(value, low, high)
        self.take("]")
        if not z3.is_seq(value) or low is None:
            raise Unsupported("indexing a non-sequence")
        return value[low]

    def primary(self) -> Any:
        token = self.take()
        if token.isdigit():
            return z3.IntVal(int(token))
        if token in ("true", "false"):
            return z3.BoolVal(token == "true")
        if token == "(":
            value = self.expr()
            self.take(")")
            return value
        if token == "|":
            value = self.additive()
            self.take("|")
            if not z3.is_seq(value):
                raise Unsupported("length of a non-sequence")
            return z3.Length(value)
        if token in ("forall", "exists"):
            return self.quantifier(token)
        if token == "if":
            cond = self.expr()
            self.take("then")
            then = self.expr()
            self.take("else")
            return z3.If(cond, then, self.expr())
        if token == "old" and self.peek() == "(":
            self.take()
            saved = self.env
            self.env = {**saved, **{k[4:]: v for k, v in saved.items() if k.startswith("old!")}}
            value = self.expr()
            self.env = saved
            self.take(")")
            return value
        if token == "multiset" and self.peek() == "(":
            self.take()
            value = self.expr()
            self.take(")")
            return _multiset(value)
        if token in self.env and self.peek() != "(":
            return self.env[token]
        if token + "(" in self.env and self.peek() == "(":
            self.take()
            args = []
            while self.peek() != ")":
                args.append(self.expr())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            function = self.env[token + "("]
            if len(args) != function.arity():
                raise Unsupported(f"{token} with {len(args)} arguments")
            return function(*args)
        raise Unsupported(f"name {token!r}")

    def quantifier(self, kind: str) -> Any:
        if self.peek() == "|":  # Verus: forall|i: int, j: int| body
            return self.verus_quantifier(kind)
        names = [self.take()]
        while self.peek() == ",":
            self.take()
            names.append(self.take())
        if self.peek() == ":":
            self.take()
            if self.take() not in ("int", "nat"):
                raise Unsupported("quantifier over a non-integer")
        saved = dict(self.env)
        bound = [z3.Int(f"{name}!{self.pos}") for name in names]
        self.env.update(zip(names, bound, strict=True))
        guard = None
        if self.peek() == "|":
            self.take()
            guard = self.implies()
        self.take("::")
        body = self.expr()
        self.env = saved
        if kind == "forall":
            return z3.ForAll(bound, z3.Implies(guard, body) if guard is not None else body)
        return z3.Exists(bound, z3.And(guard, body) if guard is not None else body)

    def verus_quantifier(self, kind: str) -> Any:
        self.take("|")
        names = []
        while self.peek() != "|":
            name = self.take()
            if self.peek() == ":":
                self.take()
                if self.take() not in ("int", "nat"):
                    raise Unsupported("quantifier over a non-integer")
            names.append(name)
            if self.peek() == ",":
                self.take()
        self.take("|")
        saved = dict(self.env)
        bound = [z3.Int(f"{name}!{self.pos}") for name in names]
        self.env.update(zip(names, bound, strict=True))
        body = self.expr()
        self.env = saved
        return z3.ForAll(bound, body) if kind == "forall" else z3.Exists(bound, body)


def _slice(value: Any, low: Any | None, high: Any | None) -> Any:
    if not z3.is_seq(value):
        raise Unsupported("slicing a non-sequence")
    start = low if low is not None else z3.IntVal(0)
    end = high if high is not None else z3.Length(value)
    return z3.SubSeq(value, start, end - start)


def _multiset(value: Any) -> Any:
    """Dafny's multiset(s), Verus's s.to_multiset(): an uninterpreted function of the sequence (equal sequences,
    equal multisets), enough to see that two clauses state the same permutation property."""
    if not z3.is_seq(value) or value.sort() != z3.SeqSort(z3.IntSort()):
        raise Unsupported("multiset of a non-integer sequence")
    return _MULTISET(value)


def _compare(op: str, left: Any, right: Any) -> Any:
    if op in ("in", "!in"):
        if not z3.is_seq(right):
            raise Unsupported("membership in a non-sequence")
        member = z3.Contains(right, z3.Unit(left))
        return member if op == "in" else z3.Not(member)
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }
    return ops[op](left, right)


def dafny_term(text: str, env: dict[str, Any]) -> Any:
    try:
        term = DafnyParser(text, env).parse()
    except (z3.Z3Exception, TypeError, AttributeError, RecursionError) as exc:
        raise Unsupported(str(exc)) from None
    if not z3.is_bool(term):
        raise Unsupported("not a boolean")
    return term


# --------------------------------------------------------------------------- Python (Nagini) expressions


def python_term(text: str, env: dict[str, Any]) -> Any:
    try:
        term = _py(ast.parse(text, mode="eval").body, env)
    except (z3.Z3Exception, SyntaxError, TypeError, AttributeError, RecursionError) as exc:
        raise Unsupported(str(exc)) from None
    if not z3.is_bool(term):
        raise Unsupported("not a boolean")
    return term


def _py(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return z3.BoolVal(node.value)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return z3.IntVal(node.value)
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BoolOp):
        values = [_py(v, env) for v in node.values]
        return z3.And(*values) if isinstance(node.op, ast.And) else z3.Or(*values)
    if isinstance(node, ast.UnaryOp):
        operand = _py(node.operand, env)
        if isinstance(node.op, ast.Not):
            return z3.Not(operand)
        if isinstance(node.op, ast.USub):
            return -operand
    if isinstance(node, ast.BinOp):
        left, right = _py(node.left, env), _py(node.right, env)
        binops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a / b,
            ast.Mod: lambda a, b: a % b,
        }
        if type(node.op) in binops:
            return binops[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        symbols = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
        parts, left = [], _py(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _py(comparator, env)
            if isinstance(op, ast.In | ast.NotIn):
                parts.append(_compare("in" if isinstance(op, ast.In) else "!in", left, right))
            elif type(op) in symbols:
                parts.append(_compare(symbols[type(op)], left, right))
            else:
                raise Unsupported(ast.unparse(node))
            left = right
        return parts[0] if len(parts) == 1 else z3.And(*parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name == "Result" and not args and "Result()" in env:
            return env["Result()"]
        if name == "Old" and len(args) == 1:
            return _py(args[0], {**env, **{k[4:]: v for k, v in env.items() if k.startswith("old!")}})
        if name + "(" in env and len(args) == env[name + "("].arity():
            return env[name + "("](*[_py(a, env) for a in args])
        if name == "len" and len(args) == 1:
            return z3.Length(_py(args[0], env))
        if name == "Implies" and len(args) == 2:
            return z3.Implies(_py(args[0], env), _py(args[1], env))
    if isinstance(node, ast.Subscript):
        value = _py(node.value, env)
        if z3.is_seq(value) and not isinstance(node.slice, ast.Slice):
            return value[_py(node.slice, env)]
        if z3.is_seq(value) and isinstance(node.slice, ast.Slice) and node.slice.step is None:
            low = _py(node.slice.lower, env) if node.slice.lower is not None else None
            high = _py(node.slice.upper, env) if node.slice.upper is not None else None
            return _slice(value, low, high)
    if isinstance(node, ast.IfExp):
        return z3.If(_py(node.test, env), _py(node.body, env), _py(node.orelse, env))
    raise Unsupported(ast.unparse(node))


# --------------------------------------------------------------------------- questions

Translate = Callable[[str, dict[str, Any]], Any]


def _valid(claim: Any, facts: Sequence[Any]) -> bool | None:
    solver = z3.Solver()
    solver.set("timeout", SOLVER_TIMEOUT_MS)
    solver.add(*facts)
    solver.add(z3.Not(claim))
    verdict = solver.check()
    if verdict == z3.unsat:
        return True
    if verdict == z3.sat:
        return False
    return None


def _conj(clauses: Sequence[str], env: dict[str, Any], translate: Translate) -> Any:
    terms = [translate(clause, env) for clause in clauses]
    return z3.And(*terms) if terms else z3.BoolVal(True)


def implies(
    names: dict[str, str], premises: Sequence[str], conclusions: Sequence[str], translate: Translate
) -> bool | None:
    """Whether the premises entail the conclusions for every value of the typed names; None when unexpressible."""
    env = Env(names)
    try:
        claim = z3.Implies(_conj(premises, env.vars, translate), _conj(conclusions, env.vars, translate))
    except Unsupported:
        return None
    return _valid(claim, env.facts)


def spec_kept(
    names: dict[str, str],
    task_pre: Sequence[str],
    task_post: Sequence[str],
    cand_pre: Sequence[str],
    cand_post: Sequence[str],
    translate: Translate,
) -> tuple[bool | None, str]:
    """The candidate's precondition is no stronger and its postcondition no weaker than the task's (under its pre)."""
    weaker_pre = implies(names, task_pre, cand_pre, translate)
    if weaker_pre is not True:
        return weaker_pre, "the precondition is stronger than the task's"
    stronger_post = implies(names, [*task_pre, *cand_post], task_post, translate)
    if stronger_post is not True:
        return stronger_post, "the postcondition is weaker than the task's"
    return True, ""


def satisfiable(names: dict[str, str], clauses: Sequence[str], translate: Translate) -> bool | None:
    env = Env(names)
    try:
        term = _conj(clauses, env.vars, translate)
    except Unsupported:
        return None
    solver = z3.Solver()
    solver.set("timeout", SOLVER_TIMEOUT_MS)
    solver.add(*env.facts, term)
    verdict = solver.check()
    return True if verdict == z3.sat else False if verdict == z3.unsat else None


def same_value(names: dict[str, str], premises: Sequence[str], left: str, right: str) -> bool | None:
    """Whether two Dafny expressions (a function's old and new body) agree wherever the premises hold."""
    env = Env(names)
    try:
        pre = _conj(premises, env.vars, dafny_term)
        a = DafnyParser(left.strip(), env.vars).parse()
        b = DafnyParser(right.strip(), env.vars).parse()
        if a.sort() != b.sort():
            return None
        claim = z3.Implies(pre, a == b)
    except (Unsupported, z3.Z3Exception, TypeError, AttributeError, RecursionError):
        return None
    return _valid(claim, env.facts)
