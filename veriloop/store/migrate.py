"""Alembic, run from code: the migrations ship inside the package, so an installed veriloop can upgrade itself.

Policy (`store.create_new_sqlite`, on by default): a brand-new SQLite database (no file yet, or a
file without any table) is created and migrated on first use, for convenience. Anything else
that is not at the code's head revision is refused with `DatabaseNotMigratedError` until
`veriloop db upgrade` runs: an existing SQLite file at an older revision, or any PostgreSQL
database, empty or not (a shared server is migrated by its operator, e.g. the Compose service).

Upgrades take a lock first (`BEGIN IMMEDIATE` on SQLite, an advisory lock on PostgreSQL), so
several processes starting at once migrate the database exactly once. Opening and migrating are
retried whole when SQLite answers "database is locked" without waiting (it does so, for one, while
another process switches a brand-new file to WAL mode).

New revision (developers): `alembic -c veriloop/store/migrations/alembic.ini revision --autogenerate -m MSG`
against a database at head (`-x url=sqlite:///tmp/x.db`, default: the settings' database).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from veriloop.errors import DatabaseNotMigratedError, StoreError
from veriloop.store.engine import (
    ENGINES,
    MAX_RETRIES,
    WRITE_OPTION,
    display_url,
    is_retryable,
    parse_url,
    retry_delay,
    short_error,
    sqlite_file,
)

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
ADVISORY_LOCK_KEY = 0x76657269  # "veri": serialises concurrent upgrades on one PostgreSQL database


def alembic_config() -> Config:
    """An Alembic Config built in code (no alembic.ini needed), pointing at the packaged scripts."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    return config


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The revision this code needs."""
    head = _script().get_current_head()
    if head is None:
        raise StoreError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def known_revision(revision: str) -> bool:
    try:
        return _script().get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(connection: Connection) -> str | None:
    """The revision stamped in the database, or None when it has never been migrated."""
    return MigrationContext.configure(connection).get_current_revision()


@dataclass(frozen=True)
class RevisionState:
    url: str
    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def _retrying_locks(work: Callable[[], T]) -> T:
    """Run `work` again, after a jittered pause, while the database reports a lock conflict."""
    attempt = 0
    while True:
        try:
            return work()
        except DBAPIError as exc:
            if attempt >= MAX_RETRIES or not is_retryable(exc):
                raise
            time.sleep(retry_delay(attempt))
            attempt += 1


def _read_current(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return current_revision(connection)


def revision_state(engine: Engine, url: URL) -> RevisionState:
    try:
        current = _retrying_locks(lambda: _read_current(engine))
    except DBAPIError as exc:
        raise StoreError(f"cannot open database at {display_url(url)}: {short_error(exc)}") from None
    return RevisionState(url=display_url(url), current=current, head=head_revision())


def _is_blank(connection: Connection) -> bool:
    return not inspect(connection).get_table_names()


def upgrade(engine: Engine, url: URL, revision: str = "head") -> tuple[str | None, str]:
    """Migrate to `revision` under a lock; returns (revision before, revision after)."""

    def migrate() -> tuple[str | None, str | None]:
        with engine.execution_options(**{WRITE_OPTION: True}).connect() as connection, connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            before = current_revision(connection)
            if before is not None and not known_revision(before):
                raise _newer_than_code(url, before)
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            return before, current_revision(connection)

    try:
        before, after = _retrying_locks(migrate)
    except DBAPIError as exc:
        raise StoreError(f"cannot migrate database at {display_url(url)}: {short_error(exc)}") from None
    return before, after or "base"


def _newer_than_code(url: URL, revision: str) -> StoreError:
    return StoreError(
        f"database at {display_url(url)} is at revision {revision}, which this veriloop does not know "
        f"(it needs {head_revision()}); upgrade veriloop"
    )


def ensure_migrated(engine: Engine, url: URL, *, create_new_sqlite: bool = True) -> None:
    """Refuse a database that is not at head; create a brand-new SQLite one when the policy allows."""
    head = head_revision()

    def inspect_database() -> tuple[str | None, bool]:
        with engine.connect() as connection:
            current = current_revision(connection)
            return current, current is None and _is_blank(connection)

    try:
        current, blank = _retrying_locks(inspect_database)
    except DBAPIError as exc:
        raise StoreError(f"cannot open database at {display_url(url)}: {short_error(exc)}") from None
    if current == head:
        return
    if blank and create_new_sqlite and url.get_backend_name() == "sqlite":
        upgrade(engine, url)
        return
    if current is not None and not known_revision(current):
        raise _newer_than_code(url, current)
    raise DatabaseNotMigratedError(
        f"database at {display_url(url)} is not migrated (at revision {current or 'none'}, code needs {head}); "
        "run `veriloop db upgrade`"
    )


@dataclass(frozen=True)
class UpgradeResult:
    url: str
    before: str | None
    after: str


def upgrade_database(url: str | URL, *, busy_timeout_ms: int = 30000) -> UpgradeResult:
    """`veriloop db upgrade`: migrate the database at `url` to head (creating a SQLite file and its folder)."""
    parsed = parse_url(url)
    engine = ENGINES.acquire(parsed, busy_timeout_ms)
    try:
        before, after = upgrade(engine, parsed)
    finally:
        ENGINES.release(engine)
    return UpgradeResult(url=display_url(parsed), before=before, after=after)


def database_state(url: str | URL, *, busy_timeout_ms: int = 30000) -> RevisionState:
    """`veriloop db current`: the stamped and the needed revision; a missing SQLite file is not created."""
    parsed = parse_url(url)
    path = sqlite_file(parsed)
    if path is not None and not path.exists():
        return RevisionState(url=display_url(parsed), current=None, head=head_revision())
    engine = ENGINES.acquire(parsed, busy_timeout_ms)
    try:
        return revision_state(engine, parsed)
    finally:
        ENGINES.release(engine)
