"""The job queue on SQLite and PostgreSQL: claims, leases, take-over after expiry, cancellation, many claimers."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from veriloop.errors import NotFoundError, StoreError
from veriloop.records import Run, RunStatus
from veriloop.store import TrajectoryStore
from veriloop.store.jobs import Heartbeat, JobQueue, JobStatus


def new_run(store: TrajectoryStore) -> Run:
    return store.create_run(Run(agent="direct", suite="humaneval", model="scripted"))


def test_enqueue_claim_complete(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    job = queue.enqueue(run.id)
    assert job.status is JobStatus.QUEUED and job.token is None
    assert queue.enqueue(run.id).id == job.id  # idempotent while queued
    claimed = queue.claim("w1", lease_s=30)
    assert claimed is not None and claimed.run_id == run.id
    assert claimed.status is JobStatus.RUNNING and claimed.worker == "w1" and claimed.claims == 1
    assert claimed.token and claimed.lease_expires_at is not None
    assert queue.claim("w2", lease_s=30) is None  # a live lease is not taken
    assert queue.heartbeat(claimed, lease_s=30) is Heartbeat.OK
    assert queue.complete(claimed, JobStatus.DONE)
    ended = queue.get(run.id)
    assert ended is not None and ended.status is JobStatus.DONE and ended.finished_at is not None
    with pytest.raises(StoreError, match="end status"):
        queue.complete(claimed, JobStatus.RUNNING)


def test_enqueue_unknown_run_is_not_found(store: TrajectoryStore) -> None:
    with pytest.raises(NotFoundError, match="nope"):
        JobQueue(store).enqueue("nope")


def test_oldest_first(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    runs = [new_run(store) for _ in range(3)]
    for run in runs:
        queue.enqueue(run.id)
    order = []
    while (job := queue.claim("w", lease_s=30)) is not None:
        order.append(job.run_id)
    assert order == [run.id for run in runs]


def test_expired_lease_is_taken_over_and_the_old_claim_is_fenced(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    first = queue.claim("dead", lease_s=0.05)
    assert first is not None
    time.sleep(0.1)
    assert queue.counts()["expired"] == 1
    second = queue.claim("alive", lease_s=30)
    assert second is not None and second.id == first.id and second.claims == 2 and second.token != first.token
    assert queue.heartbeat(first, lease_s=30) is Heartbeat.LOST
    assert not queue.complete(first, JobStatus.DONE)
    assert not queue.release(first)
    assert queue.complete(second, JobStatus.DONE)


def test_release_hands_the_job_back_at_once(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    job = queue.claim("stopping", lease_s=30)
    assert job is not None and queue.release(job)
    again = queue.claim("next", lease_s=30)
    assert again is not None and again.run_id == run.id and again.worker == "next"


def test_cancel_queued_ends_job_and_run(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    job = queue.cancel(run.id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert store.get_run(run.id).status is RunStatus.CANCELLED
    assert queue.claim("w", lease_s=30) is None
    assert queue.cancel(new_run(store).id) is None  # a run outside the queue has no job


def test_cancel_running_is_seen_at_the_next_heartbeat(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    job = queue.claim("w", lease_s=30)
    assert job is not None
    cancelled = queue.cancel(run.id)
    assert cancelled is not None and cancelled.status is JobStatus.RUNNING and cancelled.cancel_requested
    assert queue.heartbeat(job, lease_s=30) is Heartbeat.CANCEL


def test_cancel_requested_then_worker_died_ends_cancelled(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    assert queue.claim("dead", lease_s=0.05) is not None
    queue.cancel(run.id)
    time.sleep(0.1)
    assert queue.reclaim_expired() == 1
    job = queue.get(run.id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert store.get_run(run.id).status is RunStatus.CANCELLED


def test_requeue_after_an_end_resets_the_job_and_the_run(store: TrajectoryStore) -> None:
    queue = JobQueue(store)
    run = new_run(store)
    queue.enqueue(run.id)
    job = queue.claim("w", lease_s=30)
    assert job is not None
    store.finish_run(run.id, RunStatus.FAILED, error="boom")
    queue.complete(job, JobStatus.FAILED, "boom")
    again = queue.enqueue(run.id)
    assert again.status is JobStatus.QUEUED and again.error is None and not again.cancel_requested
    assert store.get_run(run.id).status is RunStatus.PENDING


def test_many_claimers_take_each_job_exactly_once(store: TrajectoryStore, db_url: str) -> None:
    queue = JobQueue(store)
    runs = [new_run(store) for _ in range(24)]
    for run in runs:
        queue.enqueue(run.id)

    def claimer(name: str) -> list[str]:
        taken = []
        with TrajectoryStore(db_url) as own:  # one store per claimer, as separate workers would have
            mine = JobQueue(own)
            while (job := mine.claim(name, lease_s=30)) is not None:
                taken.append(job.run_id)
        return taken

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(claimer, [f"w{index}" for index in range(6)]))
    taken = [run_id for result in results for run_id in result]
    assert sorted(taken) == sorted(run.id for run in runs)
    assert queue.counts() == {"running": 24, "expired": 0}
