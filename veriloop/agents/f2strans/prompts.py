"""What the model reads: the translation request, the repair request with test feedback, and the reply format.

The translation prompt is also the prompt of every training row (functional SFT and style DPO), so
what the trained model learns is exactly what the agent asks.
"""

from __future__ import annotations

from veriloop.llm.codeblocks import CLOSING_FENCE, extract_code
from veriloop.records import ExecResult, ExecStatus, Message

DISPLAY = {"cpp": "C++", "java": "Java", "python": "Python", "c": "C", "go": "Go", "rust": "Rust"}
FENCE = {"cpp": "cpp", "java": "java", "python": "python", "c": "c", "go": "go", "rust": "rust"}

TRANSLATE = (
    "Translate the following {source} function to idiomatic {target}. Keep the function name `{name}` and its "
    "parameters. Reply with only the {target} function in one ```{fence} code block.\n\n```{source_fence}\n{code}\n```"
)

REPAIR = (
    "Your {target} translation did not pass the tests: {summary}\n{details}\n"
    "Fix it. Reply with the whole corrected {target} function in one ```{fence} code block."
)

FEEDBACK_CHARS = 800


def display(language: str) -> str:
    return DISPLAY.get(language, language)


def kept_name(source_name: str) -> str:
    """The function name the translation is asked to keep (`f_gold` when the source's is unknown)."""
    return source_name or "f_gold"


def translate_messages(source_language: str, target_language: str, source: str, name: str) -> list[Message]:
    """The first-turn request: translate `source` into the target language, keeping its name."""
    text = TRANSLATE.format(
        source=display(source_language),
        target=display(target_language),
        name=kept_name(name),
        fence=FENCE.get(target_language, target_language),
        source_fence=FENCE.get(source_language, source_language),
        code=source.strip("\n"),
    )
    return [Message(role="user", content=text)]


def summary(result: ExecResult) -> str:
    """One line saying how the candidate did."""
    passed = sum(test.passed for test in result.tests)
    if result.status is ExecStatus.COMPILE_ERROR:
        return "it does not compile."
    if result.status is ExecStatus.TIMEOUT:
        return "it ran out of time."
    if result.status is ExecStatus.RUNTIME_ERROR:
        return "it crashed."
    if result.tests:
        return f"{passed} of {len(result.tests)} test cases gave the expected result."
    return f"the tests ended with status {result.status.value}."


def repair_message(target_language: str, result: ExecResult) -> Message:
    """The feedback turn: status, passed share and the tail of the compiler or runtime output."""
    output = (result.stderr or "").strip()
    details = f"Output:\n```\n{output[-FEEDBACK_CHARS:]}\n```" if output else ""
    text = REPAIR.format(
        target=display(target_language),
        summary=summary(result),
        details=details,
        fence=FENCE.get(target_language, target_language),
    )
    return Message(role="user", content=text)


def fenced(code: str, language: str) -> str:
    """A translation written as the model is asked to reply: one fenced block (the training target)."""
    return f"```{FENCE.get(language, language)}\n{code.strip(chr(10))}\n```"


def reply_code(reply: str, language: str) -> str:
    """The code of a reply: its block tagged with the language, else its first block, else the text."""
    return extract_code(reply, FENCE.get(language, language))


STOP = [CLOSING_FENCE]
