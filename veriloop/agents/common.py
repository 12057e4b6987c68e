"""What every method folder shares: seeds that repeat across processes, a program's tests in the sandbox
and their score, the decoding constraint for a code answer, concurrent work that never outlives its caller,
and running a graph so that an interrupted thread resumes from its checkpoint.

    graph = build_graph(checkpointer)                        # the same shape in every `agents/<method>/graph.py`
    final = await run_graph(graph, initial, deps, thread=thread_id(run.id, task.id))
"""

from __future__ import annotations

import asyncio
import inspect
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import fenced_block
from veriloop.records import Constraint, ExecResult, Task
from veriloop.sandbox import default_limits
from veriloop.sandbox.languages import prompt_helpers, python_tests_job

T = TypeVar("T")


async def gather_as_finished(
    aws: Iterable[Awaitable[T]], on_each: Callable[[T], Awaitable[None] | None] | None = None
) -> list[T]:
    """Every awaitable's result in finishing order, each handed to `on_each` as it comes. Leaving early (one
    fails, or the caller is cancelled: a lost lease, a stopping worker) cancels and reaps the rest, so no orphan
    keeps writing to the store after its run moved to another worker and no exception goes unretrieved."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    done: list[T] = []
    try:
        for finished in asyncio.as_completed(tasks):
            result = await finished
            done.append(result)
            if on_each is not None and inspect.isawaitable(outcome := on_each(result)):
                await outcome
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done


def stable_seed(*parts: object) -> int:
    """A seed from the parts' text, the same in every process (Python's hash() is salted)."""
    return zlib.crc32(":".join(str(part) for part in parts).encode())


def answer_constraint(task: Task, fence: str, enabled: bool, name: str | None = None) -> Constraint | None:
    """What a method asks the model for, as a decoding constraint: one block fenced `fence`, holding
    `def <name>(` when the fence is python and a name is known (`name`, else the task's entry point), or
    None when the method's option is off. A reply cut at the token limit is still an open block."""
    if not enabled:
        return None
    entry = name or task.entry_point
    signature = f"def {entry}(" if entry and fence == "python" else None
    return fenced_block(fence, signature)


def share_passed(result: ExecResult) -> float:
    """Share of tests passed; 1.0 or 0.0 when the runner reports no per-test outcomes."""
    if result.tests:
        return sum(outcome.passed for outcome in result.tests) / len(result.tests)
    return 1.0 if result.passed else 0.0


async def run_tests(task: Task, code: str, ctx: AgentContext, tests: str | None = None) -> ExecResult:
    """Run `tests` (default: all of the task's tests) against `code` in the context's sandbox."""
    job = python_tests_job(
        ctx.sandbox.toolchain,
        code,
        task.tests if tests is None else tests,
        entry_point=task.entry_point,
        limits=default_limits(ctx.settings),
        helpers=prompt_helpers(task.prompt, task.entry_point),
    )
    return await ctx.sandbox.run(job)


async def run_graph(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    initial: Mapping[str, Any],
    deps: object,
    *,
    thread: str | None = None,
    recursion_limit: int | None = None,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    """Run `graph` to its end with `deps` as its context and return the final state.

    With a checkpointer, the thread's checkpoint decides: an unfinished thread resumes where it stopped
    (its stored steps are not repeated), a finished one returns its final state without running again,
    and only a thread with no checkpoint starts from `initial`. `max_concurrency` bounds the branches of a
    fan-out (`Send`) that run at once.
    """
    config: RunnableConfig = {}
    if thread is not None:
        config["configurable"] = {"thread_id": thread}
    if recursion_limit is not None:
        config["recursion_limit"] = recursion_limit
    if max_concurrency is not None:
        config["max_concurrency"] = max_concurrency
    if isinstance(graph.checkpointer, BaseCheckpointSaver):
        saved = await graph.aget_state(config)
        if saved.next:
            return dict(await graph.ainvoke(None, config, context=deps))
        if saved.values:
            return dict(saved.values)
    return dict(await graph.ainvoke(initial, config, context=deps))
