"""Getting code out of a chat model's reply: the fenced block, or the whole reply when there is none."""

from __future__ import annotations

import re

from veriloop.records import Constraint

CLOSING_FENCE = "\n```\n"
"""Stop string that ends a reply at its first closing fence; an opening fence carries a language tag."""

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of `text` as (lower-cased language tag, body); a last block cut off before its
    closing fence counts."""
    return [(tag.lower(), body) for tag, body in _FENCE.findall(text)]


def extract_code(text: str, language: str | None = None) -> str:
    """The first fenced block tagged `language` (else the first fenced block, else the text itself).

    A reply cut off by a stop string or the length limit has no closing fence; its open block
    still counts, so a truncated answer is tested as written rather than discarded.
    """
    blocks = fenced_blocks(text)
    if not blocks:
        return text.strip("\n")
    if language:
        for tag, body in blocks:
            if tag == language.lower():
                return body.strip("\n")
    return blocks[0][1].strip("\n")


_NO_FENCE = "(?:[^`]|`[^`]|``[^`])*"
"""Any text without three backticks in a row: the block's body cannot close the fence early or open another."""


def _literal(text: str) -> str:
    """`text` as a regex matching itself, with every non-word character in a class (portable across engines)."""
    return "".join(
        char if char.isalnum() or char == "_" else ("\\" + char if char in "\\]^" else f"[{char}]") for char in text
    )


def fenced_block(language: str, required: str | None = None) -> Constraint:
    """A reply that is exactly one fenced block tagged `language`, containing `required` if given (for example
    `def add(`): what a method's prompt asks for, so a small model's answer always reaches the tests or the
    compiler as code rather than as prose, and a length cut still leaves an open block `extract_code` reads."""
    return Constraint(kind="regex", value=f"```{_literal(language)}\\n{_block_rest(required)}")


def block_rest(required: str | None = None) -> Constraint:
    """The rest of a block whose opening fence is already written (in the prompt): its body, containing
    `required` if given, and the closing fence."""
    return Constraint(kind="regex", value=_block_rest(required))


def _block_rest(required: str | None) -> str:
    body = _NO_FENCE if required is None else f"{_NO_FENCE}{_literal(required)}{_NO_FENCE}"
    return f"{body}`{{0,2}}\\n```"
