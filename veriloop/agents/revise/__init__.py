"""ReVISE: the model answers, verifies itself with a decision token, and refines on `[refine]`.

`ReviseAgent` runs the graph in `graph.py` per task; `curriculum.py` builds the two-stage
preference data (verify, then correct) from stored runs and trains it.
"""

from __future__ import annotations

from collections.abc import Sequence

from veriloop.agents.base import OnAttempt
from veriloop.agents.checkpoint import CheckpointedAgent
from veriloop.agents.context import AgentContext
from veriloop.agents.revise.graph import solve
from veriloop.agents.revise.state import ReviseOptions
from veriloop.config import Settings
from veriloop.records import Attempt, Task

__all__ = ["ReviseAgent", "ReviseOptions"]


class ReviseAgent(CheckpointedAgent[ReviseOptions]):
    """K self-verifying trajectories per task, answered by confidence-aware decoding."""

    name = "revise"
    Options = ReviseOptions

    @classmethod
    def prepare(cls, settings: Settings) -> Settings:
        """An embedded model without `[eos]`/`[refine]` is swapped for a prepared copy (made once, registered)."""
        from veriloop.agents.revise.curriculum import ensure_decision_tokens

        return ensure_decision_tokens(settings)

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        async with self.checkpointer(ctx) as saver:
            return await solve(task, ctx, self.options, saver)

    async def train(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """Sample the tasks, then the two-stage curriculum on every trajectory the run stored."""
        from veriloop.agents.revise.curriculum import train_on_run

        return await self.solve_then_train(tasks, ctx, on_attempt, train_on_run)
