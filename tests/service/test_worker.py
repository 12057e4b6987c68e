"""`veriloop worker` processes against one database: a queued run executes; a SIGKILLed worker's run is taken
over after its lease expires, finishes, and keeps every node stored before the kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from veriloop.agents.runner import create_run
from veriloop.config import Settings, load_settings
from veriloop.records import RunStatus
from veriloop.store import TrajectoryStore, upgrade_database
from veriloop.store.jobs import JobQueue, JobStatus
from veriloop.testing import CLI


def settings_for(home: Path, url: str) -> Settings:
    return load_settings(paths={"home": home}, store={"url": url}, llm={"backend": "scripted"})


def worker_command(home: Path, url: str, *args: str) -> list[str]:
    return [*CLI, "--home", str(home), "--database", url, "--backend", "scripted", "worker", *args]


def queue_run(settings: Settings, **kwargs: object) -> str:
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="direct", suite="humaneval", **kwargs)  # type: ignore[arg-type]
        JobQueue(store).enqueue(run.id)
        return run.id


@pytest.mark.slow
def test_worker_executes_a_queued_run_and_exits_when_the_queue_is_empty(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    settings = settings_for(tmp_path, url)
    run_id = queue_run(settings, limit=2)
    result = subprocess.run(
        worker_command(tmp_path, url, "--once", "--json"), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["done"], report["failed"], report["lost"]) == (1, 0, 0)
    with TrajectoryStore(url) as store:
        assert store.get_run(run_id).status is RunStatus.FINISHED
        assert len(store.list_attempts(run_id)) == 2
        job = JobQueue(store).get(run_id)
        assert job is not None and job.status is JobStatus.DONE and job.claims == 1


@pytest.mark.slow
@pytest.mark.postgres
def test_a_sigkilled_worker_loses_no_nodes_and_its_run_finishes(tmp_path: Path, postgres_url: str) -> None:
    upgrade_database(postgres_url)
    settings = settings_for(tmp_path, postgres_url)
    run_id = queue_run(settings, limit=60, options={"concurrency": 1})
    lease = ["--lease", "2", "--heartbeat", "0.3", "--poll", "0.1"]
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(worker_command(tmp_path, postgres_url, *lease), stdout=log, stderr=subprocess.STDOUT)
    try:
        with TrajectoryStore(postgres_url) as store:
            deadline = time.monotonic() + 120
            while store.count_nodes(run_id) < 3:
                assert first.poll() is None, (tmp_path / "first.log").read_text()
                assert time.monotonic() < deadline, "the first worker stored no nodes"
                time.sleep(0.05)
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
            before = {node.id for node in store.list_nodes(run_id)}
            assert store.get_run(run_id).status is RunStatus.RUNNING
            assert len(store.list_attempts(run_id)) < 60, "the run ended before the kill; it needs more tasks"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        log.close()

    second = subprocess.run(
        worker_command(tmp_path, postgres_url, "--once", "--json", *lease),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["done"] == 1
    with TrajectoryStore(postgres_url) as store:
        run = store.get_run(run_id)
        assert run.status is RunStatus.FINISHED, run.error
        after = {node.id for node in store.list_nodes(run_id)}
        assert before <= after, "nodes stored before the kill were lost"
        attempts = store.list_attempts(run_id)
        finished = [attempt.task_id for attempt in attempts if attempt.status in ("passed", "failed")]
        assert sorted(finished) == sorted(set(finished)) and len(finished) == 60  # each task finished exactly once
        job = JobQueue(store).get(run_id)
        assert job is not None and job.status is JobStatus.DONE and job.claims == 2


@pytest.mark.slow
def test_sigterm_hands_the_run_back_to_the_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    run_id = queue_run(settings_for(tmp_path, url), limit=60, options={"concurrency": 1})
    worker = subprocess.Popen(
        worker_command(tmp_path, url, "--poll", "0.05"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with TrajectoryStore(url) as store:
            deadline = time.monotonic() + 60
            while store.count_nodes(run_id) < 2:
                assert worker.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    assert "stopped on SIGTERM; the current run went back to the queue" in err
    with TrajectoryStore(url) as store:
        job = JobQueue(store).get(run_id)
        assert job is not None and job.status is JobStatus.QUEUED and job.worker is None
        assert store.get_run(run_id).status is RunStatus.RUNNING  # not cancelled: the next worker resumes it
