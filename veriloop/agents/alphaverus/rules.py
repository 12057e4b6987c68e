"""AlphaVerus's syntactic rule filters (`cmu-l3/alphaverus`, inference/rebase.py) that the spec guard lacks.

They run before the verifier (a rejected program costs no tool run) and score -1 with the original's message:
comments outnumbering code ("mislead the critique module"), no `ensures` left when the task has one, more
empty blocks than the task itself has (empty loop bodies), and the target's own rules from its descriptor
(Verus: `&mut` of anything but a `Vec`). The guard handles the rest of the list (`assume`, `ensures true`,
external bodies, triviality probes).
"""

from __future__ import annotations

import re

from veriloop.verifiers.target import VerifierTarget, verifier_target


def _comment_lines(code: str, target: VerifierTarget) -> tuple[int, int]:
    """(non-empty lines, non-empty lines that hold code once comments are removed)."""
    stripped = target.comments(code).splitlines()
    kept = [row for row, line in zip(stripped, code.splitlines(), strict=False) if line.strip()]
    return sum(1 for line in code.splitlines() if line.strip()), sum(1 for line in kept if line.strip())


def rule_violation(code: str, target: str, reference: str | None = None, language: str = "dafny") -> str | None:
    """The first rule `code` breaks (the original's message), or None; `reference` is the task's own program,
    written for the verifier `language`."""
    wanted = verifier_target(target)
    total, with_code = _comment_lines(code, wanted)
    if total and with_code * 2 < total:
        return "Uncomment the code that you have written"
    plain = wanted.comments(code)
    given = verifier_target(language) if reference else None
    own = given.comments(reference) if given is not None and reference else ""
    demanded = given is not None and given.ensures is not None and re.search(given.ensures, own) is not None
    if demanded and wanted.ensures and not re.search(wanted.ensures, plain):
        return "No ensures clause found"
    if wanted.layout == "braces":
        allowed = 2 + (re.sub(r"\s", "", own).count("{}") if given is not None and given.layout == "braces" else 0)
        if re.sub(r"\s", "", plain).count("{}") >= allowed:
            return "Infinite loops are not allowed."
    for pattern, message in wanted.rules:
        if re.search(pattern, plain):
            return message
    return None
