"""Four writer processes, 1,000 nodes each, one transaction per node: no row is lost on SQLite or PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from veriloop.store import TrajectoryStore, upgrade_database

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
