"""ReVISE (Lee et al., ICML 2025): refine via intrinsic self-verification, as a LangGraph graph.

    answer  -> K attempts y_k ~ M(. | x)                            (each tested and stored as a node)
    verify  -> for each open trajectory: p([eos] | x, y..), p([refine] | x, y..);
               the model's decision is the likelier of the two, its confidence
               c_k = p([eos]) / (p([eos]) + p([refine]))                   (stored as a `verify` node)
    any trajectory chose [refine] (and has refinements left)? -> refine -> verify
    refine  -> y' ~ M(. | x, y.., [refine])                           (stored under its decision)
    select  -> confidence-aware decoding: argmax_a sum_{k: ans(y_k) = a} c_k over the final answers
               (or a plain majority vote, or trajectory 0), answers grouped by normalised code

The task's verifier (its tests, unless the task names another judge) only labels the stored attempts (the data
the curriculum learns from); the agent never sees its verdicts. The backend must score next tokens
(`SelfVerifyingBackend`: the embedded one does).
With `structured`, every attempt (first or refined) is decoded as one block in the task's language (holding the
task's function, for Python); a decision is never decoded, so it needs no constraint and cannot fail to parse.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from veriloop.agents.checkpoint import thread_id
from veriloop.agents.common import answer_constraint, check, finish_attempt, run_graph, stable_seed, store_nodes
from veriloop.agents.context import AgentContext
from veriloop.agents.revise import prompts
from veriloop.agents.revise.state import ReviseOptions, ReviseState, Trajectory
from veriloop.errors import ConfigError
from veriloop.llm.codeblocks import CLOSING_FENCE
from veriloop.records import STEP_KEY, Attempt, Completion, Message, Node, SamplingParams, Task


@runtime_checkable
class SelfVerifyingBackend(Protocol):
    """What ReVISE needs beyond `generate`: continue a reply as raw text, and read next-token probabilities."""

    def render_chat(self, messages: Sequence[Message]) -> str: ...

    async def next_token_logprobs(self, prompts: Sequence[str], tokens: Sequence[str]) -> list[dict[str, float]]: ...


def verifying_backend(backend: object) -> SelfVerifyingBackend:
    if not isinstance(backend, SelfVerifyingBackend):
        raise ConfigError(
            f"ReVISE reads the model's own decision-token probabilities; backend {getattr(backend, 'name', backend)!r} "
            "cannot score next tokens (use the embedded backend)"
        )
    return backend


@dataclass
class Deps:
    """What the nodes take from the graph's context: the run's dependencies, the task and the options."""

    ctx: AgentContext
    task: Task
    options: ReviseOptions


def vote(keys: Sequence[str], weights: Sequence[float]) -> tuple[int, list[dict[str, Any]]]:
    """Weighted vote: the answer key with the largest total weight (earliest on ties); returns the index of
    its heaviest member and every group as {members, weight}."""
    groups: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    totals = {key: sum(weights[i] for i in members) for key, members in groups.items()}
    best = max(groups, key=lambda key: (totals[key], -groups[key][0]))
    chosen = max(groups[best], key=lambda i: (weights[i], -i))
    return chosen, [{"members": members, "weight": totals[key]} for key, members in groups.items()]


def select_index(trajectories: Sequence[Trajectory], rule: str) -> tuple[int, list[dict[str, Any]]]:
    """The trajectory whose final attempt answers, under `rule` (confidence, majority, first)."""
    keys = [prompts.normalize_code(t.codes[-1]) for t in trajectories]
    if rule == "first":
        return 0, [{"members": [i], "weight": 1.0} for i in range(len(trajectories))]
    weights = [t.confidence if rule == "confidence" else 1.0 for t in trajectories]
    return vote(keys, weights)


def _load(state: ReviseState | dict[str, Any]) -> list[Trajectory]:
    return [Trajectory.model_validate(item) for item in state.get("trajectories", [])]


def _dump(trajectories: Sequence[Trajectory]) -> list[dict[str, Any]]:
    return [t.model_dump() for t in trajectories]


def _params(options: ReviseOptions, task: Task, n: int, seed: int) -> SamplingParams:
    """How an attempt (first or refined) is sampled: with `structured`, as one block in the task's language (a
    python one holding the task's function). The decision after it is never generated text: `verify` compares
    p([eos]) with p([refine])."""
    greedy = options.samples == 1
    return SamplingParams(
        n=n,
        temperature=0.0 if greedy else options.temperature,
        max_tokens=options.max_tokens,
        stop=[CLOSING_FENCE],
        seed=seed,
        constraint=answer_constraint(task, task.language, options.structured),
    )


async def _record_attempts(deps: Deps, trajectories: Sequence[Trajectory], completions: Sequence[Completion]) -> None:
    """Judge each new attempt with the task's verifier, store it as a node under its trajectory's last decision, and
    add it to the trajectory."""
    ctx, task = deps.ctx, deps.task
    codes = [prompts.program_from_reply(task, completion.text) for completion in completions]
    checks = await asyncio.gather(*(check(task, code, ctx) for code in codes))
    base = prompts.task_messages(task)
    nodes = []
    for trajectory, completion, code, checked in zip(trajectories, completions, codes, checks, strict=True):
        refining = bool(trajectory.attempt_ids)
        before = [Message(role="assistant", content=trajectory.transcript)] if trajectory.transcript else []
        node = Node(
            run_id=ctx.run.id,
            task_id=task.id,
            parent_id=trajectory.verify_ids[-1] if refining else None,
            depth=2 * trajectory.rounds,
            role="refine" if refining else "generate",
            messages=[*base, *before],
            completion=completion,
            code=code,
            **checked.node_fields(),
            score=checked.score,
            metadata={"trajectory": trajectory.index, STEP_KEY: trajectory.rounds},
        )
        nodes.append(node)
        trajectory.attempt_ids.append(node.id)
        trajectory.codes.append(code)
        trajectory.passed.append(checked.passed)
        trajectory.pending = prompts.attempt_segment(completion.text)
        trajectory.tokens += completion.usage.total_tokens
    await store_nodes(ctx, nodes)


async def answer(state: ReviseState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """K first attempts from the prompt alone."""
    deps = runtime.context
    options, task = deps.options, deps.task
    params = _params(options, task, options.samples, stable_seed(options.seed, task.id, "answer"))
    [completions] = await deps.ctx.backend.generate([state["prefix"]], params)
    trajectories = [Trajectory(index=index) for index in range(len(completions))]
    await _record_attempts(deps, trajectories, completions)
    return {"trajectories": _dump(trajectories)}


def decision_confidence(p_eos: float, p_refine: float) -> float:
    """p([eos]) among the two decisions: the paper's c = p([eos]) for a model that puts its mass on the decision
    tokens there, and still comparable across attempts when training moved the decisions only against each other
    (`decision_tokens` in the curriculum), so their share of the whole vocabulary stays small."""
    total = p_eos + p_refine
    return p_eos / total if total > 0 else 0.5


async def verify(state: ReviseState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """The decision after each open trajectory's latest attempt: p([eos]) against p([refine]), read as next-token
    probabilities rather than generated, so no decision can fail to parse (and `structured` leaves it alone)."""
    deps = runtime.context
    ctx, options = deps.ctx, deps.options
    trajectories = _load(state)
    open_ = [t for t in trajectories if not t.done]
    backend = verifying_backend(ctx.backend)
    texts = [state["prefix"] + t.transcript + t.pending for t in open_]
    scores = await backend.next_token_logprobs(texts, [prompts.EOS_TOKEN, prompts.REFINE_TOKEN])
    for trajectory, logps in zip(open_, scores, strict=True):
        p_eos, p_refine = math.exp(logps[prompts.EOS_TOKEN]), math.exp(logps[prompts.REFINE_TOKEN])
        confidence = decision_confidence(p_eos, p_refine)
        wants_refine = p_refine > p_eos
        capped = wants_refine and trajectory.rounds > options.max_refinements
        decision = prompts.REFINE_TOKEN if wants_refine and not capped else prompts.EOS_TOKEN
        node = await asyncio.to_thread(
            ctx.store.add_node,
            Node(
                run_id=ctx.run.id,
                task_id=deps.task.id,
                parent_id=trajectory.attempt_ids[-1],
                depth=2 * trajectory.rounds - 1,
                role="verify",
                score=confidence,
                metadata={
                    "trajectory": trajectory.index,
                    STEP_KEY: trajectory.rounds - 1,
                    "p_eos": p_eos,
                    "p_refine": p_refine,
                    "confidence": confidence,
                    "decision": decision,
                    "capped": capped,
                    "attempt_passed": trajectory.passed[-1],
                },
            ),
        )
        trajectory.verify_ids.append(node.id)
        trajectory.transcript += trajectory.pending + decision
        trajectory.pending = ""
        trajectory.confidences.append(confidence)
        trajectory.decisions.append(decision)
        trajectory.done = decision == prompts.EOS_TOKEN
    return {"trajectories": _dump(trajectories)}


def route(state: ReviseState) -> Literal["refine", "select"]:
    return "refine" if any(not t.done for t in _load(state)) else "select"


async def refine(state: ReviseState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """A corrected attempt for every trajectory that chose [refine], conditioned on all it wrote so far."""
    deps = runtime.context
    options, task = deps.options, deps.task
    trajectories = _load(state)
    open_ = [t for t in trajectories if not t.done]
    calls = [
        deps.ctx.backend.generate(
            [state["prefix"] + t.transcript],
            _params(options, task, 1, stable_seed(options.seed, task.id, t.index, t.rounds)),
        )
        for t in open_
    ]
    completions = [reply[0][0] for reply in await asyncio.gather(*calls)]
    await _record_attempts(deps, open_, completions)
    return {"trajectories": _dump(trajectories)}


async def select(state: ReviseState, runtime: Runtime[Deps]) -> dict[str, Any]:
    """Confidence-aware decoding over the trajectories' final answers (or the configured baseline rule)."""
    deps = runtime.context
    ctx, rule = deps.ctx, deps.options.selection
    trajectories = _load(state)
    index, groups = select_index(trajectories, rule)
    chosen = trajectories[index]
    node = await asyncio.to_thread(
        ctx.store.add_node,
        Node(
            run_id=ctx.run.id,
            task_id=deps.task.id,
            parent_id=chosen.attempt_ids[-1],
            depth=2 * chosen.rounds,
            role="select",
            code=chosen.codes[-1],
            score=1.0 if chosen.passed[-1] else 0.0,
            metadata={
                "selection": rule,
                "trajectory": index,
                "groups": groups,
                "confidences": [t.confidence for t in trajectories],
                "refinements": [t.rounds - 1 for t in trajectories],
                "selected_attempt_id": chosen.attempt_ids[-1],
            },
        ),
    )
    return {"selected": index, "selected_node_id": node.id}


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[ReviseState, Deps]:
    """answer -> verify -> (refine -> verify)* -> select; run it with `run_graph(graph, state, deps)`."""
    graph = StateGraph(ReviseState, context_schema=Deps)
    graph.add_node("answer", answer)
    graph.add_node("verify", verify)
    graph.add_node("refine", refine)
    graph.add_node("select", select)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", "verify")
    graph.add_conditional_edges("verify", route, ["refine", "select"])
    graph.add_edge("refine", "verify")
    graph.add_edge("select", END)
    return graph.compile(checkpointer=checkpointer)


async def solve(
    task: Task, ctx: AgentContext, options: ReviseOptions, checkpointer: BaseCheckpointSaver[str] | None = None
) -> Attempt:
    """Run the graph for one task (resuming its checkpoint if one is unfinished) and store the Attempt."""
    started = time.perf_counter()
    backend = verifying_backend(ctx.backend)
    graph = build_graph(checkpointer)
    deps = Deps(ctx=ctx, task=task, options=options)
    initial: ReviseState = {"prefix": backend.render_chat(prompts.task_messages(task))}
    final = await run_graph(graph, initial, deps, thread=thread_id(ctx.run.id, task.id), recursion_limit=64)
    trajectories = _load(final)
    chosen = trajectories[int(final["selected"])]
    return await finish_attempt(
        ctx,
        task,
        passed=chosen.passed[-1],
        started=started,
        best_node_id=chosen.attempt_ids[-1],
        score=1.0 if chosen.passed[-1] else 0.0,
        tokens=sum(t.tokens for t in trajectories),
    )
