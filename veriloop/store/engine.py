"""Engines: one per database URL per process, short transactions, retries where the database asks for them.

SQLite runs in WAL mode with a busy timeout, and write transactions start with `BEGIN IMMEDIATE`
so that two writers queue on the lock instead of failing on a read-to-write upgrade. A write that
still meets "database is locked" (or, on PostgreSQL, a serialization failure or deadlock) is
retried with jittered back-off; any other database error becomes a one-line `StoreError`.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from veriloop.errors import ConfigError, StoreError

T = TypeVar("T")

WRITE_OPTION = "veriloop_write"
MAX_RETRIES = 12
RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected


def parse_url(url: str | URL) -> URL:
    """A SQLAlchemy URL for SQLite or PostgreSQL (plain `postgresql://` means psycopg 3, which is installed)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        raise ConfigError(f"invalid database URL {url!r}; use sqlite:///PATH or postgresql+psycopg://...") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"unsupported database {parsed.get_backend_name()!r}; use sqlite:///PATH or postgresql+psycopg://..."
        )
    return parsed


def display_url(url: URL) -> str:
    """The URL with its password hidden, for messages."""
    return url.render_as_string(hide_password=True)


def sqlite_file(url: URL) -> Path | None:
    """The file of a SQLite URL, or None for an in-memory database or another backend."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or url.query.get("mode") == "memory":
        return None
    if database.startswith("file:"):
        database = database[len("file:") :].split("?", 1)[0]
    return Path(database)


def _sqlite_engine(url: URL, busy_timeout_ms: int) -> Engine:
    path = sqlite_file(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create folder {path.parent} for the database: {exc.strerror}") from None
    kwargs: dict[str, Any] = {"connect_args": {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}}
    if path is None:
        kwargs["poolclass"] = StaticPool  # one shared in-memory database
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if path is not None:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = 10
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args=connect_args)


class _EngineCache:
    """One engine per (process, URL, busy timeout), shared by every store object and closed with the last one.

    A forked child (a process-pool worker) keeps the engines but not their pooled connections: it
    opens its own, and never closes the parent's sockets.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[tuple[int, str, int], tuple[Engine, int]] = {}
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        pid = os.getpid()
        engines = {}
        for (_, url, timeout), (engine, users) in self._engines.items():
            engine.dispose(close=False)  # drop the parent's connections without touching them
            engines[(pid, url, timeout)] = (engine, users)
        self._engines = engines

    def acquire(self, url: URL, busy_timeout_ms: int) -> Engine:
        key = (os.getpid(), url.render_as_string(hide_password=False), busy_timeout_ms)
        with self._lock:
            if key in self._engines:
                engine, users = self._engines[key]
                self._engines[key] = (engine, users + 1)
                return engine
            if url.get_backend_name() == "sqlite":
                engine = _sqlite_engine(url, busy_timeout_ms)
            else:
                engine = _postgres_engine(url)
            self._engines[key] = (engine, 1)
            return engine

    def release(self, engine: Engine) -> None:
        with self._lock:
            for key, (cached, users) in list(self._engines.items()):
                if cached is engine and key[0] == os.getpid():
                    if users > 1:
                        self._engines[key] = (cached, users - 1)
                    else:
                        del self._engines[key]
                        engine.dispose()
                    return


ENGINES = _EngineCache()


def _sqlstate(exc: DBAPIError) -> str | None:
    code = getattr(exc.orig, "sqlstate", None)
    return code if isinstance(code, str) else None


def is_retryable(exc: DBAPIError) -> bool:
    """A lock or serialization conflict that a fresh transaction can get past."""
    if _sqlstate(exc) in RETRYABLE_SQLSTATES:
        return True
    if isinstance(exc, OperationalError):
        message = str(exc.orig).lower()
        return "database is locked" in message or "database is busy" in message or "database table is locked" in message
    return False


def short_error(exc: BaseException) -> str:
    """The first line of a driver message, without SQLAlchemy's statement dump."""
    source = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(source).strip().splitlines()
    return lines[0] if lines else type(source).__name__


def store_error(url: URL, exc: DBAPIError) -> StoreError:
    if isinstance(exc, IntegrityError):
        return StoreError(f"database at {display_url(url)} refused the write: {short_error(exc)}")
    return StoreError(f"database at {display_url(url)} failed: {short_error(exc)}")


def retry_delay(attempt: int) -> float:
    """Jittered exponential back-off: 10 ms doubling to 1 s."""
    return float(min(1.0, 0.01 * 2**attempt) * (0.5 + random.random()))


def write_engine(engine: Engine) -> Engine:
    """The same engine (and pool) whose transactions take the write lock up front on SQLite."""
    return engine.execution_options(**{WRITE_OPTION: True})


def run_transaction(
    bind: Engine,
    url: URL,
    work: Callable[[Session], T],
    *,
    explain: Callable[[IntegrityError], Exception] | None = None,
) -> T:
    """Run `work` in one short transaction, retrying it whole on lock conflicts.

    `explain` turns a constraint violation into a precise error (a missing run, a duplicate id).
    """
    attempt = 0
    while True:
        try:
            with Session(bind=bind, expire_on_commit=False, autoflush=False) as session, session.begin():
                return work(session)
        except DBAPIError as exc:
            if attempt < MAX_RETRIES and is_retryable(exc):
                time.sleep(retry_delay(attempt))
                attempt += 1
                continue
            if explain is not None and isinstance(exc, IntegrityError):
                raise explain(exc) from None
            raise store_error(url, exc) from None
