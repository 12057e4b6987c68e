"""Read-side queries for the dashboard: light per-node facts of a run, without completions, code or logprobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from veriloop.errors import NotFoundError
from veriloop.records import Record
from veriloop.store.models import ExecutionRow, LLMCallRow, NodeRow, RunRow, VerificationRow
from veriloop.store.trajectory import TrajectoryStore


class NodeFact(Record):
    """What the run page aggregates about one node."""

    id: str
    task_id: str
    parent_id: str | None
    depth: int
    role: str
    score: float | None
    created_at: datetime
    metadata: dict[str, Any]
    exec_status: str | None = None
    exec_s: float | None = None
    verify_status: str | None = None
    verify_reason: str | None = None
    diagnostic_classes: list[str] = Field(default_factory=list)
    tokens: int = 0
    llm_s: float = 0.0

    @property
    def passed(self) -> bool | None:
        """Passed when its tests passed (and a verifier, if any, verified it); None with no outcome at all."""
        if self.exec_status is None and self.verify_status is None:
            return None
        return self.exec_status in (None, "passed") and self.verify_status in (None, "verified")


def _classes(diagnostics: Any) -> list[str]:
    """Stored diagnostics are dumped by field name (`kind`); accept the record's alias (`class`) too."""
    found = [item for item in diagnostics or [] if isinstance(item, dict)]
    return [str(item.get("kind") or item.get("class") or "other") for item in found]


def node_facts(store: TrajectoryStore, run_id: str) -> list[NodeFact]:
    """Every node of a run as facts, by task then parents before children."""
    query = (
        select(
            NodeRow.id,
            NodeRow.task_id,
            NodeRow.parent_id,
            NodeRow.depth,
            NodeRow.role,
            NodeRow.score,
            NodeRow.created_at,
            NodeRow.meta,
            ExecutionRow.status,
            ExecutionRow.wall_s,
            VerificationRow.status,
            VerificationRow.reason,
            VerificationRow.diagnostics,
            LLMCallRow.prompt_tokens,
            LLMCallRow.completion_tokens,
            LLMCallRow.latency_s,
        )
        .outerjoin(ExecutionRow, ExecutionRow.node_id == NodeRow.id)
        .outerjoin(VerificationRow, VerificationRow.node_id == NodeRow.id)
        .outerjoin(LLMCallRow, LLMCallRow.node_id == NodeRow.id)
        .where(NodeRow.run_id == run_id)
        .order_by(NodeRow.task_id, NodeRow.depth, NodeRow.created_at, NodeRow.id)
    )

    def work(session: Session) -> list[NodeFact]:
        if session.get(RunRow, run_id) is None:
            raise NotFoundError(f"run {run_id!r} not found")
        facts = []
        for row in session.execute(query):
            (
                ident,
                task,
                parent,
                depth,
                role,
                score,
                created,
                meta,
                ex_status,
                ex_s,
                v_status,
                v_reason,
                diags,
                prompt_tokens,
                completion_tokens,
                latency,
            ) = row
            facts.append(
                NodeFact(
                    id=ident,
                    task_id=task,
                    parent_id=parent,
                    depth=depth,
                    role=role,
                    score=score,
                    created_at=created,
                    metadata=meta or {},
                    exec_status=ex_status,
                    exec_s=ex_s,
                    verify_status=v_status,
                    verify_reason=v_reason,
                    diagnostic_classes=_classes(diags),
                    tokens=int(prompt_tokens or 0) + int(completion_tokens or 0),
                    llm_s=float(latency or 0.0),
                )
            )
        return facts

    return store._read(work)
