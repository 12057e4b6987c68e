"""`TrajectoryStore`: every run, task, attempt, node, LLM call, execution and verification, as records.

Each method is one short transaction on a per-process engine, so any number of processes (an
executor's workers) can write to one database at once; batch methods (`add_nodes`,
`add_llm_calls`, `upsert_tasks`, `add_exemplars`) put many rows in one transaction. The API is
synchronous: async agents call it through `asyncio.to_thread`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import CursorResult, Select, Table, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from veriloop.config import Settings
from veriloop.errors import NotFoundError, StoreError, VeriloopError
from veriloop.records import (
    Attempt,
    Exemplar,
    LLMCall,
    Node,
    RegisteredModel,
    Run,
    RunStatus,
    Task,
    VerifyResult,
    utcnow,
)
from veriloop.store import mapping
from veriloop.store.engine import ENGINES, display_url, parse_url, run_transaction, write_engine
from veriloop.store.migrate import ensure_migrated
from veriloop.store.models import (
    AttemptRow,
    Base,
    ExecutionRow,
    ExemplarRow,
    LLMCallRow,
    ModelRow,
    NodeRow,
    RunRow,
    TaskRow,
    VerificationCacheRow,
    VerificationRow,
)
from veriloop.store.summary import RunSummary, TaskTreeSummary, Timings, TokenCounts

T = TypeVar("T")

MIN_PREFIX = 4
"""Run and model ids may be abbreviated to a unique prefix of at least this many characters."""


class TrajectoryStore:
    """The store API; open one per process (or per worker) and close it when done."""

    def __init__(self, url: str | URL, *, busy_timeout_ms: int = 30000, create_new_sqlite: bool = True) -> None:
        self.url = parse_url(url)
        self._engine = ENGINES.acquire(self.url, busy_timeout_ms)
        self._writer = write_engine(self._engine)
        self._closed = False
        try:
            ensure_migrated(self._engine, self.url, create_new_sqlite=create_new_sqlite)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_settings(cls, settings: Settings) -> TrajectoryStore:
        return cls(
            settings.database_url,
            busy_timeout_ms=settings.store.busy_timeout_ms,
            create_new_sqlite=settings.store.create_new_sqlite,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            ENGINES.release(self._engine)

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TrajectoryStore({display_url(self.url)!r})"

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    # ------------------------------------------------------------------ plumbing

    def _write(self, work: Callable[[Session], T], explain: Callable[[IntegrityError], Exception] | None = None) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        return run_transaction(self._writer, self.url, work, explain=explain)

    def _read(self, work: Callable[[Session], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        return run_transaction(self._engine, self.url, work)

    def _explain(self, checks: Callable[[Session], VeriloopError | None]) -> Callable[[IntegrityError], Exception]:
        """After a constraint violation, find out in a fresh read which reference or id was at fault."""

        def explain(exc: IntegrityError) -> Exception:
            found = self._read(checks)
            return found if found is not None else StoreError(f"database refused the write: {_first_line(exc)}")

        return explain

    @staticmethod
    def _missing_runs(session: Session, run_ids: set[str]) -> set[str]:
        present = set(session.scalars(select(RunRow.id).where(RunRow.id.in_(run_ids)))) if run_ids else set()
        return run_ids - present

    def _resolve(self, session: Session, column: Any, kind: str, ident: str) -> str:
        """An exact id, or a unique prefix of one (like a short git hash)."""
        if session.scalar(select(column).where(column == ident)) is not None:
            return ident
        if len(ident) >= MIN_PREFIX:
            pattern = ident.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            matches = list(session.scalars(select(column).where(column.like(pattern, escape="\\")).limit(2)))
            if len(matches) == 1:
                return str(matches[0])
            if len(matches) > 1:
                raise NotFoundError(f"{kind} id {ident!r} is ambiguous; give more characters")
        raise NotFoundError(f"{kind} {ident!r} not found")

    # ------------------------------------------------------------------ runs

    def create_run(self, run: Run) -> Run:
        values = mapping.run_values(run)

        def check(session: Session) -> VeriloopError | None:
            return StoreError(f"run {run.id!r} already exists") if session.get(RunRow, run.id) else None

        self._write(lambda session: _insert(session, RunRow, [values]), self._explain(check))
        return run

    def get_run(self, run_id: str) -> Run:
        """The run with this id (or unique id prefix); NotFoundError otherwise."""

        def work(session: Session) -> Run:
            row = session.get(RunRow, self._resolve(session, RunRow.id, "run", run_id))
            assert row is not None
            return mapping.run_record(row)

        return self._read(work)

    def set_run_status(self, run_id: str, status: RunStatus, *, error: str | None = None) -> Run:
        finished = status in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)
        values: dict[str, Any] = {"status": status.value, "error": error}
        if finished:
            values["finished_at"] = utcnow()

        def work(session: Session) -> Run:
            row = session.get(RunRow, run_id)
            if row is None:
                raise NotFoundError(f"run {run_id!r} not found")
            for key, value in values.items():
                setattr(row, key, value)
            return mapping.run_record(row)

        return self._write(work)

    def finish_run(self, run_id: str, status: RunStatus = RunStatus.FINISHED, error: str | None = None) -> Run:
        """Mark a run ended (finished, failed or cancelled) and stamp `finished_at`."""
        if status in (RunStatus.PENDING, RunStatus.RUNNING):
            raise StoreError(f"finish_run needs an end status, not {status.value!r}")
        return self.set_run_status(run_id, status, error=error)

    def list_runs(
        self,
        *,
        agent: str | None = None,
        suite: str | None = None,
        status: RunStatus | str | None = None,
        limit: int | None = 50,
    ) -> list[Run]:
        """Newest first."""
        query = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id)
        if agent is not None:
            query = query.where(RunRow.agent == agent)
        if suite is not None:
            query = query.where(RunRow.suite == suite)
        if status is not None:
            query = query.where(RunRow.status == str(status))
        if limit is not None:
            query = query.limit(limit)
        return self._read(lambda session: [mapping.run_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ tasks

    def upsert_tasks(self, tasks: Iterable[Task]) -> int:
        """Insert or refresh tasks by id (rows whose content is unchanged are not rewritten)."""
        rows = sorted((mapping.task_columns(task) for task in tasks), key=lambda row: row["id"])
        if not rows:
            return 0
        table = Base.metadata.tables[TaskRow.__tablename__]
        make = pg_insert if self.dialect == "postgresql" else sqlite_insert
        statement = make(table)
        statement = statement.on_conflict_do_update(
            index_elements=[table.c.id],
            set_={name: statement.excluded[name] for name in rows[0] if name != "id"},
            where=table.c.content_hash != statement.excluded.content_hash,
        )

        def work(session: Session) -> int:
            for start in range(0, len(rows), 500):
                session.execute(statement, rows[start : start + 500])
            return len(rows)

        return self._write(work)

    def get_task(self, task_id: str) -> Task:
        def work(session: Session) -> Task:
            row = session.get(TaskRow, task_id)
            if row is None:
                raise NotFoundError(f"task {task_id!r} not found")
            return mapping.task_record(row)

        return self._read(work)

    def list_tasks(self, suite: str | None = None) -> list[Task]:
        query = select(TaskRow).order_by(TaskRow.id)
        if suite is not None:
            query = query.where(TaskRow.suite == suite)
        return self._read(lambda session: [mapping.task_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ attempts

    def add_attempt(self, attempt: Attempt) -> Attempt:
        values = mapping.attempt_values(attempt)

        def check(session: Session) -> VeriloopError | None:
            if self._missing_runs(session, {attempt.run_id}):
                return NotFoundError(f"run {attempt.run_id!r} not found")
            if session.get(AttemptRow, attempt.id) is not None:
                return StoreError(f"attempt {attempt.id!r} already exists")
            return None

        self._write(lambda session: _insert(session, AttemptRow, [values]), self._explain(check))
        return attempt

    def update_attempt(self, attempt: Attempt) -> Attempt:
        """Store the attempt's current state (status, best node, score, cost) under its id."""
        values = mapping.attempt_values(attempt)

        def work(session: Session) -> Attempt:
            result = _update(session, AttemptRow, attempt.id, values)
            if result.rowcount == 0:
                raise NotFoundError(f"attempt {attempt.id!r} not found")
            return attempt

        return self._write(work)

    def list_attempts(self, run_id: str, task_id: str | None = None) -> list[Attempt]:
        query = select(AttemptRow).where(AttemptRow.run_id == run_id)
        if task_id is not None:
            query = query.where(AttemptRow.task_id == task_id)
        query = query.order_by(AttemptRow.created_at, AttemptRow.id)
        return self._read(lambda session: [mapping.attempt_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: Node) -> Node:
        self.add_nodes([node])
        return node

    def add_nodes(self, nodes: Sequence[Node]) -> int:
        """Insert nodes with their LLM calls, executions and verifications in one transaction.

        Parents may come in the same batch (they are written first) or be stored already.
        """
        ordered = sorted(nodes, key=lambda node: node.depth)
        if not ordered:
            return 0
        parts = [mapping.NodeRows(node) for node in ordered]
        calls = [part.call for part in parts if part.call is not None]
        executions = [part.execution for part in parts if part.execution is not None]
        verifications = [part.verification for part in parts if part.verification is not None]

        def work(session: Session) -> int:
            _insert(session, NodeRow, [part.node for part in parts])
            if calls:
                _insert(session, LLMCallRow, calls)
            if executions:
                _insert(session, ExecutionRow, executions)
            if verifications:
                _insert(session, VerificationRow, verifications)
            return len(parts)

        def check(session: Session) -> VeriloopError | None:
            missing = self._missing_runs(session, {node.run_id for node in ordered})
            if missing:
                return NotFoundError(f"run {sorted(missing)[0]!r} not found")
            ids = [node.id for node in ordered]
            if len(set(ids)) != len(ids):
                return StoreError("the batch holds the same node id twice")
            existing = list(session.scalars(select(NodeRow.id).where(NodeRow.id.in_(ids)).limit(1)))
            if existing:
                return StoreError(f"node {existing[0]!r} already exists")
            batch = set(ids)
            parents = {node.parent_id for node in ordered if node.parent_id and node.parent_id not in batch}
            stored = set(session.scalars(select(NodeRow.id).where(NodeRow.id.in_(parents)))) if parents else set()
            if parents - stored:
                return NotFoundError(f"parent node {sorted(parents - stored)[0]!r} not found")
            return None

        return self._write(work, self._explain(check))

    def update_node(self, node: Node) -> Node:
        """Replace a stored node's state (score, code, metadata, completion, execution, verification)."""
        parts = mapping.NodeRows(node)
        node_values = {key: value for key, value in parts.node.items() if key not in ("id", "created_at")}

        def work(session: Session) -> Node:
            result = _update(session, NodeRow, node.id, node_values)
            if result.rowcount == 0:
                raise NotFoundError(f"node {node.id!r} not found")
            for row_class, values in (
                (LLMCallRow, parts.call),
                (ExecutionRow, parts.execution),
                (VerificationRow, parts.verification),
            ):
                session.execute(delete(row_class).where(row_class.node_id == node.id))
                if values is not None:
                    _insert(session, row_class, [values])
            return node

        return self._write(work)

    def _node_query(self) -> Select[NodeRow, LLMCallRow, ExecutionRow, VerificationRow]:
        return (
            select(NodeRow, LLMCallRow, ExecutionRow, VerificationRow)
            .outerjoin(LLMCallRow, LLMCallRow.node_id == NodeRow.id)
            .outerjoin(ExecutionRow, ExecutionRow.node_id == NodeRow.id)
            .outerjoin(VerificationRow, VerificationRow.node_id == NodeRow.id)
        )

    def get_node(self, node_id: str) -> Node:
        def work(session: Session) -> Node:
            row = session.execute(self._node_query().where(NodeRow.id == node_id)).first()
            if row is None:
                raise NotFoundError(f"node {node_id!r} not found")
            node, call, execution, verification = row
            return mapping.node_record(node, call, execution, verification)

        return self._read(work)

    def get_tree(self, run_id: str, task_id: str) -> list[Node]:
        """All nodes of one task in one run, parents before children (by depth, then creation)."""
        query = (
            self._node_query()
            .where(NodeRow.run_id == run_id, NodeRow.task_id == task_id)
            .order_by(NodeRow.depth, NodeRow.created_at, NodeRow.id)
        )

        def work(session: Session) -> list[Node]:
            if session.get(RunRow, run_id) is None:
                raise NotFoundError(f"run {run_id!r} not found")
            return [mapping.node_record(node, call, ex, ver) for node, call, ex, ver in session.execute(query)]

        return self._read(work)

    def list_nodes(self, run_id: str, *, task_id: str | None = None) -> list[Node]:
        """Every node of a run (optionally one task), by task, then parents before children; for exports."""
        query = self._node_query().where(NodeRow.run_id == run_id)
        if task_id is not None:
            query = query.where(NodeRow.task_id == task_id)
        query = query.order_by(NodeRow.task_id, NodeRow.depth, NodeRow.created_at, NodeRow.id)

        def work(session: Session) -> list[Node]:
            if session.get(RunRow, run_id) is None:
                raise NotFoundError(f"run {run_id!r} not found")
            return [mapping.node_record(node, call, ex, ver) for node, call, ex, ver in session.execute(query)]

        return self._read(work)

    def count_nodes(self, run_id: str | None = None) -> int:
        query = select(func.count()).select_from(NodeRow)
        if run_id is not None:
            query = query.where(NodeRow.run_id == run_id)
        return self._read(lambda session: int(session.scalar(query) or 0))

    # ------------------------------------------------------------------ LLM calls

    def add_llm_call(self, call: LLMCall) -> LLMCall:
        self.add_llm_calls([call])
        return call

    def add_llm_calls(self, calls: Sequence[LLMCall]) -> int:
        rows = [mapping.call_values(call) for call in calls]
        if not rows:
            return 0

        def check(session: Session) -> VeriloopError | None:
            missing = self._missing_runs(session, {call.run_id for call in calls if call.run_id})
            if missing:
                return NotFoundError(f"run {sorted(missing)[0]!r} not found")
            return None

        self._write(lambda session: _insert(session, LLMCallRow, rows), self._explain(check))
        return len(rows)

    def list_llm_calls(
        self, *, run_id: str | None = None, node_id: str | None = None, limit: int | None = None
    ) -> list[LLMCall]:
        query = select(LLMCallRow).order_by(LLMCallRow.created_at, LLMCallRow.id)
        if run_id is not None:
            query = query.where(LLMCallRow.run_id == run_id)
        if node_id is not None:
            query = query.where(LLMCallRow.node_id == node_id)
        if limit is not None:
            query = query.limit(limit)
        return self._read(lambda session: [mapping.call_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ summaries

    def run_summary(self, run_id: str) -> RunSummary:
        """Counts, tokens, timings and a per-task tree summary, from aggregate queries."""

        def work(session: Session) -> RunSummary:
            row = session.get(RunRow, self._resolve(session, RunRow.id, "run", run_id))
            assert row is not None
            run = mapping.run_record(row)
            return _summarise(session, run)

        return self._read(work)

    # ------------------------------------------------------------------ models

    def register_model(self, model: RegisteredModel) -> RegisteredModel:
        values = mapping.model_values(model)

        def check(session: Session) -> VeriloopError | None:
            return StoreError(f"model {model.id!r} already exists") if session.get(ModelRow, model.id) else None

        self._write(lambda session: _insert(session, ModelRow, [values]), self._explain(check))
        return model

    def get_model(self, model_id: str) -> RegisteredModel:
        """The checkpoint behind `checkpoint:ID` (a unique id prefix works too); NotFoundError otherwise."""

        def work(session: Session) -> RegisteredModel:
            row = session.get(ModelRow, self._resolve(session, ModelRow.id, "model", model_id))
            assert row is not None
            return mapping.model_record(row)

        return self._read(work)

    def list_models(
        self, *, base: str | None = None, method: str | None = None, limit: int | None = None
    ) -> list[RegisteredModel]:
        """Newest first."""
        query = select(ModelRow).order_by(ModelRow.created_at.desc(), ModelRow.id)
        if base is not None:
            query = query.where(ModelRow.base == base)
        if method is not None:
            query = query.where(ModelRow.method == method)
        if limit is not None:
            query = query.limit(limit)
        return self._read(lambda session: [mapping.model_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ exemplars

    def add_exemplar(self, exemplar: Exemplar) -> Exemplar:
        self.add_exemplars([exemplar])
        return exemplar

    def add_exemplars(self, exemplars: Sequence[Exemplar]) -> int:
        rows = [mapping.exemplar_values(exemplar) for exemplar in exemplars]
        if not rows:
            return 0

        def check(session: Session) -> VeriloopError | None:
            missing = self._missing_runs(session, {item.run_id for item in exemplars if item.run_id})
            return NotFoundError(f"run {sorted(missing)[0]!r} not found") if missing else None

        self._write(lambda session: _insert(session, ExemplarRow, rows), self._explain(check))
        return len(rows)

    def list_exemplars(
        self,
        *,
        kind: str | None = None,
        language: str | None = None,
        run_id: str | None = None,
        max_iteration: int | None = None,
        limit: int | None = None,
    ) -> list[Exemplar]:
        """Oldest first; `max_iteration` keeps the pool as it stood after that round."""
        query = select(ExemplarRow).order_by(ExemplarRow.created_at, ExemplarRow.id)
        if kind is not None:
            query = query.where(ExemplarRow.kind == kind)
        if language is not None:
            query = query.where(ExemplarRow.language == language)
        if run_id is not None:
            query = query.where(ExemplarRow.run_id == run_id)
        if max_iteration is not None:
            query = query.where(ExemplarRow.iteration <= max_iteration)
        if limit is not None:
            query = query.limit(limit)
        return self._read(lambda session: [mapping.exemplar_record(row) for row in session.scalars(query)])

    # ------------------------------------------------------------------ verification cache

    def cache_get(self, key: str) -> VerifyResult | None:
        """The stored result for `key` (counting the hit), or None."""

        def work(session: Session) -> VerifyResult | None:
            table = _table(VerificationCacheRow)
            row = session.connection().execute(select(table.c.result).where(table.c.key == key)).first()
            if row is None:
                return None
            session.connection().execute(update(table).where(table.c.key == key).values(hits=table.c.hits + 1))
            return VerifyResult.model_validate(row[0])

        return self._write(work)

    def cache_put(self, key: str, result: VerifyResult) -> None:
        """Store `result` under `key`; a concurrent writer of the same key wins quietly (same content)."""
        values = {
            "key": key,
            "tool": result.tool,
            "version": result.version,
            "result": result.model_dump(mode="json", by_alias=True),
            "created_at": utcnow(),
            "hits": 0,
        }
        table = _table(VerificationCacheRow)
        statement: Any = (pg_insert if self.dialect == "postgresql" else sqlite_insert)(table).values(values)
        self._write(lambda session: session.connection().execute(statement.on_conflict_do_nothing()))

    def cache_clear(self) -> int:
        """Forget every cached verification; returns how many there were."""
        table = _table(VerificationCacheRow)
        return self._write(lambda session: int(session.connection().execute(delete(table)).rowcount))


def _table(row_class: type[Base]) -> Table:
    return Base.metadata.tables[row_class.__tablename__]


def _insert(session: Session, row_class: type[Base], rows: list[dict[str, Any]]) -> None:
    """A Core executemany on the session's connection: column-keyed values, none of the ORM's per-row work."""
    session.connection().execute(insert(_table(row_class)), rows)


def _update(session: Session, row_class: type[Base], ident: str, values: dict[str, Any]) -> CursorResult[Any]:
    table = _table(row_class)
    return session.connection().execute(update(table).where(table.c.id == ident).values(values))


def _first_line(exc: IntegrityError) -> str:
    text = str(exc.orig).strip().splitlines()
    return text[0] if text else "constraint violated"


def _summarise(session: Session, run: Run) -> RunSummary:
    run_id = run.id
    per_task: dict[str, TaskTreeSummary] = {}

    def task(task_id: str) -> TaskTreeSummary:
        if task_id not in per_task:
            per_task[task_id] = TaskTreeSummary(task_id=task_id)
        return per_task[task_id]

    node_rows = session.execute(
        select(NodeRow.task_id, func.count(), func.max(NodeRow.depth), func.max(NodeRow.score))
        .where(NodeRow.run_id == run_id)
        .group_by(NodeRow.task_id)
    )
    nodes = 0
    for task_id, count, max_depth, best in node_rows:
        summary = task(task_id)
        summary.nodes, summary.max_depth, summary.best_score = int(count), int(max_depth or 0), best
        nodes += int(count)

    attempts_by_status: dict[str, int] = {}
    attempts_s = 0.0
    passed_tasks: set[str] = set()
    attempt_rows = session.execute(
        select(AttemptRow.task_id, AttemptRow.status, AttemptRow.score, AttemptRow.seconds)
        .where(AttemptRow.run_id == run_id)
        .order_by(AttemptRow.created_at, AttemptRow.id)
    )
    for task_id, status, score, seconds in attempt_rows:
        summary = task(task_id)
        summary.attempts += 1
        summary.status = status  # the latest attempt wins
        if score is not None and (summary.best_score is None or score > summary.best_score):
            summary.best_score = score
        attempts_by_status[status] = attempts_by_status.get(status, 0) + 1
        attempts_s += float(seconds or 0.0)
        if status == "passed":
            passed_tasks.add(task_id)

    llm = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(LLMCallRow.prompt_tokens), 0),
            func.coalesce(func.sum(LLMCallRow.completion_tokens), 0),
            func.coalesce(func.sum(LLMCallRow.latency_s), 0.0),
        ).where(LLMCallRow.run_id == run_id)
    ).one()
    executions, exec_s = _by_status(session, ExecutionRow, ExecutionRow.wall_s, run_id)
    verifications, verify_s = _by_status(session, VerificationRow, VerificationRow.duration_s, run_id)

    end: datetime | None = run.finished_at
    if end is None and run.status is RunStatus.RUNNING:
        end = utcnow()
    prompt_tokens, completion_tokens = int(llm[1]), int(llm[2])
    tasks = len(per_task)
    return RunSummary(
        run=run,
        tasks=tasks,
        tasks_passed=len(passed_tasks),
        attempts=sum(attempts_by_status.values()),
        attempts_by_status=attempts_by_status,
        nodes=nodes,
        llm_calls=int(llm[0]),
        executions=executions,
        verifications=verifications,
        tokens=TokenCounts(prompt=prompt_tokens, completion=completion_tokens, total=prompt_tokens + completion_tokens),
        timings=Timings(
            wall_s=(end - run.created_at).total_seconds() if end is not None else None,
            llm_s=float(llm[3]),
            exec_s=exec_s,
            verify_s=verify_s,
            attempts_s=attempts_s,
        ),
        pass_rate=len(passed_tasks) / tasks if tasks else None,
        per_task=[per_task[key] for key in sorted(per_task)],
    )


def _by_status(session: Session, row_class: Any, seconds: Any, run_id: str) -> tuple[dict[str, int], float]:
    counts: dict[str, int] = {}
    total = 0.0
    query = (
        select(row_class.status, func.count(), func.coalesce(func.sum(seconds), 0.0))
        .where(row_class.run_id == run_id)
        .group_by(row_class.status)
    )
    for status, count, spent in session.execute(query):
        counts[str(status)] = int(count)
        total += float(spent)
    return counts, total
