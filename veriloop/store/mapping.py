"""Records to row values and back. The ORM classes never leave the store; callers see `veriloop.records`.

Row values are dicts keyed by column names, ready for a Core executemany insert. A record field
without a column goes to the row's `extra` JSON and comes back from it, so records can grow
between migrations without losing data; a stored extra the record no longer has is ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from veriloop.records import (
    Attempt,
    Completion,
    ExecResult,
    Exemplar,
    LLMCall,
    Message,
    Node,
    Record,
    RegisteredModel,
    Run,
    Task,
    Usage,
    VerifyResult,
    new_id,
    utcnow,
)
from veriloop.store.models import (
    AttemptRow,
    ExecutionRow,
    ExemplarRow,
    LLMCallRow,
    ModelRow,
    NodeRow,
    RunRow,
    TaskRow,
    VerificationRow,
)

R = TypeVar("R", bound=Record)
Values = dict[str, Any]


def _extra(record: Record, mapped: frozenset[str]) -> Values:
    """JSON values of the fields that have no column."""
    names = set(type(record).model_fields) - mapped
    return record.model_dump(mode="json", include=names) if names else {}


def _build(cls: type[R], values: Mapping[str, Any], extra: Mapping[str, Any] | None) -> R:
    fields = cls.model_fields
    merged = {key: value for key, value in (extra or {}).items() if key in fields and key not in values}
    return cls.model_validate({**values, **merged})


# --------------------------------------------------------------------------- runs, tasks, attempts

RUN_FIELDS = frozenset({"id", "agent", "suite", "model", "status", "settings", "created_at", "finished_at", "error"})


def run_values(run: Run) -> Values:
    return {
        "id": run.id,
        "agent": run.agent,
        "suite": run.suite,
        "model": run.model,
        "status": run.status.value,
        "settings": run.model_dump(mode="json", include={"settings"})["settings"],
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "error": run.error,
        "extra": _extra(run, RUN_FIELDS),
    }


def run_record(row: RunRow) -> Run:
    values = {name: getattr(row, name) for name in RUN_FIELDS}
    return _build(Run, values, row.extra)


TASK_FIELDS = frozenset(
    {"id", "suite", "prompt", "language", "entry_point", "tests", "public_tests", "spec", "reference", "metadata"}
)


def task_hash(task: Task) -> str:
    """Content hash of a task, so re-registering an unchanged suite writes nothing."""
    text = json.dumps(task.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def task_columns(task: Task) -> Values:
    """Column-keyed values (the `tasks` table names `metadata` a column, which the ORM calls `meta`)."""
    values = task.model_dump(mode="json")
    return {
        **{name: values[name] for name in TASK_FIELDS},
        "content_hash": task_hash(task),
        "updated_at": utcnow(),
        "extra": _extra(task, TASK_FIELDS),
    }


def task_record(row: TaskRow) -> Task:
    values = {name: getattr(row, name) for name in TASK_FIELDS - {"metadata"}}
    values["metadata"] = row.meta
    return _build(Task, values, row.extra)


ATTEMPT_FIELDS = frozenset(
    {"id", "run_id", "task_id", "status", "best_node_id", "score", "tokens", "seconds", "error", "created_at"}
)


def attempt_values(attempt: Attempt) -> Values:
    values = {name: getattr(attempt, name) for name in ATTEMPT_FIELDS}
    values["extra"] = _extra(attempt, ATTEMPT_FIELDS)
    return values


def attempt_record(row: AttemptRow) -> Attempt:
    return _build(Attempt, {name: getattr(row, name) for name in ATTEMPT_FIELDS}, row.extra)


# --------------------------------------------------------------------------- calls, executions, verifications

COMPLETION_FIELDS = frozenset(
    {"text", "token_ids", "logprobs", "finish_reason", "usage", "model", "params", "latency_s"}
)
USAGE_FIELDS = frozenset({"prompt_tokens", "completion_tokens"})
CALL_FIELDS = frozenset({"id", "run_id", "node_id", "task_id", "prompt", "completion", "created_at"})


def call_values(call: LLMCall) -> Values:
    completion = call.completion
    dumped = completion.model_dump(mode="json", include={"token_ids", "logprobs", "params"})
    extra: Values = {}
    for key, record, mapped in (
        ("call", call, CALL_FIELDS),
        ("completion", completion, COMPLETION_FIELDS),
        ("usage", completion.usage, USAGE_FIELDS),
    ):
        values = _extra(record, mapped)
        if values:
            extra[key] = values
    prompt = call.prompt if isinstance(call.prompt, str) else [m.model_dump(mode="json") for m in call.prompt]
    return {
        "id": call.id,
        "run_id": call.run_id,
        "node_id": call.node_id,
        "task_id": call.task_id,
        "model": completion.model,
        "prompt": prompt,
        "text": completion.text,
        "token_ids": dumped["token_ids"],
        "logprobs": dumped["logprobs"],
        "finish_reason": completion.finish_reason,
        "params": dumped["params"],
        "prompt_tokens": completion.usage.prompt_tokens,
        "completion_tokens": completion.usage.completion_tokens,
        "latency_s": completion.latency_s,
        "created_at": call.created_at,
        "extra": extra,
    }


def completion_record(row: LLMCallRow) -> Completion:
    extra = row.extra or {}
    usage = _build(
        Usage,
        {"prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens},
        extra.get("usage"),
    )
    values = {
        "text": row.text,
        "token_ids": row.token_ids,
        "logprobs": row.logprobs,
        "finish_reason": row.finish_reason,
        "usage": usage,
        "model": row.model,
        "params": row.params,
        "latency_s": row.latency_s,
    }
    return _build(Completion, values, extra.get("completion"))


def call_record(row: LLMCallRow) -> LLMCall:
    values = {
        "id": row.id,
        "run_id": row.run_id,
        "node_id": row.node_id,
        "task_id": row.task_id,
        "prompt": row.prompt,
        "completion": completion_record(row),
        "created_at": row.created_at,
    }
    return _build(LLMCall, values, (row.extra or {}).get("call"))


EXEC_FIELDS = frozenset(ExecResult.model_fields) & frozenset(
    {
        "status",
        "exit_code",
        "signal",
        "stdout",
        "stderr",
        "truncated",
        "wall_s",
        "cpu_s",
        "max_rss_mb",
        "sandbox",
        "sandbox_version",
        "tests",
    }
)


def execution_values(result: ExecResult, *, run_id: str | None, node_id: str | None, created_at: datetime) -> Values:
    values = {name: getattr(result, name) for name in EXEC_FIELDS - {"tests", "status"}}
    values["status"] = result.status.value
    values["tests"] = [test.model_dump(mode="json") for test in result.tests]
    return {
        "id": new_id(),
        "run_id": run_id,
        "node_id": node_id,
        "created_at": created_at,
        "extra": _extra(result, EXEC_FIELDS),
        **values,
    }


def execution_record(row: ExecutionRow) -> ExecResult:
    return _build(ExecResult, {name: getattr(row, name) for name in EXEC_FIELDS}, row.extra)


VERIFY_FIELDS = frozenset(
    {"status", "verified", "errors", "diagnostics", "score", "tool", "version", "duration_s", "cache_hit", "reason"}
)


def verification_values(
    result: VerifyResult, *, run_id: str | None, node_id: str | None, created_at: datetime
) -> Values:
    values = {name: getattr(result, name) for name in VERIFY_FIELDS - {"diagnostics", "status"}}
    values["status"] = result.status.value
    values["diagnostics"] = [diagnostic.model_dump(mode="json") for diagnostic in result.diagnostics]
    return {
        "id": new_id(),
        "run_id": run_id,
        "node_id": node_id,
        "created_at": created_at,
        "extra": _extra(result, VERIFY_FIELDS),
        **values,
    }


def verification_record(row: VerificationRow) -> VerifyResult:
    return _build(VerifyResult, {name: getattr(row, name) for name in VERIFY_FIELDS}, row.extra)


# --------------------------------------------------------------------------- nodes

NODE_COLUMNS = frozenset(
    {"id", "run_id", "task_id", "parent_id", "depth", "role", "messages", "code", "score", "created_at", "metadata"}
)
NODE_CHILDREN = frozenset({"completion", "exec_result", "verify_result"})


class NodeRows:
    """The rows one node becomes: itself, plus its LLM call, execution and verification when it has them."""

    def __init__(self, node: Node) -> None:
        messages = [message.model_dump(mode="json") for message in node.messages]
        self.node: Values = {
            "id": node.id,
            "run_id": node.run_id,
            "task_id": node.task_id,
            "parent_id": node.parent_id,
            "depth": node.depth,
            "role": node.role,
            "messages": None if node.completion is not None else messages,
            "code": node.code,
            "score": node.score,
            "created_at": node.created_at,
            "metadata": node.model_dump(mode="json", include={"metadata"})["metadata"],
            "extra": _extra(node, NODE_COLUMNS | NODE_CHILDREN),
        }
        self.call: Values | None = None
        if node.completion is not None:
            call = LLMCall(
                run_id=node.run_id,
                node_id=node.id,
                task_id=node.task_id,
                prompt=node.messages,
                completion=node.completion,
                created_at=node.created_at,
            )
            self.call = call_values(call)
        self.execution: Values | None = None
        if node.exec_result is not None:
            self.execution = execution_values(
                node.exec_result, run_id=node.run_id, node_id=node.id, created_at=node.created_at
            )
        self.verification: Values | None = None
        if node.verify_result is not None:
            self.verification = verification_values(
                node.verify_result, run_id=node.run_id, node_id=node.id, created_at=node.created_at
            )


def node_record(
    row: NodeRow,
    call: LLMCallRow | None,
    execution: ExecutionRow | None,
    verification: VerificationRow | None,
) -> Node:
    messages: Any = row.messages or []
    if call is not None:
        prompt = call.prompt
        messages = [Message(role="user", content=prompt)] if isinstance(prompt, str) else prompt
    values = {
        "id": row.id,
        "run_id": row.run_id,
        "task_id": row.task_id,
        "parent_id": row.parent_id,
        "depth": row.depth,
        "role": row.role,
        "messages": messages,
        "completion": completion_record(call) if call is not None else None,
        "code": row.code,
        "exec_result": execution_record(execution) if execution is not None else None,
        "verify_result": verification_record(verification) if verification is not None else None,
        "score": row.score,
        "created_at": row.created_at,
        "metadata": row.meta,
    }
    return _build(Node, values, row.extra)


# --------------------------------------------------------------------------- exemplars and models

EXEMPLAR_FIELDS = frozenset({"id", "kind", "language", "payload", "iteration", "run_id", "task_id", "created_at"})


def exemplar_values(exemplar: Exemplar) -> Values:
    values = {name: getattr(exemplar, name) for name in EXEMPLAR_FIELDS - {"payload"}}
    values["payload"] = exemplar.model_dump(mode="json", include={"payload"})["payload"]
    values["extra"] = _extra(exemplar, EXEMPLAR_FIELDS)
    return values


def exemplar_record(row: ExemplarRow) -> Exemplar:
    return _build(Exemplar, {name: getattr(row, name) for name in EXEMPLAR_FIELDS}, row.extra)


MODEL_FIELDS = frozenset({"id", "base", "method", "path", "data_hash", "metrics", "created_at"})


def model_values(model: RegisteredModel) -> Values:
    values = {name: getattr(model, name) for name in MODEL_FIELDS - {"metrics"}}
    values["metrics"] = model.model_dump(mode="json", include={"metrics"})["metrics"]
    values["extra"] = _extra(model, MODEL_FIELDS)
    return values


def model_record(row: ModelRow) -> RegisteredModel:
    return _build(RegisteredModel, {name: getattr(row, name) for name in MODEL_FIELDS}, row.extra)
