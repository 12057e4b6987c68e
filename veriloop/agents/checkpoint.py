"""LangGraph checkpoints in the store's own database, so an interrupted graph resumes by thread id.

SQLite stores use LangGraph's SQLite saver on the same file; PostgreSQL stores use its
PostgreSQL saver on the same database (tables `checkpoints`, `checkpoint_writes`, ...; they
are LangGraph's own and created by its `setup()`, outside our Alembic revisions).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from pydantic import Field
from sqlalchemy.engine import make_url

from veriloop.agents.base import Agent, AgentOptions, OnAttempt
from veriloop.agents.context import AgentContext
from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Attempt, Task


def thread_id(run_id: str, task_id: str, *parts: str) -> str:
    """The checkpoint thread of one task of one run (plus, optionally, a sub-search within it)."""
    return ":".join((run_id, task_id, *parts))


@asynccontextmanager
async def open_checkpointer(settings: Settings) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """A ready-to-use async saver for the configured store database."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = url.database or ":memory:"
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            await saver.setup()
            yield saver
    elif url.get_backend_name() == "postgresql":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
        async with AsyncPostgresSaver.from_conn_string(plain) as saver:
            await saver.setup()
            yield saver
    else:
        raise ConfigError(f"no LangGraph saver for database {url.get_backend_name()!r} (use sqlite or postgresql)")


class CheckpointedOptions(AgentOptions):
    """Options of an agent whose graph state is checkpointed."""

    checkpoint: bool = Field(True, description="Checkpoint the graph in the store's database (resume by thread id).")


CheckpointedOptionsT = TypeVar("CheckpointedOptionsT", bound=CheckpointedOptions)


class CheckpointedAgent(Agent[CheckpointedOptionsT]):
    """An agent whose per-task graphs checkpoint into the store: one saver for a whole suite, one per lone task."""

    def __init__(self, options: CheckpointedOptionsT | None = None) -> None:
        super().__init__(options)
        self._suite_saver: BaseCheckpointSaver[str] | None = None

    @asynccontextmanager
    async def checkpointer(self, ctx: AgentContext) -> AsyncIterator[BaseCheckpointSaver[str] | None]:
        """The saver a task's graph should compile with (None when checkpointing is off)."""
        if not self.options.checkpoint:
            yield None
        elif self._suite_saver is not None:
            yield self._suite_saver
        else:
            async with open_checkpointer(ctx.settings) as saver:
                yield saver

    async def run_suite(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """The default concurrent loop, sharing one saver (one database connection) across its tasks."""
        if not self.options.checkpoint:
            return await super().run_suite(tasks, ctx, on_attempt)
        async with open_checkpointer(ctx.settings) as saver:
            self._suite_saver = saver
            try:
                return await super().run_suite(tasks, ctx, on_attempt)
            finally:
                self._suite_saver = None
