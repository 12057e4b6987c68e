"""The job queue: runs waiting for a worker, claimed with a lease that heartbeats renew.

Safe for many workers on many machines against one database. A claim takes the oldest queued
job with `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL (workers never wait on each other's
rows); on SQLite the same statement runs inside a `BEGIN IMMEDIATE` transaction, which already
serialises writers. A worker that dies stops heartbeating; once its lease expires the next claim
puts the job back in the queue and takes it, and the run resumes where its stored attempts end.
Every claim gets a fresh token: heartbeats and completion with an old token are refused, so a
worker that lost its lease never finishes a job another worker now holds.

    queue = JobQueue(store)
    queue.enqueue(run.id)
    job = queue.claim("host:1234", lease_s=60)          # None when nothing is runnable
    queue.heartbeat(job, lease_s=60)                     # OK, CANCEL (someone asked) or LOST
    queue.complete(job, "done")
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field
from sqlalchemy import and_, func, select, update
from sqlalchemy.orm import Session

from veriloop.errors import NotFoundError, StoreError
from veriloop.records import Record, RunStatus, new_id, utcnow
from veriloop.store.models import JobRow, RunRow
from veriloop.store.trajectory import TrajectoryStore


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
ENDED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


class Job(Record):
    """A run's place in the queue; `token` identifies the current claim."""

    id: str = Field(default_factory=new_id)
    run_id: str
    status: JobStatus = JobStatus.QUEUED
    worker: str | None = None
    token: str | None = None
    claims: int = Field(0, description="How often a worker took the job (more than 1 after a take-over).")
    cancel_requested: bool = False
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None


class Heartbeat(StrEnum):
    OK = "ok"
    CANCEL = "cancel"
    """The lease is renewed, but someone asked to cancel the run: stop it."""
    LOST = "lost"
    """The job is no longer this claim's (the lease expired and another worker took it): stop, write nothing."""


def _job(row: JobRow) -> Job:
    return Job(
        id=row.id,
        run_id=row.run_id,
        status=JobStatus(row.status),
        worker=row.worker,
        token=row.token,
        claims=row.claims,
        cancel_requested=row.cancel_requested,
        lease_expires_at=row.lease_expires_at,
        heartbeat_at=row.heartbeat_at,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        error=row.error,
    )


def _set_run(session: Session, run_id: str, status: RunStatus, error: str | None = None) -> None:
    values: dict[str, Any] = {"status": status.value, "error": error}
    if status in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED):
        values["finished_at"] = utcnow()
    session.execute(update(RunRow).where(RunRow.id == run_id).values(values))


class JobQueue:
    """Queue operations on a store's database; each is one short transaction."""

    def __init__(self, store: TrajectoryStore) -> None:
        self.store = store

    def enqueue(self, run_id: str) -> Job:
        """Queue the run (again); a run already queued or running keeps its job as it is."""

        def work(session: Session) -> Job:
            run = session.get(RunRow, run_id)
            if run is None:
                raise NotFoundError(f"run {run_id!r} not found")
            row = session.scalar(select(JobRow).where(JobRow.run_id == run_id).with_for_update())
            now = utcnow()
            if row is None:
                row = JobRow(
                    id=new_id(),
                    run_id=run_id,
                    status=JobStatus.QUEUED.value,
                    claims=0,
                    cancel_requested=False,
                    created_at=now,
                    extra={},
                )
                session.add(row)
            elif row.status not in ACTIVE:
                row.status, row.worker, row.token = JobStatus.QUEUED.value, None, None
                row.cancel_requested, row.error, row.finished_at = False, None, None
                row.lease_expires_at, row.heartbeat_at, row.created_at = None, None, now
            else:
                return _job(row)
            if run.status != RunStatus.RUNNING.value:
                run.status, run.error, run.finished_at = RunStatus.PENDING.value, None, None
            session.flush()
            return _job(row)

        return self.store._write(work)

    def claim(self, worker: str, lease_s: float) -> Job | None:
        """Take the oldest runnable job for `worker`, first returning expired leases to the queue."""

        def work(session: Session) -> Job | None:
            now = utcnow()
            self._reclaim(session, now)
            query = (
                select(JobRow)
                .where(JobRow.status == JobStatus.QUEUED.value)
                .order_by(JobRow.created_at, JobRow.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            row = session.scalar(query)
            if row is None:
                return None
            row.status, row.worker, row.token = JobStatus.RUNNING.value, worker, new_id()
            row.claims += 1
            row.started_at, row.heartbeat_at = now, now
            row.lease_expires_at = now + timedelta(seconds=lease_s)
            session.flush()
            return _job(row)

        return self.store._write(work)

    def reclaim_expired(self) -> int:
        """Put jobs whose lease ran out back in the queue (cancelled ones end); returns how many changed."""
        return self.store._write(lambda session: self._reclaim(session, utcnow()))

    @staticmethod
    def _reclaim(session: Session, now: datetime) -> int:
        expired = and_(JobRow.status == JobStatus.RUNNING.value, JobRow.lease_expires_at < now)
        rows = list(session.scalars(select(JobRow).where(expired).order_by(JobRow.id).with_for_update()))
        for row in rows:
            row.worker, row.token, row.lease_expires_at = None, None, None
            if row.cancel_requested:
                row.status, row.finished_at = JobStatus.CANCELLED.value, now
                _set_run(session, row.run_id, RunStatus.CANCELLED, "cancelled")
            else:
                row.status = JobStatus.QUEUED.value
        session.flush()
        return len(rows)

    def heartbeat(self, job: Job, lease_s: float) -> Heartbeat:
        """Renew the lease of this claim; says whether to go on, cancel, or stop because the job was taken."""

        def work(session: Session) -> Heartbeat:
            now = utcnow()
            owned = and_(JobRow.id == job.id, JobRow.token == job.token, JobRow.status == JobStatus.RUNNING.value)
            statement = (
                update(JobRow)
                .where(owned)
                .values(heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_s))
                .returning(JobRow.cancel_requested)
            )
            found = session.execute(statement).first()
            if found is None:
                return Heartbeat.LOST
            return Heartbeat.CANCEL if found[0] else Heartbeat.OK

        return self.store._write(work)

    def complete(self, job: Job, status: JobStatus, error: str | None = None) -> bool:
        """End this claim's job; False (and nothing written) when the claim is no longer current."""
        if status not in ENDED:
            raise StoreError(f"complete needs an end status, not {status.value!r}")

        def work(session: Session) -> bool:
            owned = and_(JobRow.id == job.id, JobRow.token == job.token, JobRow.status == JobStatus.RUNNING.value)
            values = {"status": status.value, "error": error, "finished_at": utcnow(), "lease_expires_at": None}
            result = session.connection().execute(update(JobRow).where(owned).values(values))
            return bool(result.rowcount)

        return self.store._write(work)

    def release(self, job: Job) -> bool:
        """Hand this claim's job back to the queue now (a worker shutting down); False when it was not ours."""

        def work(session: Session) -> bool:
            owned = and_(JobRow.id == job.id, JobRow.token == job.token, JobRow.status == JobStatus.RUNNING.value)
            values = {"status": JobStatus.QUEUED.value, "worker": None, "token": None, "lease_expires_at": None}
            return bool(session.connection().execute(update(JobRow).where(owned).values(values)).rowcount)

        return self.store._write(work)

    def cancel(self, run_id: str) -> Job | None:
        """Cancel a run: a queued job ends now (with its run); a running one is asked to stop at its next beat.

        Returns the job, or None when the run has none (a run executed outside the queue).
        """

        def work(session: Session) -> Job | None:
            row = session.scalar(select(JobRow).where(JobRow.run_id == run_id).with_for_update())
            if row is None:
                return None
            if row.status == JobStatus.QUEUED.value:
                row.status, row.finished_at = JobStatus.CANCELLED.value, utcnow()
                _set_run(session, run_id, RunStatus.CANCELLED, "cancelled")
            elif row.status == JobStatus.RUNNING.value:
                row.cancel_requested = True
            session.flush()
            return _job(row)

        return self.store._write(work)

    def get(self, run_id: str) -> Job | None:
        """The run's job, or None."""

        def work(session: Session) -> Job | None:
            row = session.scalar(select(JobRow).where(JobRow.run_id == run_id))
            return _job(row) if row is not None else None

        return self.store._read(work)

    def list(self, *, status: JobStatus | None = None, limit: int | None = 100) -> list[Job]:
        """Oldest first."""
        query = select(JobRow).order_by(JobRow.created_at, JobRow.id)
        if status is not None:
            query = query.where(JobRow.status == status.value)
        if limit is not None:
            query = query.limit(limit)
        return self.store._read(lambda session: [_job(row) for row in session.scalars(query)])

    def counts(self) -> dict[str, int]:
        """Jobs per status, plus `expired`: running jobs whose lease has run out."""

        def work(session: Session) -> dict[str, int]:
            result = {
                str(status): int(count)
                for status, count in session.execute(select(JobRow.status, func.count()).group_by(JobRow.status))
            }
            expired = and_(JobRow.status == JobStatus.RUNNING.value, JobRow.lease_expires_at < utcnow())
            result["expired"] = int(session.scalar(select(func.count()).select_from(JobRow).where(expired)) or 0)
            return result

        return self.store._read(work)
