"""AlphaVerus's prompts (Aggarwal et al., arXiv 2412.06176), per target verifier, with exemplars from the pools.

The wording follows the original (translation turn, fix prompt with the verifier's errors, exploit
critique, equivalence judge); the Verus-specific phrases are swapped for the target's names, fences and
fragments, read from the target verifier's descriptor (`verifiers/target.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from veriloop.errors import ConfigError
from veriloop.records import Message
from veriloop.verifiers import VERIFIERS
from veriloop.verifiers.target import verifier_target


class _Titles(Mapping[str, str]):
    """Verifier name -> how prompts name its language, read from the registered descriptors."""

    def __getitem__(self, name: str) -> str:
        target = verifier_target(name)
        return target.title or name

    def __iter__(self) -> Iterator[str]:
        return iter(VERIFIERS)

    def __len__(self) -> int:
        return len(VERIFIERS)


LANGUAGE: Mapping[str, str] = _Titles()


def fence(target: str) -> str:
    """The code block tag of a target's language ("" for a name no verifier has)."""
    try:
        return verifier_target(target).fence
    except ConfigError:
        return ""


def fenced(code: str, target: str) -> str:
    return f"```{fence(target)}\n{code.strip()}\n```"


def translate_turn(source: str, source_language: str, target: str) -> str:
    """The user turn asking for a translation (the original's wording, target names substituted)."""
    return (
        f"Consider the following {source_language} code:\n{fenced(source, source_language)}\n"
        f"Convert this to {LANGUAGE[target]} code. Do not change invariants or specifications "
        f"(requires and ensures clauses).{_shape(target)} Reply with the complete program in one code block."
    )


def _shape(target: str) -> str:
    shape = verifier_target(target).shape
    return f" {shape}" if shape else ""


def hints_turn(program: str, target: str = "dafny") -> str:
    """Fill in the hints of a hints-removed program (DafnyBench, nagini-hints): the whole-program variant."""
    return (
        f"Consider the following {LANGUAGE[target]} program, whose loop invariants, assertions and other proof hints "
        f"were removed:\n{fenced(program, target)}\n"
        f"Add the invariants, assertions and decreases clauses it needs so that {target.capitalize()} verifies it. "
        "Do not change the code, the requires clauses or the ensures clauses. Reply with the complete program in "
        "one code block."
    )


def source_turn(source: str, source_language: str, target: str, mode: str) -> str:
    return hints_turn(source, target) if mode == "hints" else translate_turn(source, source_language, target)


def explore_messages(
    source: str, source_language: str, target: str, mode: str, solved: Sequence[dict[str, Any]]
) -> list[Message]:
    """Few-shot translation: each solved pair as a user turn and an assistant turn, then the query."""
    messages = [Message(role="system", content=f"You are an expert in {LANGUAGE[target]} and formal verification.")]
    for pair in solved:
        messages.append(Message(role="user", content=source_turn(pair["source"], source_language, target, mode)))
        messages.append(Message(role="assistant", content=fenced(pair["target"], target)))
    messages.append(Message(role="user", content=source_turn(source, source_language, target, mode)))
    return messages


def render_errors(errors: Sequence[dict[str, Any]], target: str) -> str:
    """Error triplets as the original's system prompt: incorrect code, error message, corrected code."""
    parts = []
    for index, item in enumerate(errors, 1):
        parts.append(
            f"# {LANGUAGE[target]} Error Fixing Example {index}:\n## Incorrect Code\n{fenced(item['bad'], target)}\n"
            f"## Error Message\n```\n{item['error']}\n```\n## Corrected Code\n{fenced(item['good'], target)}"
        )
    return "\n\n".join(parts)


def fix_turn(program: str, errors: str, target: str) -> str:
    """The training fix prompt: fix every error, never touch the specification."""
    return (
        f"Given a {LANGUAGE[target]} program with function signature, preconditions, postconditions, and code, "
        "fix the errors present in the code. Do not modify function signatures, requires, ensures or specs.\n"
        f"{fenced(program, target)}\nThe verifier reported:\n```\n{errors}\n```\n"
        f"Reply with the complete fixed program in one code block."
    )


def followup_turn(errors: str) -> str:
    """The turn appended to a node's history when it is refined (the original's wording)."""
    return (
        f"I got the following errors:\n```\n{errors}\n```\nPlease fix all the errors. You are not allowed to "
        "modify preconditions and postconditions. Reply with the complete program in one code block."
    )


def fix_messages(program: str, errors: str, target: str, exemplars: Sequence[dict[str, Any]]) -> list[Message]:
    messages = []
    if exemplars:
        messages.append(Message(role="system", content=render_errors(exemplars, target)))
    messages.append(Message(role="user", content=fix_turn(program, errors, target)))
    return messages


# --------------------------------------------------------------------------- exploit model

EXPLOIT_SYSTEM = (
    "You are a {language} critique agent. Given a specification (signatures, requires and ensures), propose a "
    "trivial solution that passes all verification conditions without doing the intended work."
)
EXPLOIT_EXAMPLE = "\n\n### Input Problem\n{prefix}\n### Trivial Solution\n{body}"
EXPLOIT_USER = (
    "Write a trivial program that passes the verification of this specification, e.g. returning the default "
    "value, an empty list, False, None, or a value chosen by a simple condition. Only output the additional code "
    "you write (the body), in one code block.\n{prefix}"
)


def exploit_messages(prefix: str, target: str, critics: Sequence[dict[str, Any]]) -> list[Message]:
    descriptor = verifier_target(target)
    system = EXPLOIT_SYSTEM.format(language=LANGUAGE[target])
    examples = [descriptor.exploit_example] if descriptor.exploit_example else []
    for shown, body in [*examples, *((item["prefix"], item["exploit"]) for item in critics)]:
        system += EXPLOIT_EXAMPLE.format(prefix=fenced(shown, target), body=fenced(body, target))
    return [
        Message(role="system", content=system),
        Message(role="user", content=EXPLOIT_USER.format(prefix=fenced(prefix, target))),
    ]


# --------------------------------------------------------------------------- equivalence judge

JUDGE = (
    "Program 1:\n{target_code}\n\nProgram 2:\n{source_code}\n\n"
    "Will the two methods return computationally same results? Ignore proof statements (invariants, asserts, "
    "lemmas). Minor differences such as overflows and corner cases can be ignored. If Program 1 is more general "
    "than Program 2, answer <Yes>. Trivial preconditions such as setting the maximum length of an array to a very "
    "small number such as less than 3 are not permitted, and the answer should be <No>.\n"
    "Structure your answer as: [What Program 1 Does] [What Program 2 Does] [Step by Step Thoughts] "
    "[Is Program 1 more general?] and end with 'The final answer is <Yes>' or 'The final answer is <No>'."
)
_ANSWERS = (
    re.compile(r"the final answer is\s*<\s*(yes|no)\s*>", re.IGNORECASE),
    re.compile(r"the final answer is\s*\**\s*(yes|no)\b", re.IGNORECASE),
    re.compile(r"the final answer is\s*[\"'](yes|no)[\"']", re.IGNORECASE),
    re.compile(r"the final answer is\s*<\s*(yes|no)\b", re.IGNORECASE),
    re.compile(r"\*\*\s*(yes|no)\s*\*\*", re.IGNORECASE),
)


def strip_comments(code: str, target: str) -> str:
    """The program without comments and blank lines (what the equivalence judge reads)."""
    return "\n".join(line for line in verifier_target(target).comments(code).splitlines() if line.strip())


def judge_messages(target_code: str, source_code: str, target: str, source_language: str) -> list[Message]:
    content = JUDGE.format(
        target_code=fenced(strip_comments(target_code, target), target),
        source_code=fenced(source_code, source_language),
    )
    return [Message(role="user", content=content)]


def judge_answer(text: str) -> str | None:
    """'yes', 'no', or None: the last match of the first pattern that matches (the original's fallbacks)."""
    for pattern in _ANSWERS:
        found = pattern.findall(text)
        if found:
            return str(found[-1]).lower()
    return None
