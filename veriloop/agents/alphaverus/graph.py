"""AlphaVerus as a LangGraph graph: explore -> tree -> filter -> pools, once per self-improvement round.

    for k in rounds:
        explore   every unsolved program: sample translations (few-shot from the solved pool), verify,
                  classify solved (score 1) / partial (0 <= score < 1) / failed
        tree      Treefinement from the best partial candidate of each program with no solved one
                  (error triplets of the pool as exemplars); a success adds its error triplets
        filter    solved candidates, fewest asserts/lines/chars first, up to 6: exploit model, then the
                  equivalence judge; the first survivor solves the program
        pools     solved pairs, the survivors' error triplets and the exploits found join the pools (round k)

Every sample is a stored Node (searches in `search/`), the loop state is checkpointed by LangGraph in the
store's database, and each phase's searches have deterministic ids, so an interrupted run resumes both
the loop and the search it was in without repeating stored nodes.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from veriloop.agents.alphaverus import filters
from veriloop.agents.alphaverus.pools import CRITIC, ERRORS, SOLVED, Pools, content_order
from veriloop.agents.alphaverus.problem import VerifierProblem
from veriloop.agents.alphaverus.prompts import explore_messages, fix_messages
from veriloop.agents.alphaverus.state import AlphaVerusOptions, SuiteState
from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import CLOSING_FENCE
from veriloop.records import STEP_KEY, Node, Task
from veriloop.search.budget import Budget, Spend
from veriloop.search.engine import SearchConfig, SearchKind, SearchOutcome, run_search
from veriloop.search.score import scorer_for
from veriloop.verifiers.base import Verifier

T = TypeVar("T")
MAX_TRIPLETS = 5
"""Error triplets taken from the path of a tree success (the original's 5 previous turns)."""


def search_id(*parts: object) -> str:
    """A stable id for one search of one phase, so a rerun finds the nodes it already stored."""
    return hashlib.sha256(":".join(str(part) for part in parts).encode()).hexdigest()[:32]


def task_mode(task: Task) -> str:
    """hints (fill in DafnyBench hints), translate (Dafny to the target), or inference (a prompt to complete)."""
    mode = str(task.metadata.get("mode", "inference"))
    return mode if mode in ("hints", "translate") else "inference"


def source_of(task: Task) -> str:
    return str(task.metadata.get("source") or task.prompt)


@dataclass
class Deps:
    """What the graph's nodes use: the run's context, the options and the verifiers of the target."""

    ctx: AgentContext
    options: AlphaVerusOptions
    tasks: dict[str, Task]
    target: str
    verifier: Verifier
    """Guarded (spec guard) and cached: judges candidates."""
    bare: Verifier
    """Unguarded: judges the exploit model's trivial bodies, which the guard would hide."""
    pools: Pools

    def config(self, kind: SearchKind, width: int, depth: int) -> SearchConfig:
        o = self.options
        return SearchConfig(
            kind=kind, width=width, depth=depth, temperature=o.temperature, node_temperature=o.node_temperature,
            max_tokens=o.max_tokens, stop=(CLOSING_FENCE,), seed=o.seed, verify_concurrency=o.verify_concurrency,
            budget=Budget(llm_calls=width * depth, verifier_s=o.verifier_seconds),
        )  # fmt: skip

    def rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(str(part) for part in (self.options.seed, *parts)))

    async def each(self, items: Sequence[str], work: Callable[[str], Awaitable[T]]) -> list[T]:
        """`work` on every item, `options.concurrency` at a time (their requests share the batcher)."""
        gate = asyncio.Semaphore(self.options.concurrency)

        async def one(item: str) -> T:
            async with gate:
                return await work(item)

        return list(await asyncio.gather(*(one(item) for item in items)))


def _spent(state: SuiteState, task_id: str, extra: Spend) -> dict[str, dict[str, float]]:
    spend = dict(state.get("spend", {}))
    total = Spend.from_dict(spend.get(task_id, {}))
    total.add(extra)
    spend[task_id] = total.as_dict()
    return spend


def _better(state: SuiteState, best: dict[str, str], outcome: SearchOutcome, task_id: str, deps: Deps) -> None:
    if outcome.best is None:
        return
    current = best.get(task_id)
    if current is not None:
        stored = deps.ctx.store.get_node(current)
        if (stored.score or -1.0) >= (outcome.best.score or -1.0):
            return
    best[task_id] = outcome.best.id


async def explore(state: SuiteState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    k = state["iteration"]
    todo = [task_id for task_id in state["task_ids"] if task_id not in state.get("accepted", {})]

    async def one(task_id: str) -> SearchOutcome:
        task = deps.tasks[task_id]
        solved = deps.pools.sample(SOLVED, k, deps.options.few_shot, deps.rng("solved", k, task_id), task_id)
        root = explore_messages(source_of(task), "dafny", deps.target, task_mode(task), solved)
        problem = VerifierProblem(task, deps.verifier, scorer_for(deps.target), root, target=deps.target,
                                  history=deps.options.history)  # fmt: skip
        return await run_search(
            problem, deps.ctx.backend, deps.ctx.store, run_id=deps.ctx.run.id, task_id=task_id,
            config=deps.config("best_of_n", deps.options.explore_samples, 1),
            search_id=search_id(deps.ctx.run.id, task_id, k, "explore"),
            metadata={"phase": "explore", STEP_KEY: k, "few_shot": len(solved)},
        )  # fmt: skip

    outcomes = await deps.each(todo, one)
    candidates: dict[str, list[str]] = {}
    partial: dict[str, str] = {}
    best = dict(state.get("best", {}))
    spend_state: SuiteState = {"spend": dict(state.get("spend", {}))}
    for task_id, outcome in zip(todo, outcomes, strict=True):
        solved_nodes = [node.id for node in outcome.nodes if (node.score or -1.0) >= 1.0]
        if solved_nodes:
            candidates[task_id] = solved_nodes
        else:
            partials = [node for node in outcome.nodes if node.score is not None and 0.0 <= node.score < 1.0]
            if partials:
                partial[task_id] = max(partials, key=lambda node: node.score or 0.0).id
        _better(state, best, outcome, task_id, deps)
        spend_state["spend"] = _spent(spend_state, task_id, outcome.spend)
    return {"candidates": candidates, "partial": partial, "best": best, "spend": spend_state["spend"]}


def triplets(winner: Node, nodes: Sequence[Node], parent: Node) -> list[dict[str, Any]]:
    """(incorrect code, its verifier feedback, the final correct code) for up to 5 nodes before the winner."""
    by_id = {node.id: node for node in [parent, *nodes]}
    path: list[Node] = []
    current = by_id.get(winner.parent_id or "")
    while current is not None:
        path.append(current)
        current = by_id.get(current.parent_id or "") if current is not parent else None
    return [
        {"bad": node.code or "", "error": str(node.metadata.get("feedback", "")), "good": winner.code or ""}
        for node in path[:MAX_TRIPLETS]
        if node.code
    ]


async def tree(state: SuiteState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    k = state["iteration"]
    todo = [task_id for task_id in state.get("partial", {}) if task_id not in state.get("candidates", {})]

    async def one(task_id: str) -> tuple[SearchOutcome, Node]:
        task = deps.tasks[task_id]
        parent = await asyncio.to_thread(deps.ctx.store.get_node, state["partial"][task_id])
        errors = deps.pools.sample(ERRORS, k, deps.options.few_shot, deps.rng("errors", k, task_id), task_id)
        root = fix_messages(parent.code or "", str(parent.metadata.get("feedback", "")), deps.target, errors)
        problem = VerifierProblem(task, deps.verifier, scorer_for(deps.target), root, target=deps.target,
                                  history=deps.options.history)  # fmt: skip
        outcome = await run_search(
            problem, deps.ctx.backend, deps.ctx.store, run_id=deps.ctx.run.id, task_id=task_id,
            config=deps.config(deps.options.search, deps.options.width, deps.options.depth),
            search_id=search_id(deps.ctx.run.id, task_id, k, "tree"), parent=parent,
            metadata={"phase": "tree", STEP_KEY: k, "few_shot": len(errors)},
        )  # fmt: skip
        return outcome, parent

    results = await deps.each(todo, one)
    candidates = dict(state.get("candidates", {}))
    found: dict[str, list[dict[str, Any]]] = {}
    best = dict(state.get("best", {}))
    spend_state: SuiteState = {"spend": dict(state.get("spend", {}))}
    for task_id, (outcome, parent) in zip(todo, results, strict=True):
        if outcome.solved and outcome.best is not None:
            candidates[task_id] = [outcome.best.id]
            found[task_id] = triplets(outcome.best, outcome.nodes, parent)
        _better(state, best, outcome, task_id, deps)
        spend_state["spend"] = _spent(spend_state, task_id, outcome.spend)
    return {"candidates": candidates, "triplets": found, "best": best, "spend": spend_state["spend"]}


async def filter_candidates(state: SuiteState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    k = state["iteration"]
    o = deps.options
    store = deps.ctx.store
    pending = sorted(state.get("candidates", {}))

    async def one(task_id: str) -> tuple[str | None, dict[str, int], Spend]:
        task = deps.tasks[task_id]
        nodes = [await asyncio.to_thread(store.get_node, node_id) for node_id in state["candidates"][task_id]]
        nodes.sort(key=lambda node: content_order(node.code or ""))
        critics = deps.pools.sample(CRITIC, k, o.few_shot, deps.rng("critic", k, task_id), task_id)
        counts = {"exploit": 0, "judge": 0}
        spend = Spend()
        exploit_found = False
        for node in nodes[: o.max_candidates]:
            verdict = await filters.exploit_check(node, task, deps.target, deps.ctx.backend, deps.bare, store,
                                                  samples=o.exploit_samples, critics=critics)  # fmt: skip
            spend.add(Spend(llm_calls=o.exploit_samples if verdict.details else 0))
            stage = "exploit"
            if not verdict.rejected:
                verdict = await filters.judge_check(node, source_of(task), deps.target, "dafny", deps.ctx.backend,
                                                    store, votes=o.judge_votes)  # fmt: skip
                spend.add(Spend(llm_calls=o.judge_votes))
                stage = "judge"
            filtered = {**node.metadata, "filter": {"stage": stage, "rejected": verdict.rejected,
                                                    "reason": verdict.reason, **verdict.details}}  # fmt: skip
            await asyncio.to_thread(store.update_node, node.model_copy(update={"metadata": filtered}))
            if verdict.rejected:
                counts[stage] += 1
                if verdict.exploits and not exploit_found:
                    exploit_found = True
                    split = filters.split_spec(node.code or "", deps.target)
                    pick = deps.rng("exploit", k, task_id).choice(verdict.exploits)
                    payload = {"prefix": split.prefix if split else "", "exploit": pick}
                    await asyncio.to_thread(deps.pools.add, CRITIC, k, task_id, [payload])
                continue
            return node.id, counts, spend
        return None, counts, spend

    results = await deps.each(pending, one)
    accepted = dict(state.get("accepted", {}))
    rejections = dict(state.get("rejections", {}))
    best = dict(state.get("best", {}))
    spend_state: SuiteState = {"spend": dict(state.get("spend", {}))}
    for task_id, (node_id, counts, spend) in zip(pending, results, strict=True):
        for stage, count in counts.items():
            rejections[stage] = rejections.get(stage, 0) + count
        if node_id is not None:
            accepted[task_id] = node_id
            best[task_id] = node_id
        spend_state["spend"] = _spent(spend_state, task_id, spend)
    return {"accepted": accepted, "rejections": rejections, "best": best, "spend": spend_state["spend"]}


async def update_pools(state: SuiteState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    k = state["iteration"]
    store = deps.ctx.store
    before = set(state.get("candidates", {}))
    for task_id, node_id in sorted(state.get("accepted", {}).items()):
        if task_id not in before:
            continue  # accepted in an earlier round
        node = await asyncio.to_thread(store.get_node, node_id)
        task = deps.tasks[task_id]
        pair = {"source": source_of(task), "target": node.code or "", "mode": task_mode(task)}
        await asyncio.to_thread(deps.pools.add, SOLVED, k, task_id, [pair])
        found = state.get("triplets", {}).get(task_id, [])
        if found:
            await asyncio.to_thread(deps.pools.add, ERRORS, k, task_id, found)
    return {"iteration": k + 1, "candidates": {}, "partial": {}, "triplets": {}}


def next_round(state: SuiteState) -> str:
    unsolved = [task_id for task_id in state["task_ids"] if task_id not in state.get("accepted", {})]
    return "explore" if unsolved and state["iteration"] < state["iterations"] else END


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[SuiteState, Deps]:
    """explore -> tree -> filter -> pools, round after round; run it with `run_graph(graph, state, deps)`."""
    graph = StateGraph(SuiteState, context_schema=Deps)
    graph.add_node("explore", explore)
    graph.add_node("tree", tree)
    graph.add_node("filter", filter_candidates)
    graph.add_node("pools", update_pools)
    graph.add_edge(START, "explore")
    graph.add_edge("explore", "tree")
    graph.add_edge("tree", "filter")
    graph.add_edge("filter", "pools")
    graph.add_conditional_edges("pools", next_round, ["explore", END])
    return graph.compile(checkpointer=checkpointer)
