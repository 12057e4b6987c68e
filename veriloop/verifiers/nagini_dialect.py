"""Nagini's guard dialect: what the spec guard (`guard.py`) needs to know about Python with `nagini_contracts`,
beside the Nagini verifier.

Python is read by Python's parser: names as Python resolves them (NFKC), string constants emptied, so `Assume`,
`Inhale`, `@ContractOnly`, `@Native` and the information-flow escapes are found however they are reached; imports
other than the contracts, a contract name redefined or renamed, and recursion without `Decreases` are refused.
"""

from __future__ import annotations

import ast

from veriloop.verifiers import closure, semantic
from veriloop.verifiers.guard import Dialect
from veriloop.verifiers.spec import Contract, nagini_contracts


def _nagini_pure(contract: Contract) -> bool:
    return bool({"Pure", "Predicate"} & set(contract.attributes))


def _strip_python(code: str) -> str:
    """Python source as its parser reads it, without comments and with every string constant emptied (docstrings
    included), so escapes are looked for in code only, and every name appears as Python resolves it (NFKC)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            node.value = type(node.value)()
    return ast.unparse(tree)


CONTRACT_NAMES = {
    "Requires",
    "Ensures",
    "Exsures",
    "Invariant",
    "Assert",
    "Assume",
    "Old",
    "Result",
    "Implies",
    "Forall",
    "Exists",
    "Acc",
    "Rd",
    "Fold",
    "Unfold",
    "Unfolding",
    "Pure",
    "Predicate",
    "Ghost",
    "ContractOnly",
    "Decreases",
    "Previous",
    "RaisedException",
    "Sequence",
    "ToSeq",
    "Low",
    "Inhale",
    "Exhale",
    "Reveal",
    "Opaque",
    "PSeq",
    "PSet",
    "PMultiset",
    "list_pred",
    "set_pred",
    "dict_pred",
    "Forall2",
    "Forall3",
    "Forall6",
    "Let",
    "MayCreate",
    "Native",
    "Import",
}
ALLOWED_MODULES = ("nagini_contracts", "typing", "__future__")


def _nagini_trust(code: str) -> str | None:
    """Python ways around Nagini's checks: a contract name redefined or imported under another name, other
    modules imported (their code and stubs are trusted), recursion without a termination measure."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # Nagini parses with the same grammar and reports it as a syntax error, never a proof
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                if not module.startswith(ALLOWED_MODULES):
                    return f"importing {module} is not allowed (its code would be trusted, not verified)"
            for alias in node.names:
                if alias.asname and alias.asname != alias.name:
                    return f"importing {alias.name} as {alias.asname} is not allowed"
        defined: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.append(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            defined.append(node.id)
        elif isinstance(node, ast.arg):
            defined.append(node.arg)
        for name in defined:
            if name in CONTRACT_NAMES:
                return f"redefining Nagini's {name} is not allowed"
    return _nagini_recursion(tree)


def _nagini_recursion(tree: ast.Module) -> str | None:
    """Nagini proves partial correctness: a method that calls itself forever satisfies any postcondition, so
    recursion among non-pure functions needs `Decreases`."""
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    calls: dict[str, set[str]] = {}
    for name, node in functions.items():
        decorators = {ast.unparse(d) for d in node.decorator_list}
        measured = any(
            isinstance(s, ast.Expr)
            and isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Name)
            and s.value.func.id == "Decreases"
            for s in node.body
        )
        if decorators & {"Pure", "Predicate"} or measured:
            continue
        called = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                target = sub.func
                called.add(target.id if isinstance(target, ast.Name) else getattr(target, "attr", ""))
        calls[name] = called & set(functions)
    for start in calls:
        seen, todo = set(), list(calls[start])
        while todo:
            name = todo.pop()
            if name == start:
                return f"{start} is recursive without Decreases (Nagini would prove it only partially correct)"
            if name in seen or name not in calls:
                continue
            seen.add(name)
            todo.extend(calls[name])
    return None


NAGINI = Dialect(
    "nagini",
    escapes=(
        (r"\bAssume\b", "Assume is not allowed"),
        (r"\bInhale\b", "Inhale (an assumption) is not allowed"),
        (r"@\s*ContractOnly\b", "@ContractOnly (a contract trusted without a body) is not allowed"),
        (r"\bContractOnly\b", "ContractOnly is not allowed"),
        (r"\bNative\b", "@Native (trusted code) is not allowed"),
        (r"\bDeclassify\b", "Declassify is not allowed"),
        (r"\b(AllLow|PreservesLow)\b", "information-flow trust annotations are not allowed"),
    ),
    contracts=nagini_contracts,
    translate=semantic.python_term,
    probe_kinds=("def",),
    decls=closure.nagini_decls,
    strip=_strip_python,
    trust=_nagini_trust,
    uninterpreted=_nagini_pure,
    layout="indent",
    assert_false="Assert(False)",
)
