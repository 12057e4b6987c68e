"""The job loop's decisions with stand-in executors (the real executors run in test_worker.py and test_api.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from veriloop.agents.runner import preempted, settings_for_run
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError, StoreError
from veriloop.llm.base import Backend
from veriloop.records import Run, RunStatus
from veriloop.service.executor import Executor
from veriloop.service.worker import run_job, work
from veriloop.store import TrajectoryStore
from veriloop.store.jobs import Heartbeat, Job, JobQueue, JobStatus


class Failing(Executor):
    name = "failing"

    async def execute(self, settings: Settings, run_id: str, *, backend: Backend | None = None) -> Run:
        raise ConfigError("the suite would not load")


class Forever(Executor):
    """Runs until cancelled, and remembers how."""

    name = "forever"

    def __init__(self) -> None:
        self.stopped: BaseException | None = None

    async def execute(self, settings: Settings, run_id: str, *, backend: Backend | None = None) -> Run:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError as exc:
            self.stopped = exc
            raise
        raise AssertionError("unreachable")


class Unreachable(JobQueue):
    """The database went away for heartbeats."""

    def heartbeat(self, job: Job, lease_s: float) -> Heartbeat:
        raise StoreError("database at sqlite:///x failed: disk I/O error")


def setup(tmp_path: Path, **service: float) -> tuple[Settings, TrajectoryStore, Run]:
    settings = load_settings(paths={"home": tmp_path}, service={"heartbeat_s": 0.05, "lease_s": 0.3, **service})
    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="direct", suite="humaneval", model="scripted"))
    JobQueue(store).enqueue(run.id)
    return settings, store, run


async def test_a_failing_run_ends_failed_with_its_error(tmp_path: Path) -> None:
    settings, store, run = setup(tmp_path)
    report = await work(settings, Failing(), once=True)
    assert (report.done, report.failed) == (0, 1)
    stored = store.get_run(run.id)
    assert stored.status is RunStatus.FAILED and stored.error == "ConfigError: the suite would not load"
    job = JobQueue(store).get(run.id)
    assert job is not None and job.status is JobStatus.FAILED and job.error == stored.error
    store.close()


async def test_heartbeats_that_keep_failing_past_the_lease_stop_the_run_without_writing(tmp_path: Path) -> None:
    settings, store, run = setup(tmp_path)
    queue = Unreachable(store)
    job = queue.claim("w", settings.service.lease_s)
    assert job is not None
    executor = Forever()
    assert await asyncio.wait_for(run_job(queue, job, executor, settings), 10) is None
    assert executor.stopped is not None and preempted(executor.stopped)
    assert store.get_run(run.id).status is RunStatus.PENDING  # left for the worker that takes it over
    store.close()


async def test_a_requested_cancel_stops_the_execution(tmp_path: Path) -> None:
    settings, store, run = setup(tmp_path, lease_s=30)
    queue = JobQueue(store)
    job = queue.claim("w", 30)
    assert job is not None
    executor = Forever()
    running = asyncio.create_task(run_job(queue, job, executor, settings))
    await asyncio.sleep(0.1)
    queue.cancel(run.id)
    assert await asyncio.wait_for(running, 10) is JobStatus.CANCELLED
    assert executor.stopped is not None and not preempted(executor.stopped)
    ended = queue.get(run.id)
    assert ended is not None and ended.status is JobStatus.CANCELLED
    store.close()


def test_a_run_executes_with_the_model_it_asked_for() -> None:
    settings = load_settings(llm={"backend": "openai", "model": "served"})
    same = Run(agent="direct", suite="humaneval", model="served")
    other = Run(agent="direct", suite="humaneval", model="checkpoint:abc")
    assert settings_for_run(settings, same) is settings  # the process's backend can be shared
    changed = settings_for_run(settings, other)
    assert (changed.llm.backend, changed.llm.model) == ("openai", "checkpoint:abc")
