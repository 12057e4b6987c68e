"""`POST /api/judge`: verdicts and rewards for a batch of candidates, for trainers outside veriloop.

Small batches are answered in the response; large ones (or `mode: job`) become a job whose progress
streams over server-sent events and whose results read back in the same shape. The work is bounded:
per token (the bearer token, else the client address) at most `judge.token_requests` requests in
progress and `judge.token_queue` candidates waiting, `judge.queue_max` in all, else `429` with
`Retry-After`; bodies above `judge.max_body_mb` get `413` before they are parsed. A client that
disconnects from a synchronous request cancels its remaining candidates (their sandboxes are killed).
With `store: true` the candidates are recorded as a run (agent `judge`), one node per candidate, so
exports and trainers read them like any agent's trajectories.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import math
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veriloop.config import JudgeSettings, Settings
from veriloop.errors import NotFoundError
from veriloop.judge.engine import Judge, JudgeCandidate, RewardOptions, Verdict
from veriloop.records import Attempt, Completion, Node, Run, RunStatus, new_id
from veriloop.records import Message as ChatMessage
from veriloop.service.contract import JSONRoute, as_json
from veriloop.service.deps import app_store, settings_of
from veriloop.service.http_errors import APIError, error_response, sse_event_schema
from veriloop.service.openai_schema import ErrorResponse

PATH = "/api/judge"
router = APIRouter(tags=["judge"], route_class=JSONRoute)
SettingsDep = Annotated[Settings, Depends(settings_of)]


def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


MALLOC_TRIM = _malloc_trim()


def return_free_memory() -> None:
    """Hand the heap's free pages back to the system once the judge is idle.

    A burst of verdicts is parsed and serialised on many threads; glibc keeps the freed memory in
    per-thread arenas, so the server's resident size would stay at its peak after every burst.
    """
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeRequest(BaseModel):
    """A batch of candidates and how their verdicts become rewards."""

    model_config = ConfigDict(extra="forbid", strict=True)

    candidates: Annotated[list[JudgeCandidate], as_json(list[JudgeCandidate])] = Field(
        min_length=1, description="Judged in order; one verdict each."
    )
    reward: Annotated[RewardOptions, as_json(RewardOptions)] = Field(default_factory=RewardOptions)
    mode: Literal["auto", "sync", "job"] = Field(
        "auto", description="auto: answer here up to judge.sync_max candidates, else a job; sync or job: always."
    )
    store: bool = Field(False, description="Record the candidates as a run (agent `judge`) in the store.")
    security: bool = Field(True, description="Report bandit's findings (Python); off where the server disables it.")
    model: str | None = Field(None, max_length=200, description="The model that wrote the candidates (store).")
    suite: str | None = Field(None, max_length=100, description="Suite name for the stored run (store).")


class JudgeResponse(Strict):
    results: list[Verdict]
    run_id: str | None = Field(None, description="The stored run (store: true).")


class JudgeJob(Strict):
    """A batch judged in the background: poll it, or follow `events`."""

    id: str
    status: Literal["running", "finished", "cancelled", "failed"]
    total: int
    done: int
    passed: int
    results: list[Verdict] | None = Field(None, description="Every verdict, in order, once the job has finished.")
    run_id: str | None = None
    error: str | None = None
    events: str
    created_at: float


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Invalid request."},
    401: {"model": ErrorResponse, "description": "Missing or invalid bearer token."},
    413: {"model": ErrorResponse, "description": "Too many candidates or too large a body."},
    429: {
        "model": ErrorResponse,
        "description": "Too many requests or candidates in progress for this token or in all.",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}},
    },
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "No such job."}}


# --------------------------------------------------------------------------- state


@dataclass
class Account:
    """What one token has in progress."""

    requests: int = 0
    pending: int = 0


@dataclass
class JobState:
    id: str
    token: str
    total: int
    created_at: float = field(default_factory=time.time)
    verdicts: list[Verdict | None] = field(default_factory=list)
    status: Literal["running", "finished", "cancelled", "failed"] = "running"
    run_id: str | None = None
    error: str | None = None
    ended_at: float | None = None
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> JudgeJob:
        done = [v for v in self.verdicts if v is not None]
        finished = self.status == "finished"
        return JudgeJob(
            id=self.id,
            status=self.status,
            total=self.total,
            done=len(done),
            passed=sum(v.passed for v in done),
            results=[v for v in self.verdicts if v is not None] if finished else None,
            run_id=self.run_id,
            error=self.error,
            events=f"{PATH}/jobs/{self.id}/events",
            created_at=self.created_at,
        )


class JudgeService:
    """One judge per app, with the admission books (per token and in all) and the background jobs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config: JudgeSettings = settings.judge
        self.judge = Judge(
            settings,
            concurrency=self.config.concurrency or None,
            queue_timeout_s=self.config.queue_timeout_s,
            security=self.config.security,
        )
        self.accounts: dict[str, Account] = {}
        self.pending = 0
        self.jobs: dict[str, JobState] = {}
        self.seconds_per_candidate = 0.05

    def retry_after(self) -> int:
        """Seconds until the queue ahead has likely drained (at least 1)."""
        estimate = self.pending * self.seconds_per_candidate / self.judge.concurrency
        return max(1, min(120, math.ceil(estimate)))

    def admit(self, token: str, count: int) -> Account:
        if count > self.config.max_candidates:
            raise APIError(
                413, f"{count} candidates; at most {self.config.max_candidates} per request", code="too_many_candidates"
            )
        account = self.accounts.setdefault(token, Account())
        reason = None
        if account.requests >= self.config.token_requests:
            reason = f"{account.requests} requests of this token in progress (at most {self.config.token_requests})"
        elif account.pending + count > self.config.token_queue:
            reason = f"{account.pending} candidates of this token waiting (at most {self.config.token_queue})"
        elif self.pending + count > self.config.queue_max:
            reason = f"{self.pending} candidates waiting in all (at most {self.config.queue_max})"
        if reason is not None:
            raise Overloaded(reason, self.retry_after())
        account.requests += 1
        account.pending += count
        self.pending += count
        return account

    def settle(self, token: str, account: Account, remaining: int) -> None:
        """The request is over: its unjudged candidates leave the books too."""
        account.requests -= 1
        account.pending -= remaining
        self.pending -= remaining
        if account.requests == 0 and account.pending == 0:
            self.accounts.pop(token, None)
        if self.pending == 0 and not self.accounts:
            return_free_memory()

    def judged(self, account: Account, verdict: Verdict) -> None:
        account.pending -= 1
        self.pending -= 1
        if verdict.status != "infra_error":
            self.seconds_per_candidate = 0.9 * self.seconds_per_candidate + 0.1 * verdict.duration_s

    def forget_old_jobs(self) -> None:
        cutoff = time.time() - self.config.job_ttl_s
        for job_id in [j.id for j in self.jobs.values() if j.ended_at is not None and j.ended_at < cutoff]:
            del self.jobs[job_id]

    async def aclose(self) -> None:
        for job in list(self.jobs.values()):
            if job.task is not None and not job.task.done():
                job.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job.task
        await self.judge.aclose()


class Overloaded(APIError):
    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(429, message, type="rate_limit_error", code="overloaded")
        self.retry_after = retry_after


def service_of(request: Request) -> JudgeService:
    service: JudgeService | None = getattr(request.app.state, "judge", None)
    if service is None:
        service = JudgeService(request.app.state.settings)
        request.app.state.judge = service
    return service


ServiceDep = Annotated[JudgeService, Depends(service_of)]


def token_of(request: Request) -> str:
    """Who the limits count against: a hash of the bearer token, else the client's address."""
    scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and supplied.strip():
        return "token:" + hashlib.sha256(supplied.strip().encode()).hexdigest()[:16]
    host = request.client.host if request.client is not None else "unknown"
    return f"addr:{host}"


# --------------------------------------------------------------------------- storing


def _group(candidate: JudgeCandidate, index: int) -> str:
    if candidate.task_id:
        return candidate.task_id
    if candidate.prompt:
        return "prompt-" + hashlib.sha256(candidate.prompt.encode()).hexdigest()[:16]
    return f"candidate-{index}"


def store_verdicts(settings: Settings, app: FastAPI, body: JudgeRequest, verdicts: list[Verdict]) -> str:
    """Record the batch as a finished run of agent `judge`: one node (and one attempt) per candidate."""
    store = app_store(app)
    run = store.create_run(
        Run(
            agent="judge",
            suite=body.suite or "judge",
            model=body.model or "external",
            status=RunStatus.RUNNING,
            settings={"source": "POST /api/judge", "reward": body.reward.model_dump()},
        )
    )
    nodes = []
    for candidate, verdict in zip(body.candidates, verdicts, strict=True):
        messages = [ChatMessage(role="user", content=candidate.prompt)] if candidate.prompt else []
        nodes.append(
            Node(
                run_id=run.id,
                task_id=_group(candidate, verdict.index),
                role="judge",
                messages=messages,
                completion=Completion(text=candidate.code, model=body.model or ""),
                code=candidate.code,
                exec_result=verdict.execution,
                verify_result=verdict.verification,
                score=verdict.reward,
                metadata={
                    "judge_index": verdict.index,
                    "status": verdict.status,
                    "language": candidate.language,
                    "security": [f.model_dump() for f in verdict.security],
                },
            )
        )
    store.add_nodes(nodes)
    for node, verdict in zip(nodes, verdicts, strict=True):
        status: Literal["passed", "failed", "error"] = (
            "passed" if verdict.passed else "error" if verdict.status == "infra_error" else "failed"
        )
        store.add_attempt(
            Attempt(
                run_id=run.id,
                task_id=node.task_id,
                status=status,
                best_node_id=node.id,
                score=verdict.reward,
                seconds=verdict.duration_s,
            )
        )
    store.finish_run(run.id, RunStatus.FINISHED)
    return run.id


# --------------------------------------------------------------------------- routes


async def _watch_disconnect(request: Request, work: asyncio.Future[Any]) -> None:
    """Cancel `work` when the client goes away (the server's receive channel says `http.disconnect`)."""
    while not work.done():
        message = await request.receive()
        if message["type"] == "http.disconnect":
            work.cancel()
            return


@router.post(
    "/judge",
    responses={**ERRORS, 202: {"model": JudgeJob, "description": "A job: follow its events, then read its results."}},
)
async def judge_route(body: JudgeRequest, request: Request, service: ServiceDep, settings: SettingsDep) -> Any:
    """Judge a batch: one verdict per candidate, in order (`results`), or a job for large batches."""
    count = len(body.candidates)
    token = token_of(request)
    account = service.admit(token, count)
    as_job = body.mode == "job" or (body.mode == "auto" and count > service.config.sync_max)
    if as_job:
        return JSONResponse(
            start_job(service, settings, request.app, body, token, account).model_dump(mode="json"), status_code=202
        )
    remaining = count
    try:

        def hook(verdict: Verdict) -> None:
            nonlocal remaining
            remaining -= 1
            service.judged(account, verdict)

        work = asyncio.ensure_future(
            service.judge.judge_many(body.candidates, body.reward, hook, body.security and service.config.security)
        )
        watcher = asyncio.ensure_future(_watch_disconnect(request, work))
        try:
            verdicts = await work
        except asyncio.CancelledError:
            if not work.cancelled():
                raise
            return JSONResponse({"error": {"message": "client disconnected", "type": "cancelled"}}, status_code=499)
        finally:
            watcher.cancel()
        run_id = await asyncio.to_thread(store_verdicts, settings, request.app, body, verdicts) if body.store else None
        return JudgeResponse(results=verdicts, run_id=run_id)
    finally:
        service.settle(token, account, remaining)


def start_job(
    service: JudgeService, settings: Settings, app: FastAPI, body: JudgeRequest, token: str, account: Account
) -> JudgeJob:
    service.forget_old_jobs()
    job = JobState(id=new_id(), token=token, total=len(body.candidates), verdicts=[None] * len(body.candidates))
    remaining = job.total

    def hook(verdict: Verdict) -> None:
        nonlocal remaining
        remaining -= 1
        service.judged(account, verdict)
        job.verdicts[verdict.index] = verdict
        job.changed.set()

    async def run() -> None:
        try:
            verdicts = await service.judge.judge_many(
                body.candidates, body.reward, hook, body.security and service.config.security
            )
            if body.store:
                job.run_id = await asyncio.to_thread(store_verdicts, settings, app, body, verdicts)
            job.status = "finished"
        except asyncio.CancelledError:
            job.status = "cancelled"
        except Exception as exc:  # storing failed; the verdicts stay readable
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.ended_at = time.time()
            service.settle(token, account, remaining)
            job.changed.set()

    service.jobs[job.id] = job
    job.task = asyncio.ensure_future(run())
    return job.view()


def _job(service: JudgeService, job_id: str) -> JobState:
    job = service.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"judge job {job_id!r} not found")
    return job


@router.get("/judge/jobs/{job_id}", responses={**NOT_FOUND, 401: ERRORS[401]})
def judge_job(job_id: str, service: ServiceDep) -> JudgeJob:
    """A job's progress; its results once it has finished."""
    return _job(service, job_id).view()


@router.delete("/judge/jobs/{job_id}", responses={**NOT_FOUND, 401: ERRORS[401]})
async def cancel_judge_job(job_id: str, service: ServiceDep) -> JudgeJob:
    """Stop a running job: candidates not judged yet are dropped, running sandboxes killed."""
    job = _job(service, job_id)
    if job.task is not None and not job.task.done():
        job.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job.task
    return job.view()


@router.get(
    "/judge/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        **NOT_FOUND,
        401: ERRORS[401],
        200: {
            "content": {
                "text/event-stream": {
                    "schema": sse_event_schema(("progress", "end"), "The job's id, status, done, total and passed.")
                }
            },
            "description": "progress, then end",
        },
    },
)
async def judge_job_events(
    job_id: str, request: Request, service: ServiceDep, keepalive: float = Query(15.0, gt=0, le=60)
) -> StreamingResponse:
    """Server-sent events: `progress` ({done, total, passed}) as verdicts arrive, then `end` with the status."""
    job = _job(service, job_id)

    async def stream() -> AsyncIterator[str]:
        last = -1
        while not await request.is_disconnected():
            job.changed.clear()
            view = job.view()
            data = json.dumps(
                {"id": job.id, "status": view.status, "done": view.done, "total": view.total, "passed": view.passed}
            )
            if view.done != last:
                last = view.done
                yield f"event: progress\ndata: {data}\n\n"
            if view.status != "running":
                yield f"event: end\ndata: {data}\n\n"
                return
            try:
                await asyncio.wait_for(job.changed.wait(), keepalive)
            except TimeoutError:
                yield ": keep-alive\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


# --------------------------------------------------------------------------- body size


class BodyLimit:
    """Answers 413 to a judge request whose body exceeds `limit` bytes, before anything parses it."""

    def __init__(self, app: ASGIApp, limit: int, path: str = PATH) -> None:
        self.app = app
        self.limit = limit
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, f"request body over {self.limit} bytes", "invalid_request_error", code="body_too_large"
        )
        await response(scope, receive, send)


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the judge's routes under /api and its body limit."""

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return error_response(429, exc.message, exc.type, code=exc.code, headers={"Retry-After": str(exc.retry_after)})

    app.state.judge = None
    app.include_router(router, prefix="/api")
    app.add_middleware(BodyLimit, limit=int(settings.judge.max_body_mb * (1 << 20)))


async def close(app: FastAPI) -> None:
    service: JudgeService | None = getattr(app.state, "judge", None)
    if service is not None:
        app.state.judge = None
        await service.aclose()
