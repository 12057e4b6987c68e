"""Direct generation: one sample per task, tested once, stored as a one-node tree.

The demo's agent, and the single-turn baseline every method is compared with:

    messages   <- prompt(task)
    completion <- LLM(messages)
    code       <- the fenced block of the completion (with the task's prompt when it lacks the function)
    result     <- tests(code) in the sandbox
    store Node(messages, completion, code, result) and Attempt(passed, tokens, seconds)
"""

from __future__ import annotations

import time

from veriloop.agents.base import Agent, AgentOptions
from veriloop.agents.common import run_tests, share_passed
from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import CLOSING_FENCE, extract_code
from veriloop.records import Attempt, Message, Node, SamplingParams, Task

PROMPT = (
    "Complete the following Python function. Reply with the whole function, imports included, "
    "in one ```python code block.\n\n```python\n{prompt}```"
)

DEFAULT_PARAMS = SamplingParams(temperature=0.0, max_tokens=384, stop=[CLOSING_FENCE])
"""Greedy, long enough for HumanEval bodies, ended at the reply's closing fence."""


def prompt_messages(task: Task) -> list[Message]:
    return [Message(role="user", content=PROMPT.format(prompt=task.prompt))]


def program_from_reply(task: Task, reply: str) -> str:
    """The code to test: the reply's block, after the task's prompt when the reply only wrote a body."""
    code = extract_code(reply, task.language)
    if task.entry_point and f"def {task.entry_point}" not in code:
        return task.prompt + code
    return code


async def solve(task: Task, ctx: AgentContext, params: SamplingParams = DEFAULT_PARAMS) -> Attempt:
    """Generate one program for `task`, test it, store the node and the attempt."""
    started = time.perf_counter()
    messages = prompt_messages(task)
    [[completion]] = await ctx.backend.generate([messages], params.model_copy(update={"n": 1}))
    code = program_from_reply(task, completion.text)
    result = await run_tests(task, code, ctx)
    node = ctx.store.add_node(
        Node(
            run_id=ctx.run.id,
            task_id=task.id,
            role="generate",
            messages=messages,
            completion=completion,
            code=code,
            exec_result=result,
            score=share_passed(result),
        )
    )
    return ctx.store.add_attempt(
        Attempt(
            run_id=ctx.run.id,
            task_id=task.id,
            status="passed" if result.passed else "failed",
            best_node_id=node.id,
            score=node.score,
            tokens=completion.usage.total_tokens,
            seconds=time.perf_counter() - started,
        )
    )


class DirectAgent(Agent[AgentOptions]):
    """One greedy sample per task: the baseline every method is compared with."""

    name = "direct"

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        return await solve(task, ctx)
