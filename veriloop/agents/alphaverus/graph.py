"""AlphaVerus as a LangGraph graph: explore -> tree -> filter -> pools, once per self-improvement round.

    for k in rounds:
        explore   every unsolved program: sample translations (few-shot from the solved pool), verify,
                  classify solved (score 1) / partial (0 <= score < 1) / failed
        tree      Treefinement from the best partial candidate of each program with no solved one
                  (error triplets of the pool as exemplars); a success adds its error triplets
        filter    solved candidates, fewest asserts/lines/chars first, up to 6: exploit model, then the
                  equivalence judge; the first survivor solves the program
        pools     solved pairs, the survivors' error triplets and the exploits found join the pools (round k)

Each phase fans out over the programs, one branch per program (LangGraph's `Send`, `options.concurrency` at
a time), and the state's reducers join what the branches write. Every sample is a stored Node (searches in
`search/`), the loop state is checkpointed by LangGraph in the store's database, and each phase's searches
have deterministic ids, so an interrupted run resumes the loop (a phase's finished branches are not run
again) and the search it was in without repeating stored nodes.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from veriloop.agents.alphaverus import filters
from veriloop.agents.alphaverus.pools import CRITIC, ERRORS, SOLVED, Pools, content_order
from veriloop.agents.alphaverus.problem import VerifierProblem
from veriloop.agents.alphaverus.prompts import explore_messages, fix_messages
from veriloop.agents.alphaverus.state import AlphaVerusOptions, Branch, SuiteState
from veriloop.agents.context import AgentContext
from veriloop.llm.codeblocks import CLOSING_FENCE
from veriloop.records import STEP_KEY, Node, Task
from veriloop.search.budget import Budget, Spend
from veriloop.search.engine import SearchConfig, SearchKind, SearchOutcome, run_search
from veriloop.search.score import scorer_for
from veriloop.verifiers.base import Verifier

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
            kind=kind,
            width=width,
            depth=depth,
            temperature=o.temperature,
            node_temperature=o.node_temperature,
            max_tokens=o.max_tokens,
            stop=(CLOSING_FENCE,),
            seed=o.seed,
            verify_concurrency=o.verify_concurrency,
            budget=Budget(llm_calls=width * depth, verifier_s=o.verifier_seconds),
        )

    def rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(str(part) for part in (self.options.seed, *parts)))


def _better(deps: Deps, current: str | None, outcome: SearchOutcome) -> str | None:
    """The task's best node: this outcome's best when it scores higher than the current one, else the current."""
    if outcome.best is None:
        return current
    if current is not None:
        stored = deps.ctx.store.get_node(current)
        if (stored.score or -1.0) >= (outcome.best.score or -1.0):
            return current
    return outcome.best.id


def _branches(node: str, state: SuiteState, nodes: dict[str, list[str]]) -> list[Send]:
    """One `Send` to `node` per task in `nodes` (task -> the node ids its branch starts from)."""
    k, best = state["iteration"], state.get("best", {})
    return [
        Send(node, Branch(branch_task=task_id, branch_round=k, branch_best=best.get(task_id), branch_nodes=ids))
        for task_id, ids in nodes.items()
    ]


def to_explore(state: SuiteState) -> list[Send] | str:
    """Every program not yet solved explores; with none left the round goes on to the tree phase."""
    accepted = state.get("accepted", {})
    todo: dict[str, list[str]] = {task_id: [] for task_id in state["task_ids"] if task_id not in accepted}
    return _branches("explore", state, todo) or "explored"


async def explore(state: Branch, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Sample translations of one program (few-shot from the solved pool); keep its solved or best partial nodes."""
    deps = runtime.context
    task_id, k = state["branch_task"], state["branch_round"]
    task = deps.tasks[task_id]
    solved = deps.pools.sample(SOLVED, k, deps.options.few_shot, deps.rng("solved", k, task_id), task_id)
    root = explore_messages(source_of(task), "dafny", deps.target, task_mode(task), solved)
    problem = VerifierProblem(
        task, deps.verifier, scorer_for(deps.target), root, target=deps.target, history=deps.options.history
    )
    outcome = await run_search(
        problem,
        deps.ctx.backend,
        deps.ctx.store,
        run_id=deps.ctx.run.id,
        task_id=task_id,
        config=deps.config("best_of_n", deps.options.explore_samples, 1),
        search_id=search_id(deps.ctx.run.id, task_id, k, "explore"),
        metadata={"phase": "explore", STEP_KEY: k, "few_shot": len(solved)},
    )
    update: dict[str, Any] = {"spend": {task_id: outcome.spend.as_dict()}}
    solved_nodes = [node.id for node in outcome.nodes if (node.score or -1.0) >= 1.0]
    partials = [node for node in outcome.nodes if node.score is not None and 0.0 <= node.score < 1.0]
    if solved_nodes:
        update["candidates"] = {task_id: solved_nodes}
    elif partials:
        update["partial"] = {task_id: max(partials, key=lambda node: node.score or 0.0).id}
    best = _better(deps, state["branch_best"], outcome)
    if best is not None:
        update["best"] = {task_id: best}
    return update


def explored(state: SuiteState) -> dict[str, Any]:
    """Joins the exploration branches."""
    return {}


def to_tree(state: SuiteState) -> list[Send] | str:
    """Treefinement from the best partial node of each program with no solved candidate."""
    candidates = state.get("candidates", {})
    todo = {task_id: [node_id] for task_id, node_id in state.get("partial", {}).items() if task_id not in candidates}
    return _branches("tree", state, dict(sorted(todo.items()))) or "refined"


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


async def tree(state: Branch, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Refine one program's partial node (error triplets as exemplars); a success becomes its candidate."""
    deps = runtime.context
    task_id, k, [partial] = state["branch_task"], state["branch_round"], state["branch_nodes"]
    task = deps.tasks[task_id]
    parent = await asyncio.to_thread(deps.ctx.store.get_node, partial)
    errors = deps.pools.sample(ERRORS, k, deps.options.few_shot, deps.rng("errors", k, task_id), task_id)
    root = fix_messages(parent.code or "", str(parent.metadata.get("feedback", "")), deps.target, errors)
    problem = VerifierProblem(
        task, deps.verifier, scorer_for(deps.target), root, target=deps.target, history=deps.options.history
    )
    outcome = await run_search(
        problem,
        deps.ctx.backend,
        deps.ctx.store,
        run_id=deps.ctx.run.id,
        task_id=task_id,
        config=deps.config(deps.options.search, deps.options.width, deps.options.depth),
        search_id=search_id(deps.ctx.run.id, task_id, k, "tree"),
        parent=parent,
        metadata={"phase": "tree", STEP_KEY: k, "few_shot": len(errors)},
    )
    update: dict[str, Any] = {"spend": {task_id: outcome.spend.as_dict()}}
    if outcome.solved and outcome.best is not None:
        update["candidates"] = {task_id: [outcome.best.id]}
        update["triplets"] = {task_id: triplets(outcome.best, outcome.nodes, parent)}
    best = _better(deps, state["branch_best"], outcome)
    if best is not None:
        update["best"] = {task_id: best}
    return update


def refined(state: SuiteState) -> dict[str, Any]:
    """Joins the tree branches."""
    return {}


def to_filter(state: SuiteState) -> list[Send] | str:
    """Every program with solved candidates goes through the filters; with none the round ends."""
    return _branches("filter", state, dict(sorted(state.get("candidates", {}).items()))) or "pools"


async def filter_candidates(state: Branch, runtime: Runtime[Deps]) -> dict[str, Any]:
    """One program's solved candidates, fewest asserts/lines/chars first: the exploit model, then the equivalence
    judge; the first that survives both solves the program."""
    deps = runtime.context
    task_id, k = state["branch_task"], state["branch_round"]
    o = deps.options
    store = deps.ctx.store
    task = deps.tasks[task_id]
    nodes = [await asyncio.to_thread(store.get_node, node_id) for node_id in state["branch_nodes"]]
    nodes.sort(key=lambda node: content_order(node.code or ""))
    critics = deps.pools.sample(CRITIC, k, o.few_shot, deps.rng("critic", k, task_id), task_id)
    counts = {"exploit": 0, "judge": 0}
    spend = Spend()
    exploit_found = False
    accepted: str | None = None
    for node in nodes[: o.max_candidates]:
        verdict = await filters.exploit_check(
            node, task, deps.target, deps.ctx.backend, deps.bare, store, samples=o.exploit_samples, critics=critics
        )
        spend.add(Spend(llm_calls=o.exploit_samples if verdict.details else 0))
        stage = "exploit"
        if not verdict.rejected:
            verdict = await filters.judge_check(
                node, source_of(task), deps.target, "dafny", deps.ctx.backend, store, votes=o.judge_votes
            )
            spend.add(Spend(llm_calls=o.judge_votes))
            stage = "judge"
        outcome = {"stage": stage, "rejected": verdict.rejected, "reason": verdict.reason, **verdict.details}
        filtered = {**node.metadata, "filter": outcome}
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
        accepted = node.id
        break
    update: dict[str, Any] = {"rejections": counts, "spend": {task_id: spend.as_dict()}}
    if accepted is not None:
        update["accepted"] = {task_id: accepted}
        update["best"] = {task_id: accepted}
    return update


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
    return {"iteration": k + 1, "candidates": None, "partial": None, "triplets": None}


def next_round(state: SuiteState) -> list[Send] | str:
    unsolved = [task_id for task_id in state["task_ids"] if task_id not in state.get("accepted", {})]
    return to_explore(state) if unsolved and state["iteration"] < state["iterations"] else END


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[SuiteState, Deps]:
    """explore -> tree -> filter -> pools, round after round, each phase one branch per task; run it with
    `run_graph(graph, state, deps, max_concurrency=options.concurrency)`."""
    graph = StateGraph(SuiteState, context_schema=Deps)
    graph.add_node("explore", explore, input_schema=Branch)
    graph.add_node("explored", explored)
    graph.add_node("tree", tree, input_schema=Branch)
    graph.add_node("refined", refined)
    graph.add_node("filter", filter_candidates, input_schema=Branch)
    graph.add_node("pools", update_pools)
    graph.add_conditional_edges(START, to_explore, ["explore", "explored"])
    graph.add_edge("explore", "explored")
    graph.add_conditional_edges("explored", to_tree, ["tree", "refined"])
    graph.add_edge("tree", "refined")
    graph.add_conditional_edges("refined", to_filter, ["filter", "pools"])
    graph.add_edge("filter", "pools")
    graph.add_conditional_edges("pools", next_round, ["explore", "explored", END])
    return graph.compile(checkpointer=checkpointer)
