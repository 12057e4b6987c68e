"""What every method folder shares: seeds that repeat across processes, one way to judge a program (its task's
verifier), one way to store a step and a task's outcome, the decoding constraint for a code answer, concurrent work
that never outlives its caller, and running a graph so that an interrupted thread resumes from its checkpoint.

    graph = build_graph(checkpointer)                        # the same shape in every `agents/<method>/graph.py`
    final = await run_graph(graph, initial, deps, thread=thread_id(run.id, task.id))
    checked = await check(task, code, ctx)                   # asserts, stdin/stdout, a C++ harness, Dafny
    await store_nodes(ctx, [Node(..., **checked.node_fields(), score=checked.score)])
    return await finish_attempt(ctx, task, passed=checked.passed, ...)
"""

from __future__ import annotations

import asyncio
import inspect
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import fenced_block
from veriloop.records import Attempt, Candidate, Constraint, ExecResult, Node, Task, VerifyResult, VerifyStatus
from veriloop.sandbox import Sandbox, Toolchain, default_limits
from veriloop.sandbox.job import Job
from veriloop.verifiers import Verifier, get_verifier
from veriloop.verifiers.tests import TestsVerifier

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


TITLES = {"cpp": "C++", "c": "C", "java": "Java", "go": "Go", "rust": "Rust", "javascript": "JavaScript"}


def language_title(language: str) -> str:
    """A language's name as a prompt writes it (`cpp` is C++)."""
    return TITLES.get(language, language.capitalize())


# --------------------------------------------------------------------------- judging a program


TESTS = "tests"


def verifier_name(task: Task) -> str:
    """Who judges `task`: the task file's `verifier` (`tasks/schema.py` keeps it in the metadata), else its tests."""
    named = task.metadata.get("verifier")
    return named if isinstance(named, str) and named else TESTS


def make_verifier(name: str, ctx: AgentContext, *, guard: bool | None = None) -> Verifier:
    """The named verifier over the run's store cache; `tests` runs in the run's own sandbox."""
    if name == TESTS:
        from veriloop.verifiers import CachedVerifier

        tests: Verifier = TestsVerifier(_Borrowed(ctx.sandbox), default_limits(ctx.settings))
        return CachedVerifier(tests, ctx.store) if ctx.settings.verifiers.cache else tests
    return get_verifier(ctx.settings, name, store=ctx.store, guard=guard)


@dataclass(frozen=True)
class Check:
    """A program's verdict from its task's verifier. `execution` is the sandbox run behind a `tests` verdict: its
    per-test outcomes and output are what feedback prompts quote and what the stored node keeps."""

    verdict: VerifyResult
    execution: ExecResult | None = None

    @property
    def passed(self) -> bool:
        return self.verdict.status is VerifyStatus.VERIFIED

    @property
    def score(self) -> float:
        """Share of tests passed for tests, else the verifier's own score kept in [0, 1] (its -1 means unusable)."""
        if self.execution is not None:
            return share_passed(self.execution) if not self.passed else 1.0
        return 1.0 if self.passed else max(self.verdict.score, 0.0)

    def node_fields(self) -> dict[str, Any]:
        """What a stored node records of the check: a tests verdict as its execution (the verdict is a function of
        it, `result_from_exec`, and readers tell tested nodes from verified ones by which record they hold), any
        other verdict as the verifier's result."""
        if self.execution is not None:
            return {"exec_result": self.execution}
        return {"verify_result": self.verdict}


async def check(task: Task, code: str, ctx: AgentContext, tests: str | None = None) -> Check:
    """Judge `code` with the task's verifier: its tests (Python asserts, stdin/stdout cases, a C++/Java/... harness)
    in the run's sandbox, or a formal verifier (Dafny, Nagini, Verus) behind the guard and the store's cache.
    `tests` replaces the task's tests for this check (the public tests a method may show its model)."""
    judged = task if tests is None else task.model_copy(update={"tests": tests})
    candidate = Candidate(task_id=task.id, code=code, language=task.language)
    name = verifier_name(task)
    if name != TESTS:
        verifier = ctx.verifiers.get(name)
        if verifier is None:
            verifier = ctx.verifiers.setdefault(name, make_verifier(name, ctx))
        return Check(await verifier.verify(candidate, judged))
    witness = _Borrowed(ctx.sandbox)
    verdict = await TestsVerifier(witness, default_limits(ctx.settings)).verify(candidate, judged)
    return Check(verdict, witness.result)


class _Borrowed:
    """The run's sandbox lent to a tests verifier: closing the verifier leaves it open (the run owns it), and the
    last execution is kept, since the verdict alone drops the per-test output a feedback prompt shows."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self.name = sandbox.name
        self.result: ExecResult | None = None

    @property
    def toolchain(self) -> Toolchain:
        return self._sandbox.toolchain

    @property
    def version(self) -> str:
        return str(getattr(self._sandbox, "version", ""))

    async def prepare(self) -> None:
        prepare = getattr(self._sandbox, "prepare", None)
        if prepare is not None:
            await prepare()

    async def run(self, job: Job) -> ExecResult:
        self.result = await self._sandbox.run(job)
        return self.result

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------- storing steps and outcomes


async def store_nodes(ctx: AgentContext, nodes: Sequence[Node]) -> list[Node]:
    """Store a method's steps from a worker thread, so a synchronous write never stalls the loop feeding the
    batcher."""
    await asyncio.to_thread(ctx.store.add_nodes, nodes)
    return list(nodes)


async def finish_attempt(
    ctx: AgentContext,
    task: Task,
    *,
    passed: bool,
    started: float | None = None,
    best_node_id: str | None = None,
    score: float | None = None,
    tokens: int = 0,
    **fields: Any,
) -> Attempt:
    """Store the task's outcome in the run (from a worker thread, like `store_nodes`) and return it; `started` is
    the `time.perf_counter()` the method began the task at (none: a loop over the whole suite)."""
    attempt = Attempt(
        run_id=ctx.run.id,
        task_id=task.id,
        status="passed" if passed else "failed",
        best_node_id=best_node_id,
        score=score,
        tokens=tokens,
        seconds=time.perf_counter() - started if started is not None else 0.0,
        **fields,
    )
    return await asyncio.to_thread(ctx.store.add_attempt, attempt)


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
