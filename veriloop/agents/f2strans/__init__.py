"""F2STrans: function-to-style code translation (Zhang et al., ICML 2025).

`F2STransAgent` translates each task of a translation suite in one direction (`source -> target`),
tests the candidate in the target language's test program, and repairs it with the feedback for up
to `turns` turns (`graph.py`); every candidate is stored as a node with its tests and its style
score (`style.py`). `data.py` turns the stored nodes and the suite's references into functional
SFT rows and style preference pairs; `training.py` trains one round, functionality first, then style.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from veriloop.agents.base import OnAttempt
from veriloop.agents.checkpoint import CheckpointedAgent
from veriloop.agents.context import AgentContext
from veriloop.agents.f2strans.graph import run_episode
from veriloop.agents.f2strans.state import F2STransOptions
from veriloop.errors import ConfigError
from veriloop.records import Attempt, Task
from veriloop.tasks.transcoder import has_direction

__all__ = ["F2STransAgent", "F2STransOptions"]


class F2STransAgent(CheckpointedAgent[F2STransOptions]):
    """Translate, compile and test in the target language, repair with the feedback; store every step."""

    name = "f2strans"
    Options = F2STransOptions

    def takes(self, task: Task) -> bool:
        """Only the functions that have both sides of the direction (a run names other tasks explicitly)."""
        return has_direction(task, self.options.source, self.options.target)

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        try:
            async with self.checkpointer(ctx) as saver:
                return await run_episode(task, ctx, self.options, saver)
        except ConfigError as exc:  # the task lacks this direction: recorded, the suite goes on
            failed = Attempt(run_id=ctx.run.id, task_id=task.id, status="error", error=str(exc))
            return await asyncio.to_thread(ctx.store.add_attempt, failed)

    async def train(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """Translate the tasks, then one round on every translation the run stored: functional SFT, style DPO."""
        from veriloop.agents.f2strans.training import train_on_run

        return await self.solve_then_train(tasks, ctx, on_attempt, train_on_run)
