"""Alembic environment: uses the connection `veriloop.store.migrate` hands over, or a URL for developers."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection
from sqlalchemy.types import TypeDecorator

from veriloop.store.engine import ENGINES, parse_url
from veriloop.store.models import Base
from veriloop.store.types import SafeText, UTCDateTime

config = context.config


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Render our column types as their plain SQL types, so revisions do not import application code."""
    if type_ == "type" and isinstance(obj, TypeDecorator):
        if isinstance(obj, SafeText):
            return "sa.Text()"
        if isinstance(obj, UTCDateTime):
            return "sa.DateTime(timezone=True)"
    return False


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
        render_item=render_item,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    # Developer use through the `alembic` command: -x url=..., else the configured database.
    url = context.get_x_argument(as_dictionary=True).get("url")
    if url is None:
        from veriloop.config import load_settings

        url = load_settings().database_url
    parsed = parse_url(url)
    engine = ENGINES.acquire(parsed, 30000)
    try:
        with engine.connect() as connection:
            run(connection)
            connection.commit()
    finally:
        ENGINES.release(engine)


main()
