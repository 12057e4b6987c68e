"""Direct generation: one sample per task, tested once, stored as a one-node tree.

The demo's agent, and the single-turn baseline every method is compared with:

    messages   <- prompt(task)
    completion <- LLM(messages)
    code       <- the fenced block of the completion (with the task's prompt when it lacks the function)
    verdict    <- the task's verifier on code (its tests in the sandbox, unless the task names another judge)
    store Node(messages, completion, code, verdict) and Attempt(passed, tokens, seconds)
"""

from __future__ import annotations

import time

from veriloop.agents.base import Agent, AgentOptions
from veriloop.agents.common import check, finish_attempt, language_title, store_nodes
from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import CLOSING_FENCE, extract_code
from veriloop.records import Attempt, Message, Node, SamplingParams, Task

PROMPT = (
    "Complete the following Python function. Reply with the whole function, imports included, "
    "in one ```python code block.\n\n```python\n{prompt}```"
)

OTHER_PROMPT = "{prompt}\n\nReply with the whole {title} code, includes or imports too, in one ```{fence} code block."
"""Any other language: the task's prompt says what to write (a C++ harness task names the function to fill)."""

DEFAULT_PARAMS = SamplingParams(temperature=0.0, max_tokens=384, stop=[CLOSING_FENCE])
"""Greedy, long enough for HumanEval bodies, ended at the reply's closing fence."""


def prompt_messages(task: Task) -> list[Message]:
    if task.language == "python":
        return [Message(role="user", content=PROMPT.format(prompt=task.prompt))]
    title = language_title(task.language)
    text = OTHER_PROMPT.format(prompt=task.prompt.rstrip(), title=title, fence=task.language)
    return [Message(role="user", content=text)]


def program_from_reply(task: Task, reply: str) -> str:
    """The code to test: the reply's block, after the task's prompt when the reply only wrote a body."""
    code = extract_code(reply, task.language)
    if task.entry_point and f"def {task.entry_point}" not in code:
        return task.prompt + code
    return code


async def solve(task: Task, ctx: AgentContext, params: SamplingParams = DEFAULT_PARAMS) -> Attempt:
    """Generate one program for `task`, judge it with the task's verifier, store the node and the attempt."""
    started = time.perf_counter()
    messages = prompt_messages(task)
    [[completion]] = await ctx.backend.generate([messages], params.model_copy(update={"n": 1}))
    code = program_from_reply(task, completion.text)
    checked = await check(task, code, ctx)
    node = Node(
        run_id=ctx.run.id,
        task_id=task.id,
        role="generate",
        messages=messages,
        completion=completion,
        code=code,
        **checked.node_fields(),
        score=checked.score,
    )
    await store_nodes(ctx, [node])
    return await finish_attempt(
        ctx,
        task,
        passed=checked.passed,
        started=started,
        best_node_id=node.id,
        score=node.score,
        tokens=completion.usage.total_tokens,
    )


class DirectAgent(Agent[AgentOptions]):
    """One greedy sample per task: the baseline every method is compared with."""

    name = "direct"

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        return await solve(task, ctx)
