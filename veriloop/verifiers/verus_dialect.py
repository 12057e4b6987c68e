"""Verus's guard dialect: what the spec guard (`guard.py`) needs to know about Verus (Rust), beside the Verus verifier.

Code is read as rustc's lexer reads it (`lexer.rust`: nested comments, raw strings, character literals blanked), so
`assume`, `admit`, `#[verifier::external_body]` and the other ways to trust instead of prove are found in code only.
"""

from __future__ import annotations

from veriloop.verifiers import closure, lexer, semantic
from veriloop.verifiers.guard import Dialect
from veriloop.verifiers.spec import verus_contracts


def _rust_code(code: str) -> str:
    """Rust code as rustc's lexer reads it, with comments and literal contents blanked."""
    return lexer.rust(code).masked


_VERIFIER = r"\bverifier\s*(?:::|\()\s*"
VERUS = Dialect(
    "verus",
    escapes=(
        (r"\bassume_?\s*\(", "assume statements are not allowed"),
        (r"\badmit\s*\(", "admit is not allowed"),
        (r"\bassume_specification\b", "assume_specification is not allowed"),
        (r"\bassume_external\b", "assume_external is not allowed"),
        (_VERIFIER + r"external", "external code (not verified) is not allowed"),
        (_VERIFIER + r"exec_allows_no_decreases_clause", "non-terminating loops are not allowed"),
        (
            _VERIFIER + r"(verify\s*\(\s*false|assume\w*|trusted|exec_allows_no_decreases_clause)",
            "#[verifier::...] attributes that turn verification off are not allowed",
        ),
        (r"\bverus\s*::\s*(trusted|internal)\b", "#[verus::trusted] and #[verus::internal(...)] are not allowed"),
        (r"#\s*!?\s*\[\s*cfg(_attr)?\s*\(", "#[cfg(...)] (code hidden from the verifier) is not allowed"),
        (r"\bunsafe\b", "unsafe code is not allowed"),
        (r"\bextern\s*(\"|\{|fn\b)", "extern functions (trusted, not verified) are not allowed"),
        (r"\bexternal_fn_specification\b", "external_fn_specification is not allowed"),
        (r"\bexternal_type_specification\b", "external_type_specification is not allowed"),
        (r"\bbroadcast\s+axiom\b|\baxiom\s+fn\b", "axioms are not allowed"),
        (r"\binclude!\s*\(|\binclude_str!\s*\(|#\s*\[\s*path\s*=|\bmod\s+\w+\s*;", "other files are not allowed"),
    ),
    contracts=verus_contracts,
    translate=semantic.dafny_term,
    probe_kinds=("fn",),
    decls=closure.verus_decls,
    strip=_rust_code,
    warnings=((r"unreachable statement", "an unreachable statement (AlphaVerus's rule: the code never returns)"),),
)
