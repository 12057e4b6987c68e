"""The worker loop: claim a queued run, execute it while renewing the lease, record how it ended.

`veriloop worker` runs this loop; `veriloop serve` runs `service.workers` of them beside the API.
A run's lease is renewed every `heartbeat_s`; the beat also carries cancellation (someone called
cancel) and loss (the lease expired and another worker took the run; this one then stops without
writing anything). A worker stopped by a signal hands its run back to the queue at once, so the
next worker resumes it without waiting for the lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass

from veriloop.agents.runner import PREEMPTED
from veriloop.config import Settings
from veriloop.errors import VeriloopError
from veriloop.llm.base import Backend
from veriloop.records import RunStatus
from veriloop.service.executor import Executor
from veriloop.store import TrajectoryStore
from veriloop.store.jobs import Heartbeat, Job, JobQueue, JobStatus

logger = logging.getLogger(__name__)


def worker_name() -> str:
    """host:pid, unique among live workers."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerReport:
    """What one loop did."""

    worker: str
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    lost: int = 0


async def run_job(
    queue: JobQueue,
    job: Job,
    executor: Executor,
    settings: Settings,
    *,
    backend: Backend | None = None,
) -> JobStatus | None:
    """Execute one claimed job to its end; returns its end status, or None when the job was lost or handed back."""
    lease_s, beat_s = settings.service.lease_s, settings.service.heartbeat_s
    execution = asyncio.create_task(executor.execute(settings, job.run_id, backend=backend))
    verdict: list[Heartbeat] = []

    async def beat() -> None:
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(beat_s)
            try:
                state = await asyncio.to_thread(queue.heartbeat, job, lease_s)
                renewed = time.monotonic()
            except VeriloopError as exc:  # the database is unreachable: keep trying while the lease lasts
                logger.warning("heartbeat for run %s failed: %s", job.run_id, exc)
                if time.monotonic() - renewed < lease_s:
                    continue
                state = Heartbeat.LOST  # another worker may hold the run by now: stop without writing
            if state is not Heartbeat.OK:
                verdict.append(state)
                execution.cancel(PREEMPTED if state is Heartbeat.LOST else None)
                return

    beating = asyncio.create_task(beat())
    error: str | None = None
    try:
        await asyncio.shield(execution)
        status = JobStatus.DONE
    except asyncio.CancelledError:
        if not execution.done():  # this worker is stopping: hand the run back, unmarked
            execution.cancel(PREEMPTED)
            await asyncio.gather(execution, return_exceptions=True)
            await asyncio.to_thread(queue.release, job)
            raise
        if verdict and verdict[0] is Heartbeat.LOST:
            return None
        status = JobStatus.CANCELLED
    except Exception as exc:
        status, error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
        logger.warning("run %s failed: %s", job.run_id, error)
        await asyncio.to_thread(_mark_failed, queue.store, job.run_id, error)
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
    completed = await asyncio.to_thread(queue.complete, job, status, error)
    return status if completed else None


def _mark_failed(store: TrajectoryStore, run_id: str, error: str) -> None:
    """A run that failed before the runner could mark it (a suite that would not load) ends failed too."""
    run = store.get_run(run_id)
    if run.status in (RunStatus.PENDING, RunStatus.RUNNING):
        store.finish_run(run_id, RunStatus.FAILED, error=error)


async def work(
    settings: Settings,
    executor: Executor,
    *,
    backend: Backend | None = None,
    once: bool = False,
    max_jobs: int | None = None,
    name: str | None = None,
    stop: asyncio.Event | None = None,
) -> WorkerReport:
    """Claim and execute runs until `stop` is set (or, with `once`, until the queue is empty)."""
    report = WorkerReport(worker=name or worker_name())
    store = await asyncio.to_thread(TrajectoryStore.from_settings, settings)
    queue = JobQueue(store)
    try:
        while stop is None or not stop.is_set():
            if max_jobs is not None and report.done + report.failed + report.cancelled >= max_jobs:
                break
            job = await asyncio.to_thread(queue.claim, report.worker, settings.service.lease_s)
            if job is None:
                if once and not await asyncio.to_thread(_leased, queue):
                    break
                await _idle(settings.service.poll_s, stop)
                continue
            logger.info("worker %s took run %s (claim %d)", report.worker, job.run_id, job.claims)
            status = await run_job(queue, job, executor, settings, backend=backend)
            if status is None:
                report.lost += 1
            elif status is JobStatus.DONE:
                report.done += 1
            elif status is JobStatus.FAILED:
                report.failed += 1
            else:
                report.cancelled += 1
    finally:
        store.close()
    return report


def _leased(queue: JobQueue) -> bool:
    """Whether a running job may still come back to the queue (its lease has not run out)."""
    return queue.counts().get(JobStatus.RUNNING.value, 0) > 0


async def _idle(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
