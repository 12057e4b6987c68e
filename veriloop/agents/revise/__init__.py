"""ReVISE: the model answers, verifies itself with a decision token, and refines on `[refine]`.

`ReviseAgent` runs the graph in `graph.py` per task; `curriculum.py` builds the two-stage
preference data (verify, then correct) from stored runs and trains it.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.base import BaseCheckpointSaver

from veriloop.agents.base import Agent, OnAttempt
from veriloop.agents.checkpoint import open_checkpointer
from veriloop.agents.context import AgentContext
from veriloop.agents.revise.graph import solve
from veriloop.agents.revise.state import ReviseOptions
from veriloop.records import Attempt, Task

__all__ = ["ReviseAgent", "ReviseOptions"]


class ReviseAgent(Agent[ReviseOptions]):
    """K self-verifying trajectories per task, answered by confidence-aware decoding."""

    name = "revise"
    Options = ReviseOptions

    def __init__(self, options: ReviseOptions | None = None) -> None:
        super().__init__(options)
        self._saver: BaseCheckpointSaver[str] | None = None

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        if self.options.checkpoint and self._saver is None:
            async with open_checkpointer(ctx.settings) as saver:
                return await solve(task, ctx, self.options, saver)
        return await solve(task, ctx, self.options, self._saver)

    async def run_suite(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """The default concurrent loop, with one checkpoint saver for the whole suite."""
        if not self.options.checkpoint:
            return await super().run_suite(tasks, ctx, on_attempt)
        async with open_checkpointer(ctx.settings) as saver:
            self._saver = saver
            try:
                return await super().run_suite(tasks, ctx, on_attempt)
            finally:
                self._saver = None
