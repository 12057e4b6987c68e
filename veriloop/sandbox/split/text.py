"""Reading C-like test programs for the split (`split`): calls of a function, the parts around the reference
`f_gold` and its `TOFILL` slot, and a function's return type, skipping comments and literals."""

from __future__ import annotations

import re
from collections.abc import Callable

from veriloop.errors import ConfigError

SLOT = "TOFILL"


def calls(text: str, name: str) -> list[tuple[int, int, str]]:
    """(start, end, arguments) of each call `name(...)` in C-like source, skipping comments and literals."""
    found: list[tuple[int, int, str]] = []
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if text.startswith("//", index):
            index = text.find("\n", index)
            index = size if index < 0 else index
            continue
        if text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = size if close < 0 else close + 2
            continue
        if char in "\"'":
            index = skip_literal(text, index)
            continue
        if (char.isalpha() or char == "_") and (
            index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")
        ):
            end = index
            while end < size and (text[end].isalnum() or text[end] == "_"):
                end += 1
            if text[index:end] == name:
                opening = end
                while opening < size and text[opening] in " \t\r\n":
                    opening += 1
                if opening < size and text[opening] == "(":
                    closing = matching(text, opening)
                    found.append((index, closing + 1, text[opening + 1 : closing]))
                    index = closing + 1
                    continue
            index = end
            continue
        index += 1
    return found


def skip_literal(text: str, index: int) -> int:
    quote, index = text[index], index + 1
    while index < len(text) and text[index] != quote:
        index += 2 if text[index] == "\\" else 1
    return index + 1


def matching(text: str, opening: int) -> int:
    depth, index = 0, opening
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = skip_literal(text, index)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise ConfigError("the test program has an unbalanced call")


def replace(text: str, name: str, make: Callable[[str], str]) -> str:
    """`text` with each call `name(...)` replaced by `make(arguments)`."""
    out, last = [], 0
    for start, end, args in calls(text, name):
        out += [text[last:start], make(args)]
        last = end
    return "".join(out) + text[last:]


def parts(harness: str) -> tuple[str, str, str]:
    """(before the gold function, the gold function up to the slot line, after the slot line)."""
    lines = harness.splitlines()
    slot = next((i for i, line in enumerate(lines) if SLOT in line), None)
    start = next((i for i, line in enumerate(lines) if re.search(r"\bf_gold\b", line)), None)
    if slot is None or start is None or start > slot:
        raise ConfigError("the trusted judge needs a test program with a reference `f_gold` before its TOFILL slot")
    return "\n".join(lines[:start]), "\n".join(lines[start:slot]), "\n".join(lines[slot + 1 :])


def return_type(gold: str, modifiers: set[str]) -> str:
    """The words before `f_gold(` in its head, less `modifiers` (C, C++, Java)."""
    head = gold.split("{", 1)[0]
    match = re.search(r"^(.*?)\bf_gold\s*\(", head, re.DOTALL)
    if match is None:
        raise ConfigError("cannot read the return type of `f_gold`")
    words = [word for word in match.group(1).split() if word not in modifiers]
    return " ".join(words).strip() or "int"
