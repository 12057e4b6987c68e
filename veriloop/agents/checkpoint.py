"""LangGraph checkpoints in the store's own database, so an interrupted graph resumes by thread id.

SQLite stores use LangGraph's SQLite saver on the same file; PostgreSQL stores use its
PostgreSQL saver on the same database (tables `checkpoints`, `checkpoint_writes`, ...; they
are LangGraph's own and created by its `setup()`, outside our Alembic revisions).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy.engine import make_url

from veriloop.config import Settings
from veriloop.errors import ConfigError


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
