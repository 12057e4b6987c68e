"""μCode's prompts: the first turn (problem + public tests), feedback turns, and the code in a reply.

Two ways to show the model its history (option `history`):

* `full`: the paper's conversation, each reply followed by a user turn `Feedback: <public feedback>`;
* `latest`: one user turn holding the problem, the latest code only and its feedback. The embedded
  135M model repeated its previous answer in 87% of full-history repair turns (measured here on HumanEval),
  and the whole conversation makes prefill grow each turn.

The verifier always sees the first user turn alone (the problem), never the history.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from veriloop.agents.common import Check, language_title
from veriloop.llm.codeblocks import extract_code
from veriloop.records import ExecStatus, Message, Task, VerifyStatus

INSTRUCTION = "Write a Python function implementation for the following prompt:"
OTHER_INSTRUCTION = "Write a {title} implementation for the following prompt:"
TESTS_INTRO = "Your code should satisfy these tests:"
ENDING = "Return only the implementation code, no tests or explanations, in one ```{fence} code block."
LATEST_TURN = (
    "{first}\n\nYour previous attempt:\n\n```{fence}\n{code}\n```\n\nFeedback: {feedback}\n\n"
    "Fix the code. Return the whole corrected function in one ```{fence} code block."
)
PASSED = "Code passed all tests"
TIMED_OUT = "Code execution timed out"
FEEDBACK_CHARS = 800


@dataclass(frozen=True)
class Exchange:
    """One played turn as the next prompt shows it: the reply and the public feedback it got."""

    reply: str
    code: str
    feedback: str


def shown_tests(task: Task) -> str:
    """The public tests as the model reads them: HumanEval's `check(candidate)` asserts name the function."""
    if task.language != "python":  # another language's test program holds the reference answer (f_gold)
        return (task.public_tests or "").strip()
    tests = task.public_tests if task.public_tests is not None else task.tests
    if "def check(candidate)" not in tests or not task.entry_point:
        return tests.strip()
    tree = ast.parse(tests)
    asserts = [
        ast.get_source_segment(tests, node) or ""
        for check in tree.body
        if isinstance(check, ast.FunctionDef) and check.name == "check"
        for node in ast.walk(check)
        if isinstance(node, ast.Assert)
    ]
    return "\n".join(text.replace("candidate", task.entry_point) for text in asserts if text)


def first_turn(task: Task) -> Message:
    """The problem and its public tests (tests already in the prompt, as MBPP's are, are not repeated)."""
    prompt, fence = task.prompt.strip("\n"), task.language
    python = fence == "python"
    shown = f"```python\n{prompt}\n```" if python and _is_code(prompt) else prompt
    tests = shown_tests(task)
    instruction = INSTRUCTION if python else OTHER_INSTRUCTION.format(title=language_title(fence))
    parts = [f"{instruction}\n\n{shown}"]
    if tests and tests not in prompt:
        parts.append(f"{TESTS_INTRO}\n\n```{fence}\n{tests}\n```")
    parts.append(ENDING.format(fence=fence))
    return Message(role="user", content="\n\n".join(parts))


def turn_messages(task: Task, played: Sequence[Exchange], history: str = "full") -> list[Message]:
    """The conversation the next turn is sampled from, after the turns in `played`."""
    first = first_turn(task)
    if not played:
        return [first]
    if history == "latest":
        last = played[-1]
        text = LATEST_TURN.format(first=first.content, code=last.code, feedback=last.feedback, fence=task.language)
        return [Message(role="user", content=text)]
    messages = [first]
    for exchange in played:
        messages.append(Message(role="assistant", content=exchange.reply))
        messages.append(Message(role="user", content=f"Feedback: {exchange.feedback}"))
    return messages


def feedback(checked: Check, entry_point: str | None = None) -> str:
    """What the public check said, as the paper shows it: the pass marker, a timeout, or the errors (the failed
    tests' messages, or a formal verifier's diagnostics).

    HumanEval's asserts call `candidate(...)`; the feedback names the function as the prompt does.
    """
    result, verdict = checked.execution, checked.verdict
    if checked.passed:
        return PASSED
    if verdict.status is VerifyStatus.TIMEOUT or (result is not None and result.status is ExecStatus.TIMEOUT):
        return TIMED_OUT
    if result is not None:
        failed = [outcome.message for outcome in result.tests if not outcome.passed]
        text = "\n".join(failed) if failed else (result.stderr or result.stdout or result.status.value)
    else:
        lines = [d.message if d.line is None else f"line {d.line}: {d.message}" for d in verdict.diagnostics]
        text = "\n".join(lines) or verdict.reason or verdict.status.value
    text = text.strip()
    if entry_point:
        text = text.replace("candidate(", f"{entry_point}(")
    if len(text) > FEEDBACK_CHARS:
        text = text[: FEEDBACK_CHARS // 4] + "\n...\n" + text[-(FEEDBACK_CHARS * 3 // 4) :]
    return text


def program(task: Task, reply: str) -> str:
    """The code to run: the reply's first block in the task's language, after the task's prompt when the reply
    wrote a body only."""
    code = extract_code(reply, task.language)
    if task.entry_point and f"def {task.entry_point}" not in code and _is_code(task.prompt):
        return task.prompt + code
    return code


def as_reply(code: str) -> str:
    """A reply holding `code` the way the verifier and SFT targets see it (one closed python block)."""
    return f"```python\n{code.strip(chr(10))}\n```"


def _is_code(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True
