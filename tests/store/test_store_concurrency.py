"""Concurrent use: four writer processes lose no rows, locks are waited out, forked workers are safe."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from veriloop.records import Node, Run
from veriloop.store import TrajectoryStore, upgrade_database
from veriloop.store import engine as engine_module
from veriloop.store import migrate as migrate_module

WORKERS = 4
NODES = 1000

WRITER = """
import sys, time
from pathlib import Path
from veriloop.records import Completion, ExecResult, ExecStatus, Message, Node, Run, Task, Usage
from veriloop.store import TrajectoryStore

url, worker, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:  # start together, for the most contention
    time.sleep(0.01)
with TrajectoryStore(url) as store:  # on a brand-new SQLite file, all four race to create it
    store.upsert_tasks([Task(id=f"t{i}", suite="s", prompt=f"p{i}") for i in range(20)])
    run = store.create_run(Run(id=f"run-{worker}", agent="writer", suite="s", model="m"))
    parent = None
    for index in range(count):
        node = Node(
            run_id=run.id,
            task_id=f"t{index % 20}",
            parent_id=parent if index % 10 else None,
            depth=index % 10,
            messages=[Message(role="user", content=f"write {index}")],
            completion=Completion(text=f"code {index}", token_ids=[index, worker], usage=Usage(completion_tokens=2)),
            exec_result=ExecResult(status=ExecStatus.PASSED, stdout=str(index)),
        )
        store.add_node(node)
        parent = node.id
print("done", worker)
"""


def _run_writers(url: str, tmp_path: Path) -> float:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(worker), str(NODES), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in range(WORKERS)
    ]
    time.sleep(1.0)  # let the interpreters import before the start signal
    start = time.perf_counter()
    go.write_text("go")
    failures = []
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            failures.append(err[-2000:])
    assert not failures, failures
    return time.perf_counter() - start


def _check(url: str) -> None:
    with TrajectoryStore(url) as store:
        runs = store.list_runs(agent="writer")
        assert sorted(run.id for run in runs) == [f"run-{worker}" for worker in range(WORKERS)]
        assert store.count_nodes() == WORKERS * NODES
        assert len(store.list_tasks(suite="s")) == 20
        for worker in range(WORKERS):
            summary = store.run_summary(f"run-{worker}")
            assert (summary.nodes, summary.llm_calls, summary.executions) == (NODES, NODES, {"passed": NODES})
            assert summary.tokens.completion == 2 * NODES
            assert max(task.max_depth for task in summary.per_task) == 9


@pytest.mark.slow
def test_concurrent_writers_on_a_new_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'veriloop.db'}"
    _run_writers(url, tmp_path)
    _check(url)


@pytest.mark.slow
@pytest.mark.postgres
def test_concurrent_writers_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    upgrade_database(postgres_url)
    _run_writers(postgres_url, tmp_path)
    _check(postgres_url)


def test_sqlite_write_outlasts_a_lock_held_past_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 20 ms busy timeout, "database is locked" comes back; the store retries until the lock is gone."""
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}"
    upgrade_database(url)
    retries: list[int] = []
    original = engine_module.retry_delay
    monkeypatch.setattr(engine_module, "retry_delay", lambda attempt: retries.append(attempt) or original(attempt))
    with TrajectoryStore(url, busy_timeout_ms=20) as store:
        run = store.create_run(Run(agent="a", suite="s", model="m"))
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        release = threading.Timer(0.4, blocker.rollback)
        release.start()
        try:
            store.add_node(Node(run_id=run.id, task_id="t"))
        finally:
            release.join()
            blocker.close()
        assert store.count_nodes(run.id) == 1
    assert retries, "the write should have met the lock and retried"


def test_opening_a_new_sqlite_file_outlasts_a_lock_held_past_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening and migrating a brand-new file retries "database is locked" too (the CI-seen race on creation)."""
    path = tmp_path / "new.db"
    retries: list[int] = []
    original = migrate_module.retry_delay
    monkeypatch.setattr(migrate_module, "retry_delay", lambda attempt: retries.append(attempt) or original(attempt))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")  # another process is creating the file and holds it whole
    release = threading.Timer(0.4, blocker.rollback)
    release.start()
    try:
        with TrajectoryStore(f"sqlite:///{path}", busy_timeout_ms=20) as store:
            assert store.count_nodes() == 0
    finally:
        release.join()
        blocker.close()
    assert retries, "opening should have met the lock and retried"


def test_lock_and_serialization_conflicts_are_retryable() -> None:
    def wrapped(orig: Exception, kind: type[DBAPIError] = OperationalError) -> DBAPIError:
        return kind("INSERT ...", {}, orig)

    assert engine_module.is_retryable(wrapped(sqlite3.OperationalError("database is locked")))
    assert engine_module.is_retryable(wrapped(psycopg.errors.SerializationFailure("could not serialize")))
    assert engine_module.is_retryable(wrapped(psycopg.errors.DeadlockDetected("deadlock detected")))
    assert not engine_module.is_retryable(wrapped(sqlite3.OperationalError("no such table: nodes")))
    assert not engine_module.is_retryable(wrapped(psycopg.errors.UniqueViolation("duplicate key"), IntegrityError))


def test_a_forked_worker_shares_the_store_without_breaking_the_parent(store: TrajectoryStore) -> None:
    """A fork-started pool worker uses the inherited store on connections of its own; the parent's stay intact."""
    run = store.create_run(Run(agent="a", suite="s", model="m"))
    store.add_node(Node(run_id=run.id, task_id="t"))  # the parent now holds a pooled connection
    engine = store._engine
    assert engine.pool.checkedin() >= 1
    parent_backend = _backend_id(store)

    def child() -> None:
        if engine.pool.checkedin() != 0:  # inherited connections must not be handed out here
            os._exit(3)
        if parent_backend is not None and _backend_id(store) == parent_backend:
            os._exit(4)
        store.add_node(Node(run_id=run.id, task_id="t"))
        gc.collect()  # finalise whatever the child inherited, as a long-lived worker eventually would

    worker = multiprocessing.get_context("fork").Process(target=child)
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0
    assert _backend_id(store) == parent_backend  # the parent still talks to the same server process
    store.add_node(Node(run_id=run.id, task_id="t"))
    assert store.count_nodes(run.id) == 3


def _backend_id(store: TrajectoryStore) -> int | None:
    """The PostgreSQL server process behind the pooled connection (None on SQLite)."""
    if store.dialect != "postgresql":
        return None
    with store._engine.connect() as connection:
        return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def test_sqlite_runs_in_wal_mode_with_the_configured_busy_timeout(tmp_path: Path) -> None:
    from veriloop.config import load_settings

    settings = load_settings(paths={"home": tmp_path / "home"}, store={"busy_timeout_ms": 1234})
    with TrajectoryStore.from_settings(settings) as store:
        assert store.url.database == str(tmp_path / "home" / "veriloop.db")
        with store._engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 1234
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1


def test_in_memory_sqlite_works_for_throwaway_use() -> None:
    with TrajectoryStore("sqlite://") as store:
        run = store.create_run(Run(agent="a", suite="s", model="m"))
        store.add_node(Node(run_id=run.id, task_id="t"))
        assert store.count_nodes(run.id) == 1
