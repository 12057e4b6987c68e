"""The REST API under `/api`: runs (create, list, show, cancel, resume, live events), their tasks, attempts,
nodes and trees, executions and verifications, exports, and registered models.

Routes are thin: they validate, call the store (or the queue) and return records. Creating a run
validates the agent, its options and the suite slice before anything is written, so bad input
gets a 400 and changes nothing; the run is then queued and a worker (inside `veriloop serve`, or a
`veriloop worker` process) executes it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, Depends, Query, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from veriloop.agents.base import AGENTS
from veriloop.agents.runner import create_run
from veriloop.config import LLMSettings, Settings
from veriloop.errors import NotFoundError, VeriloopError
from veriloop.records import Attempt, ExecResult, Node, RegisteredModel, Run, RunStatus, VerifyResult, new_id
from veriloop.service.agent_options import AgentName, document_options, options_schemas, validate_options
from veriloop.service.contract import JSONRoute
from veriloop.service.deps import settings_of, store_of
from veriloop.service.http_errors import APIError, error_responses, sse_event_schema
from veriloop.service.views import RunOverview, RunPage, TaskRow, overview, progress_total, run_row, task_rows
from veriloop.store import RunSummary, TrajectoryStore
from veriloop.store.exports import EXPORT_FORMATS, EXPORT_KINDS, ExportFilter, ExportOptions, export
from veriloop.store.figures import RunComparison, compare_runs, full_summary
from veriloop.store.jobs import Job, JobQueue, JobStatus
from veriloop.tasks import SUITES
from veriloop.tasks.base import TRANSLATIONS
from veriloop.verifiers.base import VERIFIERS
from veriloop.verifiers.target import verifier_target

router = APIRouter(tags=["runs"], route_class=JSONRoute)

StoreDep = Annotated[TrajectoryStore, Depends(store_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]

ENDED = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-sent events: `event: progress` on every change, `event: end` once the run has ended; "
        "each `data:` is a JSON object with run_id, status, total, done, passed, nodes, tokens and pass_rate.",
        "content": {
            "text/event-stream": {"schema": sse_event_schema(("progress", "end"), "The run's counts as JSON.")}
        },
    }
}
DOWNLOAD_TYPES = {"jsonl": "application/jsonl", "parquet": "application/vnd.apache.parquet", "hf": "application/zip"}
DOWNLOAD_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The dataset: JSON lines, Parquet, or a zip of the Hugging Face `datasets` folder.",
        "content": {kind: {"schema": {"type": "string", "format": "binary"}} for kind in DOWNLOAD_TYPES.values()},
    }
}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestBody(BaseModel):
    """A request body: strict JSON types (no `"3"` for 3), no field the schema does not list."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RunCreate(RequestBody):
    """A run to queue: which agent, on which suite slice, with which model and options."""

    model_config = ConfigDict(json_schema_extra=document_options)

    agent: AgentName = Field(description="Agent (method) name, e.g. direct, mucode, alphaverus, f2strans, revise.")
    suite: str = Field(
        "humaneval",
        description="Task suite: a registered name (`GET /api/catalogue`) or `alphaverus-dafny2<verifier>`; any other "
        "name is a 404 (task files and datasets run with `veriloop run --suite`, not over the API).",
    )
    model: str | None = Field(None, description="Model for the run; None = the server's configured model.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The agent's options (validated by it): the schema of `agent`'s, one of the alternatives below.",
    )
    limit: int | None = Field(None, ge=1, description="Only the first N tasks of the suite.")
    task_ids: list[str] = Field(default_factory=list, description="Only these task ids (a missing one is a 404).")

    @field_validator("options")
    @classmethod
    def _agent_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        agent = info.data.get("agent")
        return validate_options(agent, options) if agent is not None else options


class RunWithJob(Strict):
    run: Run
    job: Job | None = None


class RunList(Strict):
    runs: list[RunOverview]


class RunDetail(Strict):
    summary: RunSummary
    job: Job | None
    total_tasks: int | None = Field(None, description="Tasks in the run's suite slice (None when it cannot load).")


class NamedExec(Strict):
    node_id: str
    task_id: str
    execution: ExecResult


class NamedVerify(Strict):
    node_id: str
    task_id: str
    verification: VerifyResult


Pairing = Literal["siblings", "best_worst"]
DEFAULT_PAIRING: tuple[Pairing, ...] = ("siblings", "best_worst")


class ExportCreate(RequestBody):
    kind: Literal["sft", "preference", "verifier", "prm", "trees"]
    format: Literal["jsonl", "parquet", "hf"] = "jsonl"
    run_ids: list[str] = Field(min_length=1, description="Runs to read (ids or unique prefixes).")
    verify_status: list[str] = Field(default_factory=list, description="Keep nodes with these verifier statuses.")
    pairing: list[Pairing] = Field(default_factory=lambda: list(DEFAULT_PAIRING))
    security: Literal["keep", "mark", "drop"] = Field(
        "keep", description="Candidates with security findings (judge runs): keep them, mark them or drop them."
    )


class ExportInfo(Strict):
    id: str
    status: Literal["running", "finished", "failed"]
    kind: str
    format: str
    run_ids: list[str]
    rows: int | None = None
    data_hash: str | None = None
    error: str | None = None
    download: str | None = None


class Catalogue(Strict):
    agents: list[str]
    agent_options: dict[str, dict[str, Any]] = Field(description="Each agent's options as a JSON schema.")
    suites: list[str]
    export_kinds: list[str]
    export_formats: list[str]


class ModelInfo(Strict):
    served: str = Field(description="The model this server's backend uses by default.")
    backend: str
    checkpoints: list[RegisteredModel]


# --------------------------------------------------------------------------- runs


@router.get("/runs")
def list_runs(
    store: StoreDep,
    agent: str | None = None,
    suite: str | None = None,
    status: RunStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> RunList:
    """Newest first, with pass rate, tokens and wall time; filter by agent, suite and status."""
    runs = store.list_runs(agent=agent, suite=suite, status=status, limit=limit)
    return RunList(runs=[run_row(store, run) for run in runs])


def served_suite(name: str) -> bool:
    """Whether the API runs the suite `name`: a registered one, or the Dafny sources to translate for a registered
    verifier with a language of its own. Never a task file or dataset (the server's files are not the client's to
    name), nor the registry's `module:attr` import path."""
    if name in SUITES:
        return True
    target = name.removeprefix(TRANSLATIONS)
    return name.startswith(TRANSLATIONS) and target in VERIFIERS and verifier_target(target).language is not None


@router.post("/runs", status_code=201, responses=error_responses(404, 503))
def create_run_route(body: RunCreate, store: StoreDep, settings: SettingsDep) -> RunWithJob:
    """Validate and store a run, then queue it for a worker."""
    if not served_suite(body.suite):
        raise NotFoundError(
            f"no suite {body.suite!r} here: the API runs {', '.join(sorted(SUITES))} and alphaverus-dafny2<verifier> "
            "(task files and datasets: `veriloop run --suite`)"
        )
    run_settings = settings
    if body.model and body.model != settings.llm.model:
        llm = LLMSettings.model_validate({**settings.llm.model_dump(), "model": body.model})
        run_settings = settings.model_copy(update={"llm": llm})
    run = create_run(
        store,
        run_settings,
        agent=body.agent,
        suite=body.suite,
        options=body.options,
        limit=body.limit,
        task_ids=body.task_ids,
        extra={"submitted_by": "api"},
    )
    job = JobQueue(store).enqueue(run.id)
    return RunWithJob(run=store.get_run(run.id), job=job)


@router.get("/runs/{run_id}")
def show_run(run_id: str, store: StoreDep, settings: SettingsDep) -> RunDetail:
    """Counts, held-out and public figures (pass@k with intervals), provenance, and the run's job."""
    summary = full_summary(store, run_id)
    job = JobQueue(store).get(summary.run.id)
    return RunDetail(summary=summary, job=job, total_tasks=progress_total(summary.run, settings))


@router.get("/runs/{run_id}/overview")
def run_overview(run_id: str, store: StoreDep, settings: SettingsDep) -> RunPage:
    """What the run page charts: pass rate per turn, pass@k, score histogram, error classes, slow/costly tasks."""
    return overview(store, store.get_run(run_id), settings)


@router.get("/runs/{run_id}/compare/{other_id}")
def compare_run(run_id: str, other_id: str, store: StoreDep) -> RunComparison:
    """This run (A) against another (B) on the tasks both finished: wins, losses, paired interval, McNemar p."""
    return compare_runs(store, run_id, other_id)


@router.post("/runs/{run_id}/cancel", status_code=202, responses=error_responses(409))
def cancel_run(run_id: str, store: StoreDep) -> RunWithJob:
    """A queued run ends now; a running one stops at its worker's next heartbeat."""
    run = store.get_run(run_id)
    if run.status in ENDED:
        raise APIError(409, f"run {run.id} already ended ({run.status.value})", code="run_ended")
    job = JobQueue(store).cancel(run.id)
    if job is None:
        if run.status is RunStatus.RUNNING:
            raise APIError(
                409,
                f"run {run.id} is executed outside the service's queue (veriloop run or demo); stop that process",
                code="not_queued",
            )
        store.finish_run(run.id, RunStatus.CANCELLED, error="cancelled")
    return RunWithJob(run=store.get_run(run.id), job=job)


@router.post("/runs/{run_id}/resume", status_code=202, responses=error_responses(409))
def resume_run(run_id: str, store: StoreDep) -> RunWithJob:
    """Queue a failed, cancelled or interrupted run again; finished tasks are not repeated."""
    run = store.get_run(run_id)
    queue = JobQueue(store)
    job = queue.get(run.id)
    if run.status is RunStatus.FINISHED:
        raise APIError(409, f"run {run.id} already finished", code="run_ended")
    if job is not None and job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
        raise APIError(409, f"run {run.id} is already {job.status.value}", code="run_active")
    if job is None and run.status is RunStatus.RUNNING:
        raise APIError(409, f"run {run.id} is running outside the service's queue", code="not_queued")
    job = queue.enqueue(run.id)
    return RunWithJob(run=store.get_run(run.id), job=job)


@router.get("/runs/{run_id}/events", response_class=StreamingResponse, responses=SSE_RESPONSE)
async def run_events(
    run_id: str, request: Request, store: StoreDep, settings: SettingsDep, interval: float = Query(0.5, gt=0, le=30)
) -> StreamingResponse:
    """Server-sent events: `progress` whenever the run's counts change, then `end` once it has ended."""
    run = await asyncio.to_thread(store.get_run, run_id)
    total = await asyncio.to_thread(progress_total, run, settings)

    async def stream() -> AsyncIterator[str]:
        last: str | None = None
        quiet = 0.0
        while not await request.is_disconnected():
            summary = await asyncio.to_thread(store.run_summary, run.id)
            data = json.dumps(
                {
                    "run_id": run.id,
                    "status": summary.run.status.value,
                    "total": total,
                    "done": sum(1 for task in summary.per_task if task.status in ("passed", "failed")),
                    "passed": summary.tasks_passed,
                    "nodes": summary.nodes,
                    "tokens": summary.tokens.total,
                    "pass_rate": summary.pass_rate,
                }
            )
            if data != last:
                last, quiet = data, 0.0
                yield f"event: progress\ndata: {data}\n\n"
            elif quiet >= 15:
                quiet = 0.0
                yield ": keep-alive\n\n"
            if summary.run.status in ENDED:
                yield f"event: end\ndata: {data}\n\n"
                return
            await asyncio.sleep(interval)
            quiet += interval

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


# --------------------------------------------------------------------------- tasks, attempts, nodes


@router.get("/runs/{run_id}/tasks")
def run_tasks(run_id: str, store: StoreDep) -> list[TaskRow]:
    """Per task: node count, depth, best score, latest attempt status, tokens and seconds."""
    return task_rows(store, store.get_run(run_id))


@router.get("/runs/{run_id}/attempts")
def run_attempts(run_id: str, store: StoreDep, task_id: str | None = None) -> list[Attempt]:
    return store.list_attempts(store.get_run(run_id).id, task_id)


@router.get("/runs/{run_id}/nodes")
def run_nodes(run_id: str, store: StoreDep, task_id: str | None = None) -> list[Node]:
    """Every node of the run (or of one task), parents before children."""
    return store.list_nodes(store.get_run(run_id).id, task_id=task_id)


@router.get("/runs/{run_id}/trees/{task_id:path}")
def task_tree(run_id: str, task_id: str, store: StoreDep) -> list[Node]:
    """One task's search tree: its nodes, parents before children (link them by `parent_id`)."""
    nodes = store.get_tree(store.get_run(run_id).id, task_id)
    if not nodes:
        raise NotFoundError(f"run {run_id} has no nodes for task {task_id!r}")
    return nodes


@router.get("/runs/{run_id}/executions")
def run_executions(run_id: str, store: StoreDep, task_id: str | None = None) -> list[NamedExec]:
    nodes = store.list_nodes(store.get_run(run_id).id, task_id=task_id)
    return [NamedExec(node_id=n.id, task_id=n.task_id, execution=n.exec_result) for n in nodes if n.exec_result]


@router.get("/runs/{run_id}/verifications")
def run_verifications(run_id: str, store: StoreDep, task_id: str | None = None) -> list[NamedVerify]:
    nodes = store.list_nodes(store.get_run(run_id).id, task_id=task_id)
    return [
        NamedVerify(node_id=n.id, task_id=n.task_id, verification=n.verify_result) for n in nodes if n.verify_result
    ]


@router.get("/nodes/{node_id}")
def get_node(node_id: str, store: StoreDep) -> Node:
    return store.get_node(node_id)


@router.get("/nodes/{node_id}/execution")
def node_execution(node_id: str, store: StoreDep) -> ExecResult:
    node = store.get_node(node_id)
    if node.exec_result is None:
        raise NotFoundError(f"node {node_id} has no execution")
    return node.exec_result


@router.get("/nodes/{node_id}/verification")
def node_verification(node_id: str, store: StoreDep) -> VerifyResult:
    node = store.get_node(node_id)
    if node.verify_result is None:
        raise NotFoundError(f"node {node_id} has no verification")
    return node.verify_result


# --------------------------------------------------------------------------- exports


def _export_dir(settings: Settings, export_id: str) -> Path:
    if not export_id.isalnum():
        raise NotFoundError(f"export {export_id!r} not found")
    return settings.paths.home / "exports" / export_id


def _write_info(folder: Path, info: ExportInfo) -> None:
    partial = folder / "export.json.partial"
    partial.write_text(info.model_dump_json(indent=2))
    partial.replace(folder / "export.json")


def _read_info(folder: Path, export_id: str) -> ExportInfo:
    try:
        return ExportInfo.model_validate_json((folder / "export.json").read_text())
    except FileNotFoundError:
        raise NotFoundError(f"export {export_id!r} not found") from None


def _run_export(store: TrajectoryStore, folder: Path, info: ExportInfo, body: ExportCreate) -> None:
    suffix = {"jsonl": ".jsonl", "parquet": ".parquet", "hf": ""}[body.format]
    filters = ExportFilter(verify_status=tuple(body.verify_status), security=body.security)
    options = ExportOptions(pairing=tuple(body.pairing), filters=filters)
    try:
        result = export(store, body.kind, info.run_ids, folder / f"{body.kind}{suffix}", body.format, options)
        if body.format == "hf":
            shutil.make_archive(str(folder / body.kind), "zip", root_dir=result["path"])
        info = info.model_copy(update={"status": "finished", "rows": result["rows"], "data_hash": result["data_hash"]})
    except (VeriloopError, OSError, ValueError) as exc:
        info = info.model_copy(update={"status": "failed", "error": f"{type(exc).__name__}: {exc}", "download": None})
    _write_info(folder, info)


@router.post("/exports", status_code=202, tags=["exports"], responses=error_responses(404))
def start_export(body: ExportCreate, background: BackgroundTasks, store: StoreDep, settings: SettingsDep) -> ExportInfo:
    """Start building a dataset from stored runs; poll `GET /api/exports/{id}`, then download it."""
    run_ids = [store.get_run(run_id).id for run_id in body.run_ids]  # 404 before anything is written
    export_id = new_id()
    folder = _export_dir(settings, export_id)
    folder.mkdir(parents=True, exist_ok=False)
    info = ExportInfo(
        id=export_id,
        status="running",
        kind=body.kind,
        format=body.format,
        run_ids=run_ids,
        download=f"/api/exports/{export_id}/download",
    )
    _write_info(folder, info)
    background.add_task(_run_export, store, folder, info, body)
    return info


@router.get("/exports/{export_id}", tags=["exports"])
def export_status(export_id: str, settings: SettingsDep) -> ExportInfo:
    return _read_info(_export_dir(settings, export_id), export_id)


@router.get(
    "/exports/{export_id}/download",
    tags=["exports"],
    response_class=FileResponse,
    responses={**DOWNLOAD_RESPONSE, **error_responses(409)},
)
def download_export(export_id: str, settings: SettingsDep) -> FileResponse:
    """The dataset file: JSON lines, Parquet, or a zip of the `datasets` folder."""
    folder = _export_dir(settings, export_id)
    info = _read_info(folder, export_id)
    if info.status != "finished":
        raise APIError(409, f"export {export_id} is {info.status}" + (f": {info.error}" if info.error else ""))
    name = {"jsonl": f"{info.kind}.jsonl", "parquet": f"{info.kind}.parquet", "hf": f"{info.kind}.zip"}[info.format]
    return FileResponse(folder / name, filename=name, media_type=DOWNLOAD_TYPES[info.format])


# --------------------------------------------------------------------------- catalogue and models


@router.get("/catalogue", tags=["service"])
def catalogue() -> Catalogue:
    """Names the create form and clients may use."""
    return Catalogue(
        agents=sorted(AGENTS),
        agent_options=options_schemas(),
        suites=sorted(SUITES),
        export_kinds=list(EXPORT_KINDS),
        export_formats=list(EXPORT_FORMATS),
    )


@router.get("/models", tags=["models"])
def list_models(store: StoreDep, settings: SettingsDep) -> ModelInfo:
    """The served model and the registered checkpoints (usable as `checkpoint:ID`)."""
    return ModelInfo(served=settings.llm.model, backend=settings.llm.backend, checkpoints=store.list_models())


@router.get("/models/{model_id}", tags=["models"])
def get_model(model_id: str, store: StoreDep) -> RegisteredModel:
    return store.get_model(model_id)
