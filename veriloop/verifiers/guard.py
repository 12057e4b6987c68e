"""The spec guard: a candidate that verifies by weakening or dodging its task's specification is `rejected`.

Rules, cheapest first:
1. forbidden escapes (Dafny `assume`, `{:axiom}`, `{:verify false}`, bodiless methods, `decreases *`; Nagini
   `Assume`; Verus `assume`, `admit`, `external_body`/`external`) and trivial postconditions (`ensures true`);
2. the task's requires/ensures must be present unchanged (tokens compared, so white space and comments do
   not count); where they differ, Z3 decides whether the candidate's precondition is no stronger and its
   postcondition no weaker (a spec that differs only in form passes, a weakened one is rejected);
3. Z3 triviality: an unsatisfiable precondition, or a postcondition implied by the precondition alone;
4. after the tool verified the candidate, triviality probes (AlphaVerus): `assert false` at the start of each
   body (still verifies: the precondition is vacuous), each body replaced by an empty one (still verifies: any
   body satisfies the postcondition), and `assert false` at the end of bodies with loops (still verifies: the
   end is unreachable, e.g. a loop that never exits).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.verifiers import semantic
from veriloop.verifiers.base import Verifier
from veriloop.verifiers.spec import (
    Contract,
    blank_comments,
    dafny_contracts,
    nagini_contracts,
    normalise,
    verus_contracts,
)

Check = Callable[[str], Awaitable[VerifyResult]]


@dataclass(frozen=True)
class Dialect:
    """What the guard needs to know about one verifier's language."""

    name: str
    escapes: tuple[tuple[str, str], ...]
    contracts: Callable[[str], list[Contract]]
    translate: semantic.Translate
    probe_kinds: tuple[str, ...]
    """Declaration kinds whose bodies the probes rewrite."""

    def strip(self, code: str) -> str:
        return _strip_python(code) if self.name == "nagini" else blank_comments(code)


def _strip_python(code: str) -> str:
    """Python source without comments and docstrings, so escapes are looked for in code only."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    return ast.unparse(tree)


DAFNY = Dialect(
    "dafny",
    escapes=(
        (r"\bassume\b", "assume statements are not allowed"),
        (r"\{\s*:\s*axiom\b", "{:axiom} is not allowed"),
        (r"\{\s*:\s*verify\s+false\s*\}", "{:verify false} is not allowed"),
        (r"\{\s*:\s*extern\b", "{:extern} is not allowed"),
        (r"\bdecreases\s*\*", "decreases * (possible non-termination) is not allowed"),
    ),
    contracts=dafny_contracts,
    translate=semantic.dafny_term,
    probe_kinds=("method", "lemma"),
)
NAGINI = Dialect(
    "nagini",
    escapes=((r"\bAssume\s*\(", "Assume is not allowed"),),
    contracts=nagini_contracts,
    translate=semantic.python_term,
    probe_kinds=("def",),
)
VERUS = Dialect(
    "verus",
    escapes=(
        (r"\bassume\s*\(", "assume statements are not allowed"),
        (r"\badmit\s*\(", "admit is not allowed"),
        (r"#\s*\[\s*verifier\s*(::|\()\s*external(_body)?\b", "external verifiers are not allowed"),
        (r"#\s*\[\s*verifier\s*::\s*exec_allows_no_decreases_clause", "non-terminating loops are not allowed"),
    ),
    contracts=verus_contracts,
    translate=semantic.dafny_term,
    probe_kinds=("fn",),
)
DIALECTS = {"dafny": DAFNY, "nagini": NAGINI, "verus": VERUS}
TRIVIAL = {"true", "True", "( true )", "( True )"}


def _trivial_text(clause: str) -> bool:
    tokens = normalise(clause)
    if tokens in TRIVIAL:
        return True
    for op in (" == ", " <==> ", " >= ", " <= "):
        if op in tokens:
            left, _, right = tokens.partition(op)
            if left.strip() == right.strip() and left.strip():
                return True
    return False


def _names(contract: Contract) -> dict[str, str]:
    names = {**contract.params, **contract.returns}
    if "__result__" in names:
        names[contract.name] = names.pop("__result__")
    return names


def static_check(dialect: Dialect, code: str, spec: str | None) -> str | None:
    """The reason to reject `code` without running the tool, or None."""
    stripped = dialect.strip(code)
    for pattern, reason in dialect.escapes:
        if re.search(pattern, stripped):
            return reason
    try:
        contracts = {c.name: c for c in dialect.contracts(code)}
        spec_contracts = {c.name: c for c in dialect.contracts(spec)} if spec else {}
    except SyntaxError as exc:
        return None if not spec else _spec_unreadable(exc)
    for contract in contracts.values():
        for clause in contract.ensures:
            if _trivial_text(clause):
                return f"trivial postcondition in {contract.name}: ensures {clause.strip()}"
        bodiless_in_spec = contract.name in spec_contracts and spec_contracts[contract.name].body is None
        if contract.body is None and contract.kind in ("method", "lemma", "fn") and not bodiless_in_spec:
            return f"{contract.kind} {contract.name} has no body"
    for name, wanted in spec_contracts.items():
        if not (wanted.requires or wanted.ensures):
            continue
        got = contracts.get(name)
        if got is None:
            return f"{name} of the specification is missing"
        mismatch = _compare(dialect, wanted, got)
        if mismatch:
            return mismatch
    for contract in contracts.values():
        if contract.kind in ("function", "predicate"):
            continue
        names = _names(contract)
        if contract.requires and semantic.satisfiable(names, contract.requires, dialect.translate) is False:
            return f"the precondition of {contract.name} is unsatisfiable"
        outputs = set(contract.returns) - {"__result__"}
        if contract.ensures and outputs:
            mentioned = any(re.search(rf"(?<![\w.]){re.escape(o)}", " ".join(contract.ensures)) for o in outputs)
            trivial = semantic.implies(names, contract.requires, contract.ensures, dialect.translate)
            if mentioned and trivial is True:
                return f"the postcondition of {contract.name} holds for any result"
    return None


def _spec_unreadable(exc: SyntaxError) -> str:
    return f"the candidate does not parse, so its specification cannot be checked: {exc.msg}"


def _compare(dialect: Dialect, wanted: Contract, got: Contract) -> str | None:
    have_pre = {normalise(c) for c in got.requires}
    have_post = {normalise(c) for c in got.ensures}
    want_pre = {normalise(c) for c in wanted.requires}
    missing_post = [c for c in wanted.ensures if normalise(c) not in have_post]
    missing_pre = [c for c in wanted.requires if normalise(c) not in have_pre]
    extra_pre = [c for c in got.requires if normalise(c) not in want_pre]
    if not (missing_post or extra_pre or missing_pre):
        return None
    kept, why = semantic.spec_kept(
        _names(wanted), wanted.requires, wanted.ensures, got.requires, got.ensures, dialect.translate
    )
    if kept is True:
        return None
    if kept is False:
        return f"{wanted.name}: {why}"
    if missing_post:
        return f"{wanted.name}: the specification's `ensures {missing_post[0].strip()}` is missing or changed"
    if extra_pre:
        return f"{wanted.name}: added precondition `requires {extra_pre[0].strip()}`"
    return None  # a precondition dropped: weaker, which is allowed


# --------------------------------------------------------------------------- probes


def _targets(dialect: Dialect, code: str, spec: str | None) -> list[Contract]:
    contracts = [c for c in dialect.contracts(code) if c.kind in dialect.probe_kinds and c.body is not None]
    wanted = {c.name for c in dialect.contracts(spec)} if spec else set()
    if wanted:
        contracts = [c for c in contracts if c.name in wanted]
    return [c for c in contracts if c.name != "main" and (c.requires or c.ensures)]


def _edit_braces(code: str, contracts: list[Contract], make: Callable[[Contract, str], str]) -> str:
    """Replace each contract's `{ ... }` body (Dafny/Verus) by `make(contract, old_body)`; later bodies first."""
    out = code
    for contract in sorted(contracts, key=lambda c: c.body[0] if c.body else 0, reverse=True):
        assert contract.body is not None
        start, end = contract.body
        out = out[:start] + make(contract, out[start : end + 1]) + out[end + 1 :]
    return out


def _edit_python(code: str, contracts: list[Contract], make: Callable[[Contract, list[str], str], list[str]]) -> str:
    lines = code.splitlines()
    for contract in sorted(contracts, key=lambda c: c.body[0] if c.body else 0, reverse=True):
        assert contract.body is not None
        first, last = contract.body
        indent = re.match(r"\s*", lines[first - 1]).group(0)  # type: ignore[union-attr]
        lines[first - 1 : last] = make(contract, lines[first - 1 : last], indent)
    return "\n".join(lines) + "\n"


def probes(dialect: Dialect, code: str, spec: str | None) -> list[tuple[str, str, list[Contract]]]:
    """(what it shows, probe program, contracts it rewrites) for each triviality probe that applies."""
    try:
        targets = _targets(dialect, code, spec)
    except SyntaxError:
        return []
    found: list[tuple[str, str, list[Contract]]] = []
    if dialect.name == "nagini":
        with_pre = [c for c in targets if c.requires]
        if with_pre:
            program = _edit_python(code, with_pre, lambda c, body, ind: [f"{ind}Assert(False)", *body])
            found.append(("vacuous precondition", program, with_pre))
        loops = [c for c in targets if c.has_loop]
        if loops:
            program = _edit_python(code, loops, _assert_false_before_return)
            found.append(("unreachable end (a loop that never exits)", program, loops))
        return found
    false = "assert false;" if dialect.name == "dafny" else "assert(false);"
    with_pre = [c for c in targets if c.requires]
    if with_pre:
        program = _edit_braces(code, with_pre, lambda c, body: "{ " + false + body[1:])
        found.append(("vacuous precondition", program, with_pre))
    with_post = [c for c in targets if c.ensures and c.returns]  # a lemma proved by `{}` is fine
    if with_post:
        found.append(("trivial postcondition", _edit_braces(code, with_post, lambda c, body: "{ }"), with_post))
    loops = [c for c in targets if c.has_loop]
    if loops:
        program = _edit_braces(code, loops, lambda c, body: body[:-1] + false + " }")
        found.append(("unreachable end (a loop that never exits)", program, loops))
    return found


def _assert_false_before_return(contract: Contract, body: list[str], indent: str) -> list[str]:
    last = len(body) - 1
    while last > 0 and not body[last].strip():
        last -= 1
    line = body[last]
    if line.strip().startswith("return"):
        here = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
        return [*body[:last], f"{here}Assert(False)", *body[last:]]
    return [*body, f"{indent}Assert(False)"]


def _survivors(result: VerifyResult, contracts: list[Contract], code: str, dialect: Dialect) -> list[str]:
    """Contracts with no error inside their body or header in the probe's result."""
    if result.status is VerifyStatus.VERIFIED:
        return [c.name for c in contracts]
    if result.status is not VerifyStatus.FAILED:
        return []
    lines = [d.line for d in result.diagnostics if d.severity == "error" and d.line is not None]
    if not lines and result.errors:
        return []
    survivors = []
    for contract in dialect.contracts(code):
        if contract.name not in {c.name for c in contracts} or contract.body is None:
            continue
        if dialect.name == "nagini":
            span = contract.header
        else:
            span = (code.count("\n", 0, contract.header[0]) + 1, code.count("\n", 0, contract.body[1]) + 1)
        if not any(span[0] <= line <= span[1] for line in lines):
            survivors.append(contract.name)
    return survivors


async def probe_check(dialect: Dialect, code: str, spec: str | None, check: Check) -> str | None:
    """Run the probes; the reason to reject when one still verifies, else None."""
    for what, program, contracts in probes(dialect, code, spec):
        result = await check(program)
        survivors = _survivors(result, contracts, program, dialect)
        if survivors:
            return f"triviality probe: {what} in {', '.join(sorted(survivors))}"
    return None


# --------------------------------------------------------------------------- the guarded verifier


class GuardedVerifier:
    """Wraps a formal verifier: static rules before the tool, triviality probes after a `verified`."""

    def __init__(self, inner: Any, dialect: Dialect) -> None:
        self.inner = inner
        self.dialect = dialect
        self.name = inner.name

    async def version(self) -> str:
        version: str = await self.inner.version()
        return version

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = self.inner.options()
        return {**options, "guard": 1}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        spec = task.spec
        reason = static_check(self.dialect, candidate.code, spec)
        if reason:
            return VerifyResult(
                status=VerifyStatus.REJECTED, tool=self.name, version=await self.version(), score=-1.0, reason=reason
            )
        result: VerifyResult = await self.inner.verify(candidate, task)
        if result.status is not VerifyStatus.VERIFIED:
            return result
        reason = await probe_check(self.dialect, candidate.code, spec, self.inner.check)
        if reason:
            return result.model_copy(update={"status": VerifyStatus.REJECTED, "reason": reason, "score": -1.0})
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


def guarded(verifier: Verifier) -> Verifier:
    """The verifier with the spec guard when its language has one (the `tests` verifier has none)."""
    dialect = DIALECTS.get(verifier.name)
    if dialect is None:
        return verifier
    wrapped: Verifier = GuardedVerifier(verifier, dialect)
    return wrapped
