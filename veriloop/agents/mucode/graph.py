"""μCode's multi-turn best-of-N episode as a LangGraph graph.

    generate  -> N replies from the history (first turn: the problem and its public tests)
    execute   -> each reply checked by the task's verifier on the public tests
    select    -> scores (pt, lv, pt+lv = 100 x public pass + verifier, random); every candidate is stored
                 as a Node under the previous turn's chosen node, the chosen one marked
    passed the public tests, or turn == turns?  -> final (the task's verifier on every test decides the attempt)
    otherwise -> feedback (the public feedback becomes the next user turn) -> generate

Nodes take the run's backend, sandbox, store and verifier from the graph's context (`Deps`).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from veriloop.agents.common import answer_constraint, check, run_graph, stable_seed, store_nodes
from veriloop.agents.context import AgentContext
from veriloop.agents.mucode import prompts
from veriloop.agents.mucode.state import MuCodeOptions, MuCodeState, Played, Sample
from veriloop.llm.codeblocks import CLOSING_FENCE
from veriloop.records import STEP_KEY, Node, SamplingParams, Task, new_id

ORACLE_WEIGHT = 100.0
"""beta_O of the paper: a passing test outweighs any verifier score; the verifier breaks ties."""


class Scorer(Protocol):
    """A learned verifier as the graph uses it: R(problem, reply) for each reply."""

    async def score(self, task: Task, replies: list[str]) -> list[float]: ...


class ThreadedVerifier:
    """Runs a synchronous verifier (`LearnedVerifier`) on a worker thread, so generation keeps going."""

    def __init__(self, verifier: Any) -> None:
        self.verifier = verifier

    async def score(self, task: Task, replies: list[str]) -> list[float]:
        prompt = [{"role": "user", "content": prompts.first_turn(task).content}]
        scores: list[float] = await asyncio.to_thread(self.verifier.score, prompt, replies)
        return scores


@dataclass
class Deps:
    """What the nodes need; one per run (or per training rollout batch)."""

    ctx: AgentContext
    options: MuCodeOptions
    verifier: Scorer | None = None


def selection_scores(samples: list[Sample], rule: str) -> list[float]:
    """The score each candidate is ranked by under `rule` (random ranks by nothing and is drawn separately)."""
    scores = []
    for sample in samples:
        public = 1.0 if sample.public_passed else 0.0
        learned = sample.verifier if sample.verifier is not None else 0.0
        if rule == "pt":
            scores.append(public)
        elif rule == "lv":
            scores.append(learned)
        elif rule == "pt+lv":
            scores.append(ORACLE_WEIGHT * public + learned)
        else:
            scores.append(0.0)
    return scores


def choose(samples: list[Sample], rule: str, rng: random.Random) -> int:
    """Index of the kept candidate: the best score (first on ties), or a uniform draw for `random`."""
    if rule == "random":
        return rng.randrange(len(samples))
    scores = selection_scores(samples, rule)
    return max(range(len(samples)), key=lambda index: (scores[index], -index))


def _public_tests(task: Task) -> str:
    return task.public_tests if task.public_tests is not None else task.tests


async def generate(state: MuCodeState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    options, task, turn = deps.options, state["task"], state["turn"]
    played = state.get("played", [])
    messages = prompts.turn_messages(task, [step.exchange for step in played], options.history)
    temperature = options.first_temperature() if turn == 1 else options.later_temperature()
    params = SamplingParams(
        n=options.samples,
        temperature=temperature,
        max_tokens=options.max_tokens,
        stop=[CLOSING_FENCE],
        seed=stable_seed(options.seed, task.id, state.get("rollout", 0), turn),
        constraint=answer_constraint(task, task.language, options.structured),
    )
    [completions] = await deps.ctx.backend.generate([messages], params)
    samples = [
        Sample(node_id=new_id(), messages=messages, completion=completion, code=prompts.program(task, completion.text))
        for completion in completions
    ]
    tokens = sum(completion.usage.completion_tokens for completion in completions)
    tokens += completions[0].usage.prompt_tokens if completions else 0
    return {"samples": samples, "tokens": tokens}


async def execute(state: MuCodeState, runtime: Runtime[Deps]) -> dict[str, Any]:
    ctx, task = runtime.context.ctx, state["task"]
    samples = state["samples"]
    results = await asyncio.gather(*(check(task, sample.code, ctx, _public_tests(task)) for sample in samples))
    return {"samples": [replace(sample, public=result) for sample, result in zip(samples, results, strict=True)]}


async def select(state: MuCodeState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    options, task, turn, samples = deps.options, state["task"], state["turn"], state["samples"]
    if deps.verifier is not None:
        scores = await deps.verifier.score(task, [prompts.as_reply(sample.code) for sample in samples])
        samples = [replace(sample, verifier=value) for sample, value in zip(samples, scores, strict=True)]
    rule = options.selection
    ranks = selection_scores(samples, rule)
    samples = [replace(sample, score=value) for sample, value in zip(samples, ranks, strict=True)]
    rng = random.Random(stable_seed("select", options.seed, task.id, state.get("rollout", 0), turn))
    index = choose(samples, rule, rng)
    chosen = samples[index]
    nodes = [
        Node(
            id=sample.node_id,
            run_id=deps.ctx.run.id,
            task_id=task.id,
            parent_id=state.get("parent_id"),
            depth=turn - 1,
            role="generate" if turn == 1 else "refine",
            messages=sample.messages,
            completion=sample.completion,
            code=sample.code,
            **(sample.public.node_fields() if sample.public is not None else {}),
            score=sample.score,
            metadata={
                STEP_KEY: turn,
                "candidate": position,
                "rollout": state.get("rollout", 0),
                "tests": "public",
                "public_passed": sample.public_passed,
                "verifier_score": sample.verifier,
                "select": rule,
                "selected": position == index,
            },
        )
        for position, sample in enumerate(samples)
    ]
    await store_nodes(deps.ctx, nodes)
    return {"samples": samples, "chosen": chosen}


def after_select(state: MuCodeState, runtime: Runtime[Deps]) -> Literal["final", "feedback"]:
    chosen = state.get("chosen")
    if chosen is not None and chosen.public_passed:
        return "final"
    return "final" if state["turn"] >= runtime.context.options.turns else "feedback"


async def feedback(state: MuCodeState, runtime: Runtime[Deps]) -> dict[str, Any]:
    task, chosen = state["task"], state["chosen"]
    assert chosen is not None and chosen.public is not None
    exchange = prompts.Exchange(
        reply=chosen.completion.text, code=chosen.code, feedback=prompts.feedback(chosen.public, task.entry_point)
    )
    played = Played(sample=chosen, exchange=exchange, candidates=len(state["samples"]))
    return {"played": [played], "turn": state["turn"] + 1, "parent_id": chosen.node_id, "samples": []}


async def final(state: MuCodeState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """The private check: the task's verifier on every test (public and private) of the last chosen code."""
    deps, task = runtime.context, state["task"]
    chosen = state["chosen"]
    assert chosen is not None and chosen.public is not None
    result = await check(task, chosen.code, deps.ctx)
    node = Node(
        run_id=deps.ctx.run.id,
        task_id=task.id,
        parent_id=chosen.node_id,
        depth=state["turn"],
        role="final",
        code=chosen.code,
        **result.node_fields(),
        score=1.0 if result.passed else 0.0,
        metadata={STEP_KEY: state["turn"], "rollout": state.get("rollout", 0), "tests": "public+private"},
    )
    await store_nodes(deps.ctx, [node])
    exchange = prompts.Exchange(
        reply=chosen.completion.text, code=chosen.code, feedback=prompts.feedback(chosen.public, task.entry_point)
    )
    played = Played(sample=chosen, exchange=exchange, candidates=len(state["samples"]))
    return {"played": [played], "final": result, "final_node_id": node.id}


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[MuCodeState, Deps]:
    """generate -> execute -> select -> (final | feedback -> generate); run it with `run_graph(graph, state, deps)`."""
    graph = StateGraph(MuCodeState, context_schema=Deps)
    graph.add_node("generate", generate)
    graph.add_node("execute", execute)
    graph.add_node("select", select)
    graph.add_node("feedback", feedback)
    graph.add_node("final", final)
    graph.add_edge(START, "generate")
    graph.add_edge("generate", "execute")
    graph.add_edge("execute", "select")
    graph.add_conditional_edges("select", after_select, ["final", "feedback"])
    graph.add_edge("feedback", "generate")
    graph.add_edge("final", END)
    return graph.compile(checkpointer=checkpointer)


def initial_state(task: Task, rollout: int = 0) -> MuCodeState:
    return {
        "task": task,
        "rollout": rollout,
        "turn": 1,
        "parent_id": None,
        "samples": [],
        "chosen": None,
        "played": [],
        "tokens": 0,
        "final": None,
        "final_node_id": None,
    }


def recursion_limit(options: MuCodeOptions) -> int:
    """Room for every turn: four steps a turn plus the final check (LangGraph's default limit is 25)."""
    return 4 * options.turns + 8


GRAPH = build_graph()
"""Episodes are not checkpointed (a rerun replays a task), so one compiled graph serves every episode."""


async def episode(task: Task, deps: Deps, rollout: int = 0) -> MuCodeState:
    """Play one episode of `task` through the graph; every turn's candidates are stored as nodes."""
    final = await run_graph(GRAPH, initial_state(task, rollout), deps, recursion_limit=recursion_limit(deps.options))
    return final  # type: ignore[return-value]
