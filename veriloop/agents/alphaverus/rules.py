"""AlphaVerus's syntactic rule filters (`cmu-l3/alphaverus`, inference/rebase.py) that the spec guard lacks.

They run before the verifier (a rejected program costs no tool run) and score -1 with the original's message:
comments outnumbering code ("mislead the critique module"), no `ensures` left when the task has one, more
empty blocks than the task itself has (empty loop bodies), and, for Verus, `&mut` of anything but a `Vec`.
The guard handles the rest of the list (`assume`, `ensures true`, external bodies, triviality probes).
"""

from __future__ import annotations

import re

from veriloop.verifiers.spec import blank_comments

ENSURES = {"dafny": r"\bensures\b", "verus": r"\bensures\b", "nagini": r"\bEnsures\s*\("}


def _comment_lines(code: str, target: str) -> tuple[int, int]:
    """(non-empty lines, non-empty lines that hold code once comments are removed)."""
    lines = [line for line in code.splitlines() if line.strip()]
    if target == "nagini":
        stripped = [re.sub(r"#.*$", "", line) for line in lines]
    else:
        stripped = blank_comments(code).splitlines()
        stripped = [row for row, line in zip(stripped, code.splitlines(), strict=False) if line.strip()]
    return len(lines), sum(1 for line in stripped if line.strip())


def _code_only(code: str, target: str) -> str:
    return (
        "\n".join(re.sub(r"#.*$", "", line) for line in code.splitlines())
        if target == "nagini"
        else (blank_comments(code))
    )


def rule_violation(code: str, target: str, reference: str | None = None, language: str = "dafny") -> str | None:
    """The first rule `code` breaks (the original's message), or None; `reference` is the task's own program."""
    total, with_code = _comment_lines(code, target)
    if total and with_code * 2 < total:
        return "Uncomment the code that you have written"
    plain = _code_only(code, target)
    own = _code_only(reference, language) if reference else ""
    wanted, given = ENSURES.get(target), ENSURES.get(language)
    if wanted and given and re.search(given, own) and not re.search(wanted, plain):
        return "No ensures clause found"
    if target != "nagini":
        allowed = 2 + (re.sub(r"\s", "", own).count("{}") if language != "nagini" else 0)
        if re.sub(r"\s", "", plain).count("{}") >= allowed:
            return "Infinite loops are not allowed."
    if target == "verus" and re.search(r"&mut(?!\s*Vec\b)", plain):
        return "Mutables for non-vec type are not allowed"
    return None
