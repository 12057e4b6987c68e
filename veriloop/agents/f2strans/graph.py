"""F2STrans's translate-test-repair episode as a LangGraph graph.

    translate -> the model translates the source function (first turn: `samples` candidates; later
                 turns: one repair of the best candidate so far, with its test feedback)
    check     -> every candidate fills the target test program's slot and runs in the sandbox; its
                 style (similarity to the human reference + linter findings) is scored; each is
                 stored as a Node (score = share of tests passed, metadata["style"]), passing ones
                 also as `translation` exemplars
    passed, or turn == turns?  -> END
    otherwise                  -> translate (repair)

The functional and style training data (`f2strans.data`) are built from these nodes afterwards.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from veriloop.agents.checkpoint import thread_id
from veriloop.agents.common import answer_constraint, finish_attempt, run_graph, share_passed, store_nodes
from veriloop.agents.context import AgentContext
from veriloop.agents.f2strans import prompts
from veriloop.agents.f2strans.state import F2STransOptions, TranslationState
from veriloop.agents.f2strans.style import style_score
from veriloop.records import (
    STEP_KEY,
    Attempt,
    Completion,
    ExecResult,
    ExecStatus,
    Exemplar,
    Message,
    Node,
    SamplingParams,
    Task,
)
from veriloop.sandbox import default_limits
from veriloop.sandbox.languages import harness_job
from veriloop.tasks.transcoder import Translation, fill_slot, translation


@dataclass
class Deps:
    """What the nodes use: the run's machinery, the options and this task's translation direction."""

    ctx: AgentContext
    options: F2STransOptions
    task: Task
    item: Translation


def rank(node: Node) -> tuple[bool, float, float]:
    """Best first: passing, then share of tests, then style."""
    style = float(node.metadata.get("style", {}).get("score") or 0.0)
    passed = node.exec_result is not None and node.exec_result.passed
    return passed, float(node.score or 0.0), style


def initial_state(task: Task, item: Translation) -> TranslationState:
    first = prompts.translate_messages(item.source_language, item.target_language, item.source, item.source_name)
    return TranslationState(
        task_id=task.id,
        turn=0,
        messages=[m.model_dump() for m in first],
        pending=[],
        parent_id=None,
        node_ids=[],
        best_node_id=None,
        passed=False,
        tokens=0,
    )


def sampling(options: F2STransOptions, turn: int, task: Task, name: str) -> SamplingParams:
    """First turn: `samples` draws (sampled when there is more than one); repairs: one greedy reply. With
    `structured`, every reply is one block fenced in the target language, holding `def <name>(` for a Python
    target (`name`: the function name the prompt asks to keep)."""
    fence = prompts.FENCE.get(options.target, options.target)
    constraint = answer_constraint(task, fence, options.structured, name=name)
    if turn == 0 and options.samples > 1:
        temperature = options.temperature or 0.8
        return SamplingParams(
            n=options.samples,
            temperature=temperature,
            max_tokens=options.max_tokens,
            stop=prompts.STOP,
            seed=options.seed,
            constraint=constraint,
        )
    temperature = options.temperature if turn == 0 else 0.0
    return SamplingParams(
        n=1,
        temperature=temperature,
        max_tokens=options.max_tokens,
        stop=prompts.STOP,
        seed=options.seed,
        constraint=constraint,
    )


async def translate(state: TranslationState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps = runtime.context
    messages = [Message.model_validate(m) for m in state["messages"]]
    [completions] = await deps.ctx.backend.generate(
        [messages], sampling(deps.options, state["turn"], deps.task, prompts.kept_name(deps.item.source_name))
    )
    return {"pending": [completion.model_dump(mode="json") for completion in completions]}


async def evaluate(deps: Deps, code: str) -> ExecResult:
    """The candidate in the target test program's slot, compiled and run in the sandbox."""
    program = fill_slot(code, deps.item)
    job = harness_job(
        deps.item.target_language,
        deps.ctx.sandbox.toolchain,
        program,
        deps.item.tests,
        limits=default_limits(deps.ctx.settings),
    )
    return await deps.ctx.sandbox.run(job)


async def check(state: TranslationState, runtime: Runtime[Deps]) -> dict[str, Any]:
    deps, turn = runtime.context, state["turn"]
    item = deps.item
    completions = [Completion.model_validate(c) for c in state["pending"]]
    codes = [prompts.reply_code(c.text, item.target_language) for c in completions]
    results = await asyncio.gather(*[evaluate(deps, code) for code in codes])
    styles = await asyncio.gather(
        *[
            asyncio.to_thread(style_score, code, item.reference, item.target_language, use_linter=deps.options.linter)
            for code in codes
        ]
    )
    messages = [Message.model_validate(m) for m in state["messages"]]
    nodes = [
        Node(
            run_id=deps.ctx.run.id,
            task_id=deps.task.id,
            parent_id=state.get("parent_id"),
            depth=turn,
            role="translate" if turn == 0 else "repair",
            messages=messages,
            completion=completion,
            code=code,
            exec_result=result,
            score=share_passed(result),
            metadata={
                "source_language": item.source_language,
                "target_language": item.target_language,
                STEP_KEY: turn,
                "style": style.as_dict(),
            },
        )
        for completion, code, result, style in zip(completions, codes, results, styles, strict=True)
    ]
    store = deps.ctx.store  # synchronous: called on a thread so the loop can finish the saver's transactions
    await store_nodes(deps.ctx, nodes)
    passing = [node for node in nodes if node.exec_result is not None and node.exec_result.passed]
    if passing:
        await asyncio.to_thread(
            store.add_exemplars,
            [
                Exemplar(
                    kind="translation",
                    language=item.target_language,
                    run_id=deps.ctx.run.id,
                    task_id=deps.task.id,
                    payload={
                        "source_language": item.source_language,
                        "source": item.source,
                        "target_language": item.target_language,
                        "target": node.code,
                        "node_id": node.id,
                        "style": node.metadata["style"]["score"],
                    },
                )
                for node in passing
            ],
        )
    best = max(nodes, key=rank)
    best_so_far = state.get("best_node_id")
    previous = await asyncio.to_thread(store.get_node, best_so_far) if best_so_far else None
    overall = best if previous is None or rank(best) >= rank(previous) else previous
    assert best.completion is not None and best.exec_result is not None
    follow_up = [
        *messages,
        Message(role="assistant", content=best.completion.text),
        prompts.repair_message(item.target_language, best.exec_result),
    ]
    return {
        "turn": turn + 1,
        "pending": [],
        "parent_id": best.id,
        "node_ids": [*state.get("node_ids", []), *(node.id for node in nodes)],
        "best_node_id": overall.id,
        "passed": bool(state.get("passed")) or bool(passing),
        "tokens": state.get("tokens", 0) + sum(c.usage.total_tokens for c in completions),
        "messages": [m.model_dump() for m in follow_up],
    }


def after_check(state: TranslationState, runtime: Runtime[Deps]) -> Literal["translate", "__end__"]:
    if state.get("passed") or state["turn"] >= runtime.context.options.turns:
        return "__end__"
    return "translate"


def build_graph(checkpointer: BaseCheckpointSaver[str] | None = None) -> CompiledStateGraph[TranslationState, Deps]:
    """translate -> check -> (END | translate); run it with `run_graph(graph, state, deps)`."""
    graph = StateGraph(TranslationState, context_schema=Deps)
    graph.add_node("translate", translate)
    graph.add_node("check", check)
    graph.add_edge(START, "translate")
    graph.add_edge("translate", "check")
    graph.add_conditional_edges("check", after_check, ["translate", END])
    return graph.compile(checkpointer=checkpointer)


async def run_episode(
    task: Task, ctx: AgentContext, options: F2STransOptions, checkpointer: BaseCheckpointSaver[str] | None = None
) -> Attempt:
    """Translate one task (resuming its unfinished checkpoint, if any) and store its Attempt."""
    started = time.perf_counter()
    item = translation(task, options.source, options.target)
    deps = Deps(ctx=ctx, options=options, task=task, item=item)
    thread = thread_id(ctx.run.id, task.id, "f2strans")
    final = await run_graph(build_graph(checkpointer), initial_state(task, item), deps, thread=thread)
    best_id = final.get("best_node_id")
    best = await asyncio.to_thread(ctx.store.get_node, best_id) if best_id else None
    passed = best is not None and best.exec_result is not None and best.exec_result.status is ExecStatus.PASSED
    return await finish_attempt(
        ctx,
        task,
        passed=passed,
        started=started,
        best_node_id=best.id if best is not None else None,
        score=best.score if best is not None else 0.0,
        tokens=int(final.get("tokens", 0)),
    )
