"""ReVISE's text: the task prompt, the decision tokens, and how a reply with decisions is laid out.

One assistant turn holds the whole self-verifying trajectory:

    <attempt 1 with its closed code block> [refine] <attempt 2 ...> [eos]

The model answers, then emits a decision token right after the closing fence: `[eos]` ("this is
right, stop") or `[refine]` ("this is wrong, try again"), and after `[refine]` it writes the next
attempt in the same turn, conditioned on everything before it.
"""

from __future__ import annotations

import ast
import re

from veriloop.agents.direct import program_from_reply, prompt_messages
from veriloop.records import Message, Task
from veriloop.training.special_tokens import EOS_SOURCE

EOS_TOKEN = "[eos]"
"""The "stop: I believe this is correct" decision."""
REFINE_TOKEN = "[refine]"
"""The "this is wrong: write a corrected attempt" decision."""

DECISION_TOKENS: dict[str, tuple[str, ...]] = {
    EOS_TOKEN: (EOS_SOURCE,),
    REFINE_TOKEN: (" wrong", " incorrect", " fix", " refine"),
}
"""The tokens added to the vocabulary, each with the words its embedding starts from: `[eos]` begins as
the model's own end-of-turn token, so the untrained model's confidence is its urge to stop there."""

SEGMENT_FENCE = "\n```"
"""How an attempt's code block closes in the transcript: the fence and nothing after it, so the decision token
(a special token, which nothing merges across) follows the fence directly. With a newline after it, Qwen's BPE
reads "```\n" as "``" + "`\n", which the model never writes (it writes "```"); training on such transcripts taught
Qwen2.5-Coder-0.5B to close its blocks with "``" (60 of 80 first attempts after the curriculum)."""

__all__ = [
    "DECISION_TOKENS",
    "EOS_TOKEN",
    "REFINE_TOKEN",
    "SEGMENT_FENCE",
    "attempt_segment",
    "gold_segment",
    "normalize_code",
    "program_from_reply",
    "prompt_messages",
    "task_messages",
]


def task_messages(task: Task) -> list[Message]:
    """The conversation that opens every trajectory (the same prompt as the direct baseline)."""
    return prompt_messages(task)


def attempt_segment(text: str) -> str:
    """An attempt as it stands in the transcript: the reply with its code block closed (`SEGMENT_FENCE`).

    Generation stops at the closing fence (not included), so the fence is put back; a reply that ended
    with its block already closed (or with no block) only loses its trailing newlines.
    """
    body = text.rstrip("\n")
    if body.count("```") % 2 == 1:
        return body + SEGMENT_FENCE
    return body


def gold_segment(code: str) -> str:
    """A reference solution written as an attempt would be (stage 2's correction target)."""
    return "```python\n" + code.strip("\n") + SEGMENT_FENCE


_SPACE = re.compile(r"\s+")


def normalize_code(code: str) -> str:
    """A key under which programs that differ only in docstrings, comments and layout are equal (for voting)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return _SPACE.sub(" ", code).strip()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)
