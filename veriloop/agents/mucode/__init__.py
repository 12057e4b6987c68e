"""μCode (Jain et al., ICML 2025): multi-turn code generation through single-step rewards.

Inference is multi-turn best-of-N with execution feedback (`graph.py`); training is the paper's
Algorithm 1, expert iteration with a learned verifier (`training.py`):

    for i = 1..M:
        rollout the generator in the multi-turn env         -> D_i;  D <- D u D_i
        train the verifier R_i on D                          (Bradley-Terry on problem + code)
        expert(x) = argmax over D(x) of 100 * oracle + R_i   (local-search expert)
        relabel D with the expert, fine-tune the generator   (every state targets the expert's code)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from veriloop.agents.base import Agent, OnAttempt
from veriloop.agents.common import finish_attempt
from veriloop.agents.context import AgentContext
from veriloop.agents.mucode.graph import Deps, Scorer, ThreadedVerifier, episode
from veriloop.agents.mucode.state import MuCodeOptions, MuCodeState
from veriloop.records import Attempt, Task

__all__ = ["MuCodeAgent", "MuCodeOptions", "attempt_of", "episode"]


async def attempt_of(task: Task, state: MuCodeState, ctx: AgentContext, started: float) -> Attempt:
    """The stored Attempt of an episode: passed iff the final check (public + private tests) passed."""
    final = state.get("final")
    passed = final is not None and final.passed
    return await finish_attempt(
        ctx,
        task,
        passed=passed,
        started=started,
        best_node_id=state.get("final_node_id"),
        score=1.0 if passed else 0.0,
        tokens=state.get("tokens", 0),
    )


class MuCodeAgent(Agent[MuCodeOptions]):
    """Multi-turn best-of-N with public-test feedback; `train=True` runs expert iteration instead."""

    name = "mucode"
    Options = MuCodeOptions

    def __init__(self, options: MuCodeOptions | None = None) -> None:
        super().__init__(options)
        self._verifier: Scorer | None = None

    def verifier(self, ctx: AgentContext) -> Scorer | None:
        """The learned verifier named by `verifier_model`, loaded once per agent."""
        if self._verifier is None and self.options.verifier_model:
            from veriloop.training.verifier import LearnedVerifier

            self._verifier = ThreadedVerifier(LearnedVerifier.load(self.options.verifier_model, ctx.settings))
        return self._verifier

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        started = time.perf_counter()
        state = await episode(task, Deps(ctx=ctx, options=self.options, verifier=self.verifier(ctx)))
        return await attempt_of(task, state, ctx, started)

    async def run_suite(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        if self.options.train:  # the runner calls `train` itself; this keeps direct callers' behaviour
            return await self.train(tasks, ctx, on_attempt)
        return await super().run_suite(tasks, ctx, on_attempt)

    async def train(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """Algorithm 1 (expert iteration) on the tasks instead of solving them; one Attempt per task."""
        from veriloop.agents.mucode.training import expert_iteration

        result: list[Attempt] = await expert_iteration(self.options, tasks, ctx, on_attempt)
        return result

    def describe(self) -> dict[str, Any]:
        return self.options.model_dump(mode="json")
