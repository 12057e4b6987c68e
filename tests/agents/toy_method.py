"""A method written only in the test folder, in the shape CONTRIBUTING's "Add a method" states: options,
a graph built by `build_graph(checkpointer=None)` with `Deps` as its context, and an Agent subclass.

    draw  -> `samples` replies to the task's prompt
    judge -> each reply's program checked by the task's verifier (`common.check`), stored as a Node
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import Field

from veriloop.agents.base import Agent, AgentOptions
from veriloop.agents.common import check, finish_attempt, run_graph, stable_seed, store_nodes
from veriloop.agents.context import AgentContext
from veriloop.agents.direct import program_from_reply, prompt_messages
from veriloop.records import STEP_KEY, Attempt, Node, SamplingParams, Task


class ToyOptions(AgentOptions):
    samples: int = Field(2, ge=1, le=4, description="Replies drawn per task.")
    pick: Literal["first", "best"] = Field("best", description="Which reply answers: the first, or the best scored.")


class ToyState(TypedDict, total=False):
    replies: list[str]
    node_ids: list[str]
    scores: list[float]


@dataclass
class Deps:
    ctx: AgentContext
    options: ToyOptions
    task: Task


async def draw(state: ToyState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    params = SamplingParams(n=deps.options.samples, temperature=0.0, seed=stable_seed(deps.task.id))
    [completions] = await deps.ctx.backend.generate([prompt_messages(deps.task)], params)
    return {"replies": [completion.text for completion in completions]}


async def judge(state: ToyState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    codes = [program_from_reply(deps.task, reply) for reply in state["replies"]]
    results = [await check(deps.task, code, deps.ctx) for code in codes]
    nodes = [
        Node(
            run_id=deps.ctx.run.id,
            task_id=deps.task.id,
            role="generate",
            code=code,
            **result.node_fields(),
            score=result.score,
            metadata={STEP_KEY: 0, "candidate": index},
        )
        for index, (code, result) in enumerate(zip(codes, results, strict=True))
    ]
    await store_nodes(deps.ctx, nodes)
    return {"node_ids": [node.id for node in nodes], "scores": [node.score or 0.0 for node in nodes]}


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[ToyState, Deps]:
    graph = StateGraph(ToyState, context_schema=Deps)
    graph.add_node("draw", draw)
    graph.add_node("judge", judge)
    graph.add_edge(START, "draw")
    graph.add_edge("draw", "judge")
    graph.add_edge("judge", END)
    return graph.compile(checkpointer=checkpointer)


class ToyAgent(Agent[ToyOptions]):
    """Draw a few replies, test each, answer with the first or the best."""

    name = "toy"
    Options = ToyOptions

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        final = await run_graph(build_graph(), {}, Deps(ctx=ctx, options=self.options, task=task))
        scores: list[float] = final["scores"]
        index = 0 if self.options.pick == "first" else max(range(len(scores)), key=scores.__getitem__)
        return await finish_attempt(
            ctx, task, passed=scores[index] == 1.0, best_node_id=final["node_ids"][index], score=scores[index]
        )
