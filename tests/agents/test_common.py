"""What every method shares (`agents/common.py`): the resume-from-checkpoint run of a graph, seeds, test scores;
and the reducers that join AlphaVerus's per-task branches."""

from __future__ import annotations

import asyncio
import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from veriloop.agents.alphaverus.state import add_counts, add_spend, merge
from veriloop.agents.common import gather_as_finished, run_graph, share_passed, stable_seed
from veriloop.records import ExecResult, ExecStatus, TestOutcome


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


@dataclass
class Deps:
    calls: list[str]
    fail_at: str | None = None


def _step(name: str) -> Any:
    def node(state: Steps, runtime: Runtime[Deps]) -> dict[str, Any]:
        runtime.context.calls.append(name)
        if runtime.context.fail_at == name:
            raise RuntimeError(f"{name} failed")
        return {"steps": [name]}

    return node


def build_graph(checkpointer: InMemorySaver | None = None) -> CompiledStateGraph[Steps, Deps]:
    graph = StateGraph(Steps, context_schema=Deps)
    graph.add_node("first", _step("first"))
    graph.add_node("second", _step("second"))
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph.compile(checkpointer=checkpointer)


async def test_run_graph_resumes_an_interrupted_thread_and_never_reruns_a_finished_one() -> None:
    saver = InMemorySaver()
    broken = Deps(calls=[], fail_at="second")
    with pytest.raises(RuntimeError, match="second failed"):
        await run_graph(build_graph(saver), Steps(steps=[]), broken, thread="run:task")
    resumed = Deps(calls=[])
    assert await run_graph(build_graph(saver), Steps(steps=[]), resumed, thread="run:task") == {
        "steps": ["first", "second"]
    }
    assert resumed.calls == ["second"]  # the stored first step is not repeated
    again = Deps(calls=[])
    assert (await run_graph(build_graph(saver), Steps(steps=[]), again, thread="run:task"))["steps"] == [
        "first",
        "second",
    ]
    assert again.calls == []  # a finished thread returns its final state
    other = Deps(calls=[])
    await run_graph(build_graph(saver), Steps(steps=[]), other, thread="run:other")
    assert other.calls == ["first", "second"]  # threads are independent
    plain = Deps(calls=[])
    assert await run_graph(build_graph(), Steps(steps=[]), plain) == {"steps": ["first", "second"]}
    assert plain.calls == ["first", "second"]  # no checkpointer: always from the start


def test_seeds_repeat_and_scores_count_tests() -> None:
    assert (
        stable_seed(0, "HumanEval/0", 1) == stable_seed(0, "HumanEval/0", 1) == 3520368108
    )  # the same value as before the move: stored runs repeat
    assert stable_seed(0, "HumanEval/0", 2) != stable_seed(0, "HumanEval/0", 1)
    tests = [TestOutcome(name=str(i), passed=i < 3) for i in range(4)]
    assert share_passed(ExecResult(status=ExecStatus.FAILED, tests=tests)) == 0.75
    assert share_passed(ExecResult(status=ExecStatus.PASSED)) == 1.0
    assert share_passed(ExecResult(status=ExecStatus.TIMEOUT)) == 0.0


def test_branch_reducers_join_per_task_writes() -> None:
    assert merge({"a": "1"}, {"b": "2"}) == {"a": "1", "b": "2"} and merge({"a": "1"}, None) == {}
    assert add_counts({"exploit": 1}, {"exploit": 2, "judge": 1}) == {"exploit": 3, "judge": 1}
    total = add_spend({"a": {"llm_calls": 2.0, "tokens": 10.0}}, {"a": {"llm_calls": 1.0}, "b": {"tokens": 5.0}})
    assert total["a"]["llm_calls"] == 3.0 and total["a"]["tokens"] == 10.0 and total["b"]["tokens"] == 5.0


async def test_gather_as_finished_reaps_the_rest_when_one_fails_or_its_caller_is_cancelled() -> None:
    """A worker that loses its lease cancels the run: no task of it may keep writing after another worker took over."""
    seen: list[int] = []
    ended: list[str] = []

    async def job(index: int, delay: float, fail: bool = False) -> int:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            ended.append(f"cancelled {index}")
            raise
        if fail:
            raise ValueError(f"job {index} failed")
        ended.append(f"finished {index}")
        return index

    assert await gather_as_finished([job(0, 0.02), job(1, 0.0)], seen.append) == [1, 0] and seen == [1, 0]
    ended.clear()
    with pytest.raises(ValueError, match="job 1 failed"):
        await gather_as_finished([job(0, 0.0), job(1, 0.01, fail=True), job(2, 10)])
    assert ended == ["finished 0", "cancelled 2"]  # the slow one did not outlive the failure
    ended.clear()
    caller = asyncio.create_task(gather_as_finished([job(0, 0.0), job(1, 10), job(2, 10)]))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended == ["finished 0", "cancelled 1", "cancelled 2"]
