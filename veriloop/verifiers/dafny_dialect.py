"""Dafny's guard dialect: what the spec guard (`guard.py`) needs to know about Dafny, beside the Dafny verifier.

Escapes are read from Dafny's own tokens (`lexer.dafny`): `assume`, `expect`, `include`, `refines` as keywords,
every attribute not known to change no verdict (`{:axiom}`, `{:verify false}`, `{:inline 1}`, ...), a `*` among a
`decreases` clause's items and `witness *`; bodiless methods and lemmas are axioms; Dafny's warnings that it
assumed something reject a `verified`.
"""

from __future__ import annotations

from veriloop.verifiers import closure, lexer, semantic
from veriloop.verifiers.guard import Dialect
from veriloop.verifiers.spec import Contract, dafny_contracts


def _dafny_function(contract: Contract) -> bool:
    return contract.kind in ("function", "predicate")


def _dafny_bodiless_ok(contract: Contract) -> bool:
    """A Dafny function or predicate with no postcondition is an uninterpreted symbol: nothing can be proved
    about it. Methods, lemmas and anything with a postcondition are axioms without a body."""
    return contract.kind in ("function", "predicate") and not contract.ensures


def _dafny_code(code: str) -> str:
    """Dafny code as Dafny's scanner reads it, with comments and literal contents blanked."""
    return lexer.dafny(code).masked


SAFE_ATTRIBUTES = frozenset(
    {
        "induction",
        "trigger",
        "no_trigger",
        "autotriggers",
        "opaque",
        "fuel",
        "nowarn",
        "warnShadowing",
        "timeLimit",
        "timeLimitMultiplier",
        "vcs_split_on_every_assert",
        "vcs_max_cost",
        "vcs_max_splits",
        "vcs_max_keep_going_splits",
        "split_here",
        "isolate_assertions",
        "tailrecursion",
        "nativeType",
        "compile",
        "main",
        "test",
        "print",
        "abstemious",
        "error",
    }
)
"""Dafny attributes that change no verdict (checked on Dafny 2.3: with each, `ensures false` still fails). Any other
attribute is refused unless the spec uses it: Dafny hands attributes on to Boogie, where `{:inline 1}` and `{:ignore}`
skip a body, `{:rlimit 1}` ends in a prover error that reports `0 errors`, and `{:autocontracts}` adds preconditions
the text does not show."""
ATTRIBUTE_REASONS = {
    "axiom": "{:axiom} is not allowed",
    "verify": "{:verify false} is not allowed",
    "extern": "{:extern} is not allowed",
    "only": "{:only}/{:focus} (other code left unverified) is not allowed",
    "focus": "{:only}/{:focus} (other code left unverified) is not allowed",
    "selective_checking": "attributes that skip checks are not allowed",
    "start_checking_here": "attributes that skip checks are not allowed",
    "assumption": "attributes that skip checks are not allowed",
    "termination": "{:termination false} is not allowed",
    "inline": "{:inline} (Boogie then skips the body) is not allowed",
    "ignore": "{:ignore} (Boogie then skips the body) is not allowed",
    "rlimit": "{:rlimit} (a prover error that reports no errors) is not allowed",
    "autocontracts": "{:autocontracts} (preconditions the text does not show) is not allowed",
}
_DAFNY_KEYWORDS = {
    "assume": "assume statements are not allowed",
    "expect": "expect statements are assumed by the verifier and are not allowed",
    "include": "include directives are not allowed",
    "refines": "module refinement is not allowed",
}
_CLAUSE_END = frozenset(
    (
        *("requires", "ensures", "modifies", "reads", "decreases", "invariant", "yield", "returns", "yields"),
        *("witness", "method", "lemma", "function", "predicate", "constructor", "class", "trait", "module"),
        *("iterator", "datatype", "codatatype", "newtype", "type", "const", "var", "ghost", "static", "twostate"),
        *("inductive", "copredicate", "colemma"),
    )
)
_DISPLAY_AFTER = frozenset(("decreases", "in", "then", "else", "set", "iset", "multiset", "seq", "map", "imap"))


def _closing(tokens: list[lexer.Token], index: int) -> int:
    """The index of the `}` that closes the brace (or `{:`) at `tokens[index]`."""
    depth = 0
    for at in range(index, len(tokens)):
        if tokens[at].text in ("{", "{:"):
            depth += 1
        elif tokens[at].text == "}":
            depth -= 1
            if depth == 0:
                return at
    return len(tokens) - 1


def _is_attribute(tokens: list[lexer.Token], index: int) -> bool:
    """`{:` (or `{` `:` apart, which Dafny does not take for one but which costs nothing to refuse alike)."""
    if tokens[index].text == "{:":
        return True
    return tokens[index].text == "{" and index + 1 < len(tokens) and tokens[index + 1].text == ":"


def _attribute_reason(tokens: list[lexer.Token], index: int) -> str | None:
    """Why the attribute at `tokens[index]` is refused, or None for one in SAFE_ATTRIBUTES."""
    at = index + (1 if tokens[index].text == "{:" else 2)
    if at >= len(tokens) or tokens[at].kind != "word":
        return None  # not an attribute: a parse error
    name = tokens[at].text
    args = [t.text for t in tokens[at + 1 : _closing(tokens, index)]]
    if name in SAFE_ATTRIBUTES or (name == "verify" and args == ["true"]):
        return None
    return ATTRIBUTE_REASONS.get(name, f"{{:{name}}} is not allowed (not an attribute known to change no verdict)")


def _decreases_wildcard(tokens: list[lexer.Token], index: int) -> bool:
    """Whether the `decreases` clause at `tokens[index]` has a `*` among its items (`decreases *`, `decreases
    {:attr} *`, `decreases x, *`: any of them makes the callable or loop one that may not terminate)."""
    previous, depth, at = "decreases", 0, index + 1
    while at < len(tokens):
        token = tokens[at]
        if _is_attribute(tokens, at):
            at = _closing(tokens, at) + 1
            continue
        if depth == 0 and (token.text in (";", "}") or (token.kind == "word" and token.text in _CLAUSE_END)):
            return False
        if token.text == "*" and previous in ("decreases", ",", "("):
            return True
        if token.text in "([":
            depth += 1
        elif token.text in ")]":
            depth -= 1
            if depth < 0:
                return False
        elif token.text == "{":
            operand = token_operand(tokens[at - 1]) and tokens[at - 1].text not in _DISPLAY_AFTER
            if operand and depth == 0:
                return False  # the body
            at = _closing(tokens, at)
        previous = tokens[at].text
        at += 1
    return False


def token_operand(token: lexer.Token) -> bool:
    """Whether an expression can end with `token` (then a `{` after it opens a body, not a display)."""
    return token.kind != "punct" or token.text in (")", "]", "}")


def dafny_scan(code: str) -> list[str]:
    """Dafny's escapes, read from Dafny's own tokens: `assume`, `expect`, `include`, `refines` as keywords (not
    inside identifiers such as `x'assume`, nor in strings or comments), every attribute but the safe ones, wherever
    it stands (a declaration, a clause, a statement, an expression), a `*` among a `decreases` clause's items, and
    `witness *` (a type that may be empty)."""
    tokens = list(lexer.dafny(code).tokens)
    found: list[str] = []
    for index, token in enumerate(tokens):
        reason = None
        if token.kind == "word":
            reason = _DAFNY_KEYWORDS.get(token.text)
            if token.text == "decreases" and _decreases_wildcard(tokens, index):
                reason = "decreases * (possible non-termination) is not allowed"
            elif token.text == "witness" and index + 1 < len(tokens) and tokens[index + 1].text == "*":
                reason = "witness * (a type that may be empty) is not allowed"
        elif _is_attribute(tokens, index):
            reason = _attribute_reason(tokens, index)
        if reason and reason not in found:
            found.append(reason)
    return found


DAFNY = Dialect(
    "dafny",
    escapes=(),
    contracts=dafny_contracts,
    translate=semantic.dafny_term,
    probe_kinds=("method", "lemma"),
    decls=closure.dafny_decls,
    strip=_dafny_code,
    scan=dafny_scan,
    uninterpreted=_dafny_function,
    bodiless_ok=_dafny_bodiless_ok,
    assert_false="assert false;",
    warnings=(
        (r"loop has no body", "a loop without a body is assumed by Dafny, not proved"),
        (r"forall statement has no body", "a forall statement without a body is assumed by Dafny, not proved"),
        (r"has no body", "a statement without a body is assumed by Dafny, not proved"),
        (r"\bassume\b|\baxiom\b", "Dafny reports an assumption"),
    ),
)
