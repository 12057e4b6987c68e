"""Getting code out of a chat model's reply: the fenced block, or the whole reply when there is none."""

from __future__ import annotations

import re

CLOSING_FENCE = "\n```\n"
"""Stop string that ends a reply at its first closing fence; an opening fence carries a language tag."""

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)


def extract_code(text: str, language: str | None = None) -> str:
    """The first fenced block tagged `language` (else the first fenced block, else the text itself).

    A reply cut off by a stop string or the length limit has no closing fence; its open block
    still counts, so a truncated answer is tested as written rather than discarded.
    """
    blocks: list[tuple[str, str]] = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    if not blocks:
        return text.strip("\n")
    if language:
        for tag, body in blocks:
            if tag == language.lower():
                return body.strip("\n")
    return blocks[0][1].strip("\n")
