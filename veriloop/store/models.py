"""The ORM tables. Only the store package sees these classes; its API speaks `veriloop.records`.

Every table has an `extra` JSON column: record fields that have no column yet (added to a record
after the last migration) are kept there and read back, so no field is lost between migrations.
Structured values (messages, token ids, logprobs, sampling parameters, diagnostics) are JSON
columns, portable across SQLite and PostgreSQL. A change here needs a new Alembic revision in
`migrations/versions/`; a test compares these tables with the migrated schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from veriloop.store.types import SafeText, UTCDateTime, json_type

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = String(128)
NAME = String(255)


class Base(DeclarativeBase):
    """Declarative base with constraint names fixed, so later migrations can refer to them on SQLite too."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _extra() -> Mapped[dict[str, Any]]:
    return mapped_column(json_type(), nullable=False, default=dict)


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    agent: Mapped[str] = mapped_column(String(128), index=True)
    suite: Mapped[str] = mapped_column(NAME, index=True)
    model: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(32), index=True)
    settings: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(SafeText())
    extra: Mapped[dict[str, Any]] = _extra()


class TaskRow(Base):
    """The task catalogue; ids are unique across suites (loaders prefix them, as in `HumanEval/0`)."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(NAME, primary_key=True)
    suite: Mapped[str] = mapped_column(NAME, index=True)
    language: Mapped[str] = mapped_column(String(32))
    prompt: Mapped[str] = mapped_column(SafeText())
    entry_point: Mapped[str | None] = mapped_column(NAME)
    tests: Mapped[str] = mapped_column(SafeText())
    public_tests: Mapped[str | None] = mapped_column(SafeText())
    spec: Mapped[str | None] = mapped_column(SafeText())
    reference: Mapped[str | None] = mapped_column(SafeText())
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", json_type())
    content_hash: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (Index("ix_attempts_run_id_task_id", "run_id", "task_id"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(NAME)
    status: Mapped[str] = mapped_column(String(16))
    best_node_id: Mapped[str | None] = mapped_column(ID)
    score: Mapped[float | None] = mapped_column(Float)
    tokens: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(SafeText())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class NodeRow(Base):
    """One search-tree node; its completion, execution and verification are rows of their own tables."""

    __tablename__ = "nodes"
    __table_args__ = (Index("ix_nodes_run_id_task_id", "run_id", "task_id"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(NAME, index=True)
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), index=True)
    depth: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(32))
    messages: Mapped[list[Any] | None] = mapped_column(json_type())  # set when no LLM call holds them
    code: Mapped[str | None] = mapped_column(SafeText())
    score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", json_type())
    extra: Mapped[dict[str, Any]] = _extra()


class LLMCallRow(Base):
    """A completion with its prompt, tokens, logprobs, sampling parameters, usage and latency."""

    __tablename__ = "llm_calls"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), unique=True)
    task_id: Mapped[str | None] = mapped_column(NAME)
    model: Mapped[str] = mapped_column(String(512))
    prompt: Mapped[Any] = mapped_column(json_type(), nullable=False)  # raw text or a list of messages
    text: Mapped[str] = mapped_column(SafeText())
    token_ids: Mapped[list[int]] = mapped_column(json_type())
    logprobs: Mapped[list[float] | None] = mapped_column(json_type())
    finish_reason: Mapped[str] = mapped_column(String(16))
    params: Mapped[dict[str, Any]] = mapped_column(json_type())
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    latency_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class ExecutionRow(Base):
    """An ExecResult: what running a candidate (usually with its tests) did."""

    __tablename__ = "executions"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), unique=True)
    status: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    stdout: Mapped[str] = mapped_column(SafeText())
    stderr: Mapped[str] = mapped_column(SafeText())
    truncated: Mapped[bool] = mapped_column(Boolean)
    wall_s: Mapped[float] = mapped_column(Float)
    cpu_s: Mapped[float | None] = mapped_column(Float)
    max_rss_mb: Mapped[float | None] = mapped_column(Float)
    sandbox: Mapped[str] = mapped_column(String(64))
    sandbox_version: Mapped[str] = mapped_column(String(128))
    tests: Mapped[list[Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class VerificationRow(Base):
    """A VerifyResult: a verifier's structured verdict."""

    __tablename__ = "verifications"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), unique=True)
    status: Mapped[str] = mapped_column(String(32))
    verified: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    diagnostics: Mapped[list[Any]] = mapped_column(json_type())
    score: Mapped[float] = mapped_column(Float)
    tool: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(128))
    duration_s: Mapped[float] = mapped_column(Float)
    cache_hit: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(SafeText())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class ExemplarRow(Base):
    __tablename__ = "exemplars"
    __table_args__ = (Index("ix_exemplars_kind_language_iteration", "kind", "language", "iteration"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    language: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(json_type())
    iteration: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    task_id: Mapped[str | None] = mapped_column(NAME)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    extra: Mapped[dict[str, Any]] = _extra()


class ModelRow(Base):
    """A registered checkpoint; `checkpoint:ID` model names resolve through this table."""

    __tablename__ = "models"

    id: Mapped[str] = mapped_column(NAME, primary_key=True)
    base: Mapped[str] = mapped_column(String(512))
    method: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(SafeText())
    data_hash: Mapped[str] = mapped_column(String(128))
    metrics: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    extra: Mapped[dict[str, Any]] = _extra()


class VerificationCacheRow(Base):
    """A verifier result keyed by a hash of (verifier, version, options, candidate, spec); shared by processes."""

    __tablename__ = "verification_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(128))
    result: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    hits: Mapped[int] = mapped_column(Integer, default=0)


class JobRow(Base):
    """A run waiting for, or held by, a worker: one row per run, leased so a dead worker's run is taken over.

    `token` changes on every claim; heartbeats and completion only count when they carry the current
    one, so a worker that lost its lease can no longer touch the job.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_created_at", "status", "created_at"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(NAME)
    token: Mapped[str | None] = mapped_column(String(64))
    claims: Mapped[int] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(SafeText())
    extra: Mapped[dict[str, Any]] = _extra()
