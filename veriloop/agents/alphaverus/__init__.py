"""AlphaVerus: self-improving translation with Treefinement and anti-hacking filters (ICML 2025).

agent = AlphaVerusAgent(AlphaVerusOptions(iterations=2, width=8, depth=2))
attempts = await agent.run_suite(tasks, ctx)     # translate / hints tasks: the self-improving loop
attempt = await agent.solve(task, ctx)           # any task: inference, Treefinement from its prompt
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

from veriloop.agents.alphaverus.filters import edits_spec
from veriloop.agents.alphaverus.graph import Deps, build_graph, search_id, task_mode
from veriloop.agents.alphaverus.hints import DAFNY, HintLanguage, HintsProblem, render_hints
from veriloop.agents.alphaverus.houdini import prune, union
from veriloop.agents.alphaverus.nagini_hints import NAGINI
from veriloop.agents.alphaverus.pools import ERRORS, SOLVED, Pools
from veriloop.agents.alphaverus.problem import VerifierProblem, program_text
from veriloop.agents.alphaverus.prompts import LANGUAGE, explore_messages, fenced, render_errors
from veriloop.agents.alphaverus.state import AlphaVerusOptions, SuiteState
from veriloop.agents.base import Agent, OnAttempt, notify
from veriloop.agents.common import make_verifier, run_graph
from veriloop.agents.context import AgentContext
from veriloop.errors import ConfigError
from veriloop.llm.codeblocks import CLOSING_FENCE
from veriloop.records import Attempt, Message, Node, Task
from veriloop.search.budget import Budget, Spend
from veriloop.search.engine import SearchConfig, SearchOutcome, run_search
from veriloop.search.score import scorer_for

__all__ = ["AlphaVerusAgent", "AlphaVerusOptions", "make_verifier", "target_of"]


def target_of(task: Task, options: AlphaVerusOptions) -> str:
    """The verifier that judges this task: the option, else the suite's, else `tests` for tested tasks."""
    if options.target is not None:
        return options.target
    named = task.metadata.get("verifier")
    if isinstance(named, str):
        return named
    if task.tests:
        return "tests"
    raise ConfigError(f"task {task.id} names no verifier: pass --target")


INFERENCE = (
    "Complete the following {language} program. Keep every signature, requires and ensures clause as given, and "
    "reply with the whole program in one code block.\n\n{program}"
)


def inference_messages(
    task: Task, target: str, solved: Sequence[dict[str, Any]], errors: Sequence[dict[str, Any]] = ()
) -> list[Message]:
    """Inference prompt: solved pairs as few-shot turns, then the spec prefix to complete; error triplets join the
    system prompt (the original's inference), so every refinement turn sees them."""
    if target == "tests":
        from veriloop.agents.direct import prompt_messages

        return prompt_messages(task)
    if task_mode(task) == "hints":
        messages = explore_messages(task.prompt, "dafny", target, "hints", solved)
    else:
        messages = []
        for pair in solved:
            messages.append(
                Message(
                    role="user",
                    content=INFERENCE.format(language=LANGUAGE[target], program=fenced(pair["source"], target)),
                )
            )
            messages.append(Message(role="assistant", content=fenced(pair["target"], target)))
        messages.append(
            Message(
                role="user", content=INFERENCE.format(language=LANGUAGE[target], program=fenced(task.prompt, target))
            )
        )
    if not errors:
        return messages
    if messages[0].role == "system":
        system = Message(role="system", content=f"{messages[0].content}\n\n{render_errors(errors, target)}")
        return [system, *messages[1:]]
    return [Message(role="system", content=render_errors(errors, target)), *messages]


HINT_LANGUAGES: dict[str, HintLanguage] = {"dafny": DAFNY, "nagini": NAGINI}
"""Targets with a hints infill (Verus has none yet)."""


def uses_hints(task: Task, target: str, options: AlphaVerusOptions) -> bool:
    """Hints infill for a hints task whose target has a hint language and that has at least one loop to annotate
    (else the whole program)."""
    language = HINT_LANGUAGES.get(target)
    return (
        options.infill == "hints"
        and language is not None
        and task_mode(task) == "hints"
        and bool(language.slots(task.prompt))
    )


def spec_edited(triplet: dict[str, Any], target: str) -> bool:
    return edits_spec(str(triplet["bad"]), str(triplet["good"]), target)


def inference_program(task: Task, target: str, reply: str) -> str:
    """A reply's program; a bare body is re-attached to the task's prefix (the original's `strip_body`)."""
    if target == "tests":
        from veriloop.agents.direct import program_from_reply

        return program_from_reply(task, reply)
    code = program_text(reply, target)
    head = task.prompt.strip().splitlines()[0] if task.prompt.strip() else ""
    return code if head and head.strip() in code else task.prompt + "\n" + code


class AlphaVerusAgent(Agent[AlphaVerusOptions]):
    """Exploration, Treefinement, filters and growing exemplar pools; inference mode for plain tasks."""

    name = "alphaverus"
    Options = AlphaVerusOptions

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        """Inference: Treefinement (or the chosen search) from the task's prompt, with the solved pool as few-shot
        and the error triplets whose fix left the spec alone as the system prompt. A hints task shows the solved
        pool's verified hint sets as worked examples, and its own verified hint set joins the pool (`grow_pools`):
        AlphaVerus's self-improvement on the infill."""
        o = self.options
        target = target_of(task, o)
        started = time.perf_counter()
        verifier = make_verifier(target, ctx)
        try:
            pools = Pools(ctx.store, target, ctx.run.id)
            rng = random.Random(f"{o.seed}:inference:{task.id}")
            hinted = uses_hints(task, target, o)
            keep = has_hints if hinted else None
            solved = await asyncio.to_thread(pools.sample, SOLVED, 1 << 30, o.few_shot, rng, task.id, keep)
            errors = (
                []
                if target == "tests" or hinted
                else await asyncio.to_thread(
                    pools.sample, ERRORS, 1 << 30, o.few_shot, rng, task.id, lambda item: not spec_edited(item, target)
                )
            )
            problem: VerifierProblem
            if hinted:
                problem = HintsProblem(
                    task,
                    verifier,
                    scorer_for(target),
                    [],
                    target=target,
                    program_text=task.prompt,
                    language=HINT_LANGUAGES[target],
                    exemplars=[(str(item["source"]), str(item[HINTS_KEY])) for item in solved],
                )
            else:
                problem = VerifierProblem(
                    task,
                    verifier,
                    scorer_for(target),
                    inference_messages(task, target, solved, errors),
                    target=target,
                    history=o.history,
                    program=lambda reply: inference_program(task, target, reply),
                )
            config = SearchConfig(
                kind=o.search,
                width=o.width,
                depth=o.depth,
                temperature=o.temperature,
                node_temperature=o.node_temperature,
                max_tokens=o.max_tokens,
                stop=() if hinted else (CLOSING_FENCE,),
                seed=o.seed,
                verify_concurrency=o.verify_concurrency,
                budget=Budget(llm_calls=o.width * o.depth, verifier_s=o.verifier_seconds),
                constraint=problem.constraint if isinstance(problem, HintsProblem) else None,
            )
            outcome = await run_search(
                problem,
                ctx.backend,
                ctx.store,
                run_id=ctx.run.id,
                task_id=task.id,
                config=config,
                search_id=search_id(ctx.run.id, task.id, "inference"),
                metadata={
                    "phase": "inference",
                    "few_shot": len(solved),
                    "error_exemplars": len(errors),
                    "infill": "hints" if hinted else "whole",
                },
            )
            if isinstance(problem, HintsProblem) and o.prune_steps and not outcome.solved:
                outcome = await prune_outcome(problem, outcome, ctx, task.id, o)
            if isinstance(problem, HintsProblem) and o.grow_pools and outcome.solved and outcome.best is not None:
                pair = solved_hints(problem, outcome.best)
                await asyncio.to_thread(pools.add, SOLVED, 0, task.id, [pair])
        finally:
            if target != "tests":
                await verifier.aclose()
        return await asyncio.to_thread(ctx.store.add_attempt, attempt_of(ctx, task.id, outcome, started))

    async def run_suite(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        o = self.options
        looped = [t for t in tasks if o.mode == "translate" or (o.mode == "auto" and task_mode(t) != "inference")]
        plain = [task for task in tasks if task not in looped]
        attempts = await super().run_suite(plain, ctx, on_attempt) if plain else []
        if looped:
            attempts += await self.run_loop(looped, ctx, on_attempt)
        return attempts

    async def run_loop(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """The self-improving loop over `tasks` (one target language), checkpointed in the store's database."""
        from veriloop.agents.checkpoint import open_checkpointer, thread_id

        o = self.options
        targets = {target_of(task, o) for task in tasks}
        if len(targets) != 1:
            raise ConfigError(f"one target per run, got {sorted(targets)}")
        target = targets.pop()
        if target == "tests":
            raise ConfigError("the translation loop needs a formal target: dafny, nagini or verus")
        started = time.perf_counter()
        async with AsyncExitStack() as stack:
            verifier = make_verifier(target, ctx)
            bare = make_verifier(target, ctx, guard=False)
            stack.push_async_callback(verifier.aclose)
            stack.push_async_callback(bare.aclose)
            deps = Deps(
                ctx=ctx,
                options=o,
                tasks={task.id: task for task in tasks},
                target=target,
                verifier=verifier,
                bare=bare,
                pools=Pools(ctx.store, target, ctx.run.id),
            )
            saver = await stack.enter_async_context(open_checkpointer(ctx.settings))
            initial: SuiteState = {"iteration": 0, "iterations": o.iterations, "task_ids": [t.id for t in tasks]}
            final = await run_graph(
                build_graph(saver),
                initial,
                deps,
                thread=thread_id(ctx.run.id, "alphaverus"),
                recursion_limit=6 * o.iterations + 10,
                max_concurrency=o.concurrency,
            )
        state: SuiteState = final  # type: ignore[assignment]
        attempts = []
        for task in tasks:
            attempt = loop_attempt(ctx, task.id, state, time.perf_counter() - started)
            attempts.append(await asyncio.to_thread(ctx.store.add_attempt, attempt))
            await notify(on_attempt, attempts[-1])
        return attempts


HINTS_KEY = "hints"
"""A solved-pool pair from hints infill carries its hint blocks under this key (the whole program is `target`)."""


def has_hints(pair: dict[str, Any]) -> bool:
    """A solved pair a hints prompt can show: one from hints infill (the loop's whole programs have no blocks)."""
    return HINTS_KEY in pair


def solved_hints(problem: HintsProblem, node: Node) -> dict[str, Any]:
    """A verified hints node as a solved-pool pair: the program without hints, the verified program, and the hint
    blocks that made it verify (a search node's reply, or a pruning step's surviving hints)."""
    pruned = node.metadata.get("hints")
    if isinstance(pruned, dict):
        hints = {int(slot): [str(line) for line in lines] for slot, lines in pruned.items()}
    else:
        hints = problem.hints(node.completion.text if node.completion is not None else "")
    return {
        "source": problem.base,
        "target": node.code or "",
        "mode": "hints",
        HINTS_KEY: render_hints(hints, problem.language),
    }


async def prune_outcome(
    problem: HintsProblem, outcome: SearchOutcome, ctx: AgentContext, task_id: str, o: AlphaVerusOptions
) -> SearchOutcome:
    """The search's outcome after Houdini pruning of its hint candidates (the union of every sample's hints):
    pruning nodes hang under the search's best node; a verified last step solves the task."""
    sampled = [node for node in outcome.nodes if node.completion is not None]
    if not sampled or outcome.best is None:
        return outcome
    replies = [node.completion.text for node in sampled if node.completion is not None]
    pool = union(replies, len(problem.slots), language=problem.language, parse=problem.hints)
    left = None if o.verifier_seconds is None else max(0.0, o.verifier_seconds - outcome.spend.verifier_s)
    pruning = await prune(
        problem,
        pool,
        outcome.best,
        ctx.store,
        search_id=search_id(ctx.run.id, task_id, "inference", "prune"),
        sources=[node.id for node in sampled],
        max_steps=o.prune_steps,
        seconds=left,
    )
    spend = Spend.from_dict(outcome.spend.as_dict())
    spend.add(pruning.spend)
    nodes = [*outcome.nodes, *pruning.nodes]
    if pruning.solved:
        return replace(
            outcome,
            best=pruning.nodes[-1],
            solved=True,
            spend=spend,
            calls_to_success=spend.llm_calls,
            stop_reason="pruned",
            nodes=nodes,
        )
    best = max([outcome.best, *pruning.nodes], key=lambda node: node.score or -1.0)
    return replace(outcome, best=best, spend=spend, nodes=nodes)


def attempt_of(ctx: AgentContext, task_id: str, outcome: SearchOutcome, started: float) -> Attempt:
    best = outcome.best
    return Attempt(
        run_id=ctx.run.id,
        task_id=task_id,
        status="passed" if outcome.solved else "failed",
        best_node_id=best.id if best is not None else None,
        score=best.score if best is not None else None,
        tokens=outcome.spend.tokens,
        seconds=time.perf_counter() - started,
        budget={**outcome.spend.as_dict(), "calls_to_success": outcome.calls_to_success or 0},
    )


def loop_attempt(ctx: AgentContext, task_id: str, state: SuiteState, seconds: float) -> Attempt:
    accepted = state.get("accepted", {}).get(task_id)
    best = accepted or state.get("best", {}).get(task_id)
    score = None
    if best is not None:
        score = 1.0 if accepted else ctx.store.get_node(best).score
    spend = Spend.from_dict(state.get("spend", {}).get(task_id, {}))
    return Attempt(
        run_id=ctx.run.id,
        task_id=task_id,
        status="passed" if accepted else "failed",
        best_node_id=best,
        score=score,
        tokens=spend.tokens,
        seconds=seconds,
        budget=spend.as_dict(),
    )
