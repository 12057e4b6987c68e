"""The spec guard: a candidate that verifies by weakening or dodging its task's specification is `rejected`.

This is the machinery every guarded language shares. What differs per language is its `Dialect`, which lives beside
its verifier (`dafny_dialect.py`, `nagini_dialect.py`, `verus_dialect.py`) and reaches the guard through the
verifier's target descriptor, so nothing here names a language. Programs are read as the tool reads them: each
dialect's `strip`, `scan` and `contracts` follow the tool's own token rules or parser.

Rules, cheapest first:
1. forbidden escapes (the dialect's: Dafny `assume` and unknown attributes, Nagini `Assume` however it is reached,
   Verus `assume`, `admit`, `external_body`, ...), bodiless declarations the dialect counts as axioms, and trivial
   postconditions (`ensures true`);
2. the task's requires/ensures must be present unchanged (tokens compared, so white space and comments do
   not count); where they differ, Z3 decides whether the candidate's precondition is no stronger and its
   postcondition no weaker (a spec that differs only in form passes, a weakened one is rejected);
3. Z3 triviality: an unsatisfiable precondition, or a postcondition implied by the precondition alone;
4. after the tool verified the candidate, the tool's own reading where it can print one (Dafny's `/dprint`): the
   escapes and bodiless declarations of the program as the tool parsed it; then triviality probes (AlphaVerus):
   `assert false` at the start of each body (still verifies: the precondition is vacuous), each body replaced by
   an empty one (still verifies: any body satisfies the postcondition), and `assert false` at the end of bodies
   with loops (still verifies: the end is unreachable, e.g. a loop that never exits); and a declaration the spec
   leaves bodiless may stay so only where the spec alone does not verify (a signature with a contract asks for
   the body).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from veriloop.errors import ConfigError
from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.verifiers import closure, semantic
from veriloop.verifiers.base import FormalVerifier, ReadingVerifier, RegisteredVerifier, Verifier
from veriloop.verifiers.spec import (
    Contract,
    Language,
    blank_comments,
    normalise,
)

Check = Callable[[str], Awaitable[VerifyResult]]


def _any(contract: Contract) -> bool:
    return True


@dataclass(frozen=True)
class Dialect:
    """What the guard needs to know about one verifier's language; a verifier's descriptor carries it."""

    name: str
    escapes: tuple[tuple[str, str], ...]
    """(pattern, reason): constructs that make the tool assume instead of prove; a spec may use them."""
    contracts: Callable[[str], list[Contract]]
    """The language's spec clause reader: each callable's requires, ensures, parameters and body."""
    translate: semantic.Translate
    """Clause text to Z3, for comparing a changed spec with the task's."""
    probe_kinds: tuple[str, ...]
    """Declaration kinds whose bodies the probes rewrite."""
    decls: Callable[[str], list[closure.Decl]]
    """The declarations the specification closure is made of."""
    strip: Callable[[str], str] = blank_comments
    """The code without comments and literal contents, as the tool's lexer reads it, so escapes are looked for in
    code only (and a string cannot fake one)."""
    scan: Callable[[str], list[str]] | None = None
    """Escapes read from the tool's tokens where a pattern is not enough (attributes skipped, clause lists read):
    their reasons; one that the spec itself has is allowed, like a pattern's."""
    trust: Callable[[str], str | None] | None = None
    """Further ways around the tool that need more than a pattern (Nagini: imports, redefined contract names)."""
    uninterpreted: Callable[[Contract], bool] = _any
    """Which contracts are functions that Z3 treats as uninterpreted symbols in the spec comparison."""
    bodiless_ok: Callable[[Contract], bool] = _any
    """Whether a declaration may lack a body (one that trusts nothing); the rest are axioms."""
    layout: Literal["braces", "indent"] = "braces"
    """Bodies are `{ ... }` (offsets) or indented lines (line numbers): how the probes rewrite them."""
    assert_false: str = "assert(false);"
    """The statement the probes insert to ask whether a point is reachable."""
    warnings: tuple[tuple[str, str], ...] = ()
    """(pattern, reason): the tool's warnings that say it assumed something instead of proving it."""


TRIVIAL = {"true", "True", "( true )", "( True )"}


def _trivial_text(clause: str, language: Language = "dafny") -> bool:
    tokens = normalise(clause, language)
    if tokens in TRIVIAL:
        return True
    for op in (" == ", " <==> ", " >= ", " <= "):
        if op in tokens:
            left, _, right = tokens.partition(op)
            if left.strip() == right.strip() and left.strip():
                return True
    return False


def counterpart(contracts: list[Contract], contract: Contract) -> Contract | None:
    """The declaration of `contracts` that stands for `contract`: the one in the same class or module (the last, as
    Dafny would refuse two), else the only one of that name (a spec whose braces do not balance reads its scopes
    differently; its contract is still compared)."""
    same = [c for c in contracts if c.qualname == contract.qualname]
    if same:
        return same[-1]
    named = [c for c in contracts if c.name == contract.name]
    return named[0] if len(named) == 1 else None


def _names(contract: Contract, functions: dict[str, str] | None = None) -> dict[str, str]:
    names = {**(functions or {}), **contract.params, **contract.returns}
    if "__result__" in names:
        names[contract.name] = names.pop("__result__")
    return names


def _functions(dialect: Dialect, code: str | None) -> dict[str, str]:
    """The program's functions and predicates as `Name(` -> `T1;T2->R`, for Z3 to treat as uninterpreted."""
    if not code:
        return {}
    try:
        contracts = dialect.contracts(code)
    except SyntaxError:
        return {}
    found = {}
    for contract in contracts:
        if not dialect.uninterpreted(contract):
            continue
        result = "bool" if contract.kind == "predicate" else next(iter(contract.returns.values()), "")
        if result:
            found[contract.name + "("] = ";".join(contract.params.values()) + "->" + result
    return found


def escape_check(dialect: Dialect, code: str, spec: str | None) -> str | None:
    """The first escape in `code` (patterns, then token scans) that the spec does not itself use, or None."""
    stripped = dialect.strip(code)
    allowed = dialect.strip(spec) if spec else ""
    for pattern, escape in dialect.escapes:
        if re.search(pattern, stripped, flags=re.M) and not re.search(pattern, allowed, flags=re.M):
            return escape
    if dialect.scan is not None:
        spec_has = set(dialect.scan(spec)) if spec else set()
        for escape in dialect.scan(code):
            if escape not in spec_has:
                return escape
    return None


def bodiless_reason(dialect: Dialect, listed: list[Contract], spec_listed: list[Contract]) -> str | None:
    """A declaration without a body that is neither the spec's own bodiless one nor allowed to lack one."""
    for contract in listed:  # every declaration, also those that share a name (methods of two classes)
        wanted = counterpart(spec_listed, contract)
        bodiless_in_spec = wanted is not None and wanted.body is None and wanted.kind == contract.kind
        if contract.body is None and not bodiless_in_spec and not dialect.bodiless_ok(contract):
            return f"{contract.kind} {contract.name} has no body"
    return None


def static_check(dialect: Dialect, code: str, spec: str | None) -> str | None:
    """The reason to reject `code` without running the tool, or None."""
    escape = escape_check(dialect, code, spec)
    if escape:
        return escape
    trust = dialect.trust(code) if dialect.trust is not None else None
    if trust:
        return trust
    try:
        listed = dialect.contracts(code)
        spec_listed = dialect.contracts(spec) if spec else []
    except SyntaxError as exc:
        return None if not spec else _spec_unreadable(exc)
    for contract in listed:
        for clause in contract.ensures:
            if _trivial_text(clause, contract.language):
                return f"trivial postcondition in {contract.name}: ensures {clause.strip()}"
    bodiless = bodiless_reason(dialect, listed, spec_listed)
    if bodiless:
        return bodiless
    for wanted in {c.qualname: c for c in spec_listed}.values():
        if not (wanted.requires or wanted.ensures):
            continue
        got = counterpart(listed, wanted)
        if got is None:
            return f"{wanted.name} of the specification is missing"
        mismatch = _compare(dialect, wanted, got, _functions(dialect, spec))
        if mismatch:
            return mismatch
    if spec:
        try:
            changed = closure.check(dialect.decls(spec), dialect.decls(code), dialect.translate)
        except SyntaxError as exc:
            return _spec_unreadable(exc)
        if changed:
            return changed
    functions = _functions(dialect, code)
    for contract in listed:
        if contract.kind in ("function", "predicate"):
            continue
        names = _names(contract, functions)
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


def _compare(dialect: Dialect, wanted: Contract, got: Contract, functions: dict[str, str]) -> str | None:
    language = wanted.language
    have_pre = {normalise(c, language) for c in got.requires}
    have_post = {normalise(c, language) for c in got.ensures}
    want_pre = {normalise(c, language) for c in wanted.requires}
    missing_post = [c for c in wanted.ensures if normalise(c, language) not in have_post]
    missing_pre = [c for c in wanted.requires if normalise(c, language) not in have_pre]
    extra_pre = [c for c in got.requires if normalise(c, language) not in want_pre]
    if not (missing_post or extra_pre or missing_pre):
        return None
    kept, why = semantic.spec_kept(
        _names(wanted, functions), wanted.requires, wanted.ensures, got.requires, got.ensures, dialect.translate
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
    if dialect.layout == "indent":
        with_pre = [c for c in targets if c.requires]
        if with_pre:
            program = _edit_python(code, with_pre, lambda c, body, ind: [ind + dialect.assert_false, *body])
            found.append(("vacuous precondition", program, with_pre))
        loops = [c for c in targets if c.has_loop]
        if loops:
            program = _edit_python(code, loops, _before_return(dialect.assert_false))
            found.append(("unreachable end (a loop that never exits)", program, loops))
        return found
    false = dialect.assert_false
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


def _before_return(statement: str) -> Callable[[Contract, list[str], str], list[str]]:
    """An indented body with `statement` before its final return (or at its end)."""

    def edit(contract: Contract, body: list[str], indent: str) -> list[str]:
        last = len(body) - 1
        while last > 0 and not body[last].strip():
            last -= 1
        line = body[last]
        if line.strip().startswith("return"):
            here = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
            return [*body[:last], here + statement, *body[last:]]
        return [*body, indent + statement]

    return edit


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
        if dialect.layout == "indent":
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


async def bodiless_check(dialect: Dialect, code: str, spec: str | None, check: Check) -> str | None:
    """The reason to reject a candidate that leaves a declaration of the spec without a body when the spec alone
    verifies, else None.

    A bodiless declaration of the spec is the task's own (a DafnyBench program to complete keeps its axioms; such a
    spec does not verify as it stands). A spec that verifies as it stands is a signature with a contract: it asks
    for those bodies, and a candidate that leaves one out (the spec sent back unchanged) proves nothing about it.
    """
    if not spec:
        return None
    try:
        wanted = dialect.contracts(spec)
        left = []
        for contract in dialect.contracts(code):
            task = counterpart(wanted, contract)
            if contract.body is None and task is not None and task.body is None and not dialect.bodiless_ok(contract):
                left.append(contract)
    except SyntaxError:
        return None
    if not left or (await check(spec)).status is not VerifyStatus.VERIFIED:
        return None
    first = left[0]
    return f"{first.kind} {first.name} has no body (the specification verifies as it stands: it asks for one)"


# --------------------------------------------------------------------------- the tool's own reading


def reading_check(dialect: Dialect, printed: str, spec: str | None) -> str | None:
    """The reason to reject a verified candidate whose program, as the tool's own parser printed it back (comments
    gone, declarations and attributes as parsed), holds an escape or a bodiless declaration, or None.

    The static rules read the candidate with a lexer written to match the tool's; this reads what the tool itself
    parsed, so a program the lexer reads otherwise than the tool still cannot pass."""
    reason = escape_check(dialect, printed, spec)
    if reason is None:
        try:
            reason = bodiless_reason(dialect, dialect.contracts(printed), dialect.contracts(spec) if spec else [])
        except SyntaxError:
            return None
    return f"in the verifier's own reading of the program: {reason}" if reason else None


# --------------------------------------------------------------------------- the tool's own warnings


def trusted_warning(dialect: Dialect, result: VerifyResult) -> str | None:
    """The reason to reject a verified result whose tool warns that it assumed something (the dialect's list)."""
    for diagnostic in result.diagnostics:
        if diagnostic.severity != "warning":
            continue
        for pattern, reason in dialect.warnings:
            if re.search(pattern, diagnostic.message, flags=re.I):
                line = f" (line {diagnostic.line})" if diagnostic.line is not None else ""
                return reason + line
    return None


# --------------------------------------------------------------------------- the guarded verifier


class GuardedVerifier:
    """Wraps a formal verifier: static rules before the tool, triviality probes after a `verified`."""

    def __init__(self, inner: FormalVerifier, dialect: Dialect) -> None:
        self.inner = inner
        self.dialect = dialect
        self.name = inner.name

    async def version(self) -> str:
        return await self.inner.version()

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "guard": 2}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        spec = task.spec
        reason = static_check(self.dialect, candidate.code, spec)
        if reason:
            return VerifyResult(
                status=VerifyStatus.REJECTED, tool=self.name, version=await self.version(), score=-1.0, reason=reason
            )
        result = await self.inner.verify(candidate, task)
        if result.status is not VerifyStatus.VERIFIED:
            return result
        reason = trusted_warning(self.dialect, result)
        reason = reason or await self._reading(candidate.code, spec)
        if reason:
            return result.model_copy(update={"status": VerifyStatus.REJECTED, "reason": reason, "score": -1.0})
        reason = await probe_check(self.dialect, candidate.code, spec, self.inner.check)
        reason = reason or await bodiless_check(self.dialect, candidate.code, spec, self.inner.check)
        if reason:
            return result.model_copy(update={"status": VerifyStatus.REJECTED, "reason": reason, "score": -1.0})
        return result

    async def _reading(self, code: str, spec: str | None) -> str | None:
        """The escapes in the program as the tool parsed it, where the tool can print its reading (Dafny)."""
        if not isinstance(self.inner, ReadingVerifier):
            return None
        printed = await self.inner.parsed(code)
        return reading_check(self.dialect, printed, spec) if printed else None

    async def aclose(self) -> None:
        await self.inner.aclose()


def guarded(verifier: RegisteredVerifier) -> Verifier:
    """The verifier with the spec guard when its descriptor names a dialect (the `tests` verifier has none).

    A verifier with a dialect that lacks a member of `FormalVerifier` is refused rather than left unguarded."""
    dialect = verifier.target.dialect
    if dialect is None:
        return verifier
    if not isinstance(verifier, FormalVerifier):
        raise ConfigError(
            f"verifier {verifier.name!r} names a guard dialect, so it must follow FormalVerifier (verifiers/base.py): "
            "name, target, version, options, verify, check, aclose, from_settings and installed_version"
        )
    return GuardedVerifier(verifier, dialect)
