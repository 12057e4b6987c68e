"""SandboxFusion's API on veriloop's trusted sandbox: `POST /run_code`, `POST /submit`, `GET /v1/ping` under `PREFIX`.

verl (`reward_model.sandbox_fusion.url`) and SandboxFusion's own client (`sandbox-fusion` on PyPI) speak this API:
one program per `/run_code` call with `{code, language, stdin, compile_timeout, run_timeout, memory_limit_MB, files,
fetch_files}`, answered with `status` (Success / Failed / SandboxError) and `compile_result` / `run_result`
(`status` Finished / Error / TimeLimitExceeded, `return_code`, `stdout`, `stderr`, `execution_time`). The field
names, enum strings and SandboxFusion's status rule (`parse_run_status`: a command that errs is SandboxError, a
time-out or a non-zero return code is Failed, else Success) are kept; unknown request fields are ignored.

What runs is the job `sandbox.languages.program_job` builds, in the judge's sandbox, behind the judge's slots, so
`/run_code`, `/api/judge` and `/submit` share one bounded pool. Where this differs from SandboxFusion (limits,
languages, files, overload) is listed in docs/judge.md. Overload is `504` with `Retry-After`: a request that finds
no sandbox slot within `wait_s` seconds (`judge.queue_timeout_s`, at most `RUN_CODE_WAIT_S`) is answered 504,
the one status verl retries, before verl's own read time-out (compile + run + 10 s) would fire and score the case
as an error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, Strict, StringConstraints
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Receive, Scope, Send

from veriloop.errors import ConfigError, NotFoundError
from veriloop.judge.engine import JudgeCandidate, Verdict
from veriloop.llm.codeblocks import extract_code
from veriloop.records import ExecResult, ExecStatus
from veriloop.sandbox import Job, Limits
from veriloop.sandbox import languages as langs
from veriloop.sandbox.checks import normalise
from veriloop.service.http_errors import APIError, error_response
from veriloop.service.judge import (
    ERRORS,
    BodyLimit,
    JudgeService,
    _watch_disconnect,
    return_free_memory,
    service_of,
)
from veriloop.service.openai_schema import ErrorResponse

PREFIX = "/api/sandbox-fusion"
"""Where the routes are served: verl's `sandbox_fusion.url` is `http://HOST:PORT/api/sandbox-fusion/run_code`."""
RUN_CODE_WAIT_S = 8.0
"""A `/run_code` that finds no sandbox slot within this many seconds is answered 504 (verl retries 504 only)."""
MAX_TIMEOUT_S = 60.0
"""`compile_timeout` and `run_timeout` are clamped to [MIN_TIMEOUT_S, MAX_TIMEOUT_S]."""
MIN_TIMEOUT_S = 0.1
MEMORY_MB = (32, 4096)
"""`memory_limit_MB` > 0 is clamped to this range; -1 (or any value <= 0) means the server's `sandbox.memory_mb`."""
LANGUAGE_MAP = {
    "python": "python",
    "cpp": "cpp",
    "nodejs": "javascript",
    "go": "go",
    "java": "java",
    "rust": "rust",
    "c": "c",
    "javascript": "javascript",
}
"""SandboxFusion language -> veriloop language (plus veriloop's own `c` and `javascript`)."""
SF_COMPILED = frozenset({"cpp", "go", "java", "rust", "c"})
"""Languages SandboxFusion compiles in a step of its own (compile_result); the others report everything as run_result
(veriloop's syntax check of Python and JavaScript is folded into run_result, as SandboxFusion has no such step)."""

Language = Literal["python", "cpp", "nodejs", "go", "java", "rust", "c", "javascript"]
"""The SandboxFusion languages served here (plus veriloop's c and javascript); the schema refuses the others."""

router = APIRouter(tags=["sandbox-fusion"])


async def _service(request: Request) -> JudgeService:
    """The app's judge service; an async dependency, so FastAPI does not hop to a worker thread to get it."""
    return service_of(request)


ServiceDep = Annotated[JudgeService, Depends(_service)]


# --------------------------------------------------------------------------- the wire format


class Lenient(BaseModel):
    """SandboxFusion's clients send fields this server does not read (and newer ones): they are ignored."""

    model_config = ConfigDict(extra="ignore")


_SEGMENT = r"(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)"
FileName = Annotated[str, StringConstraints(pattern=f"^{_SEGMENT}(?:/{_SEGMENT})*$", max_length=255)]
"""A relative path inside the work dir: no leading slash, no empty, `.` or `..` segments."""
Base64 = Annotated[str, StringConstraints(pattern=r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]


class CommandRunStatus(StrEnum):
    FINISHED = "Finished"
    ERROR = "Error"
    TIME_LIMIT_EXCEEDED = "TimeLimitExceeded"


class RunStatus(StrEnum):
    SUCCESS = "Success"
    FAILED = "Failed"
    SANDBOX_ERROR = "SandboxError"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = Field(None, description="Wall seconds (the whole job's, compile included).")
    cpu_time: float | None = Field(None, description="CPU seconds of the job (the official client reads it).")
    return_code: int | None = Field(None, description="Exit code; -N for a process killed by signal N; null on TLE.")
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(Lenient):
    """One program run, exactly as verl and SandboxFusion's client send it."""

    compile_timeout: Annotated[float, Strict()] = Field(10, description="Seconds to compile (clamped to 0.1..60).")
    run_timeout: Annotated[float, Strict()] = Field(10, description="Seconds for the run (clamped to 0.1..60).")
    memory_limit_MB: Annotated[int, Strict()] = Field(
        -1, description="Memory of the job in MiB (cgroup); <= 0: the server's default."
    )
    code: str = Field(max_length=1_000_000, description="The program.")
    stdin: str | None = Field(None, max_length=16_000_000, description="Its standard input.")
    language: Language = Field(description="python, cpp, nodejs, go, java, rust (also veriloop's c, javascript).")
    files: dict[FileName, Base64 | None] = Field(
        default_factory=dict,
        description="Relative path -> base64 content, written beside the program (UTF-8 text; else SandboxError).",
        json_schema_extra={"additionalProperties": False},
    )
    fetch_files: list[str] = Field(default_factory=list, description="Accepted; no file is fetched back.")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


class StdinOf(Lenient):
    stdin: str = Field("", max_length=16_000_000)


class StdoutOf(Lenient):
    stdout: str = Field(max_length=16_000_000)


class StdioTest(Lenient):
    """SandboxFusion's GeneralStdioTest (CommonOJ): stdin in, stdout expected."""

    input: StdinOf
    output: StdoutOf


class ProvidedData(Lenient):
    """The problem itself, for a dataset this server has no table of (CommonOJ's `test` cases)."""

    test: list[StdioTest] = Field(min_length=1, max_length=1000)


class TestConfig(Lenient):
    __test__ = False  # not a pytest class

    dataset_type: str | None = Field(None, description="Read as CommonOJDataset when provided_data has test cases.")
    language: Language | None = Field(None, description="CommonOJ: the program's language (default python).")
    locale: str | None = None
    is_fewshot: bool | None = None
    compile_timeout: Annotated[float, Strict()] | None = None
    run_timeout: Annotated[float, Strict()] | None = None
    custom_extract_logic: None = Field(None, description="Not supported (it would run the caller's code here).")
    provided_data: ProvidedData | None = Field(None, description="{test: [{input: {stdin}, output: {stdout}}]}.")
    extra: dict[str, Any] = Field(default_factory=dict, description="run_all_cases, is_freeform.")


class SubmitRequest(Lenient):
    dataset: str = Field(max_length=200)
    id: int | str
    completion: str = Field(max_length=1_000_000)
    config: TestConfig = Field(default_factory=TestConfig)


class EvalTestCase(BaseModel):
    passed: bool
    exec_info: RunCodeResponse
    test_info: dict[str, Any] | None = None


class EvalResult(BaseModel):
    id: int | str
    accepted: bool
    extracted_code: str
    full_code: str | None = None
    test_code: str | None = None
    tests: list[EvalTestCase]
    extracted_type: Literal["fenced", "incomplete_fenced", "heuristic", "empty"] | None = None
    extra: dict[str, Any] | None = None


BUSY: dict[int | str, dict[str, Any]] = {
    504: {
        "model": ErrorResponse,
        "description": "No sandbox slot came free in time (overloaded); retry after Retry-After seconds.",
        "headers": {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}},
    }
}
RESPONSES: dict[int | str, dict[str, Any]] = {400: ERRORS[400], 401: ERRORS[401], 413: ERRORS[413], **BUSY}
NO_PROBLEM: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "No such dataset or task here (give the problem in provided_data)."}
}


class Busy(APIError):
    """Answered 504 + Retry-After: verl retries a 504 (and nothing else), SandboxFusion's client retries any error."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(504, message, type="server_error", code="overloaded")
        self.retry_after = retry_after


# --------------------------------------------------------------------------- running a program


def clamp_s(value: float) -> float:
    if not math.isfinite(value):
        return MAX_TIMEOUT_S if value > 0 else MIN_TIMEOUT_S
    return min(max(value, MIN_TIMEOUT_S), MAX_TIMEOUT_S)


def limits_for(service: JudgeService, body: RunCodeRequest) -> Limits:
    """The server's default limits with the request's time-outs and memory (clamped)."""
    update: dict[str, Any] = {"wall_s": clamp_s(body.run_timeout), "compile_s": clamp_s(body.compile_timeout)}
    if body.memory_limit_MB > 0:
        update["memory_mb"] = min(max(body.memory_limit_MB, MEMORY_MB[0]), MEMORY_MB[1])
    base = service.judge._limits  # the judge's defaults: sandbox.* settings
    return base.model_copy(update=update)


def language_of(name: str) -> str:
    if name not in LANGUAGE_MAP:
        supported = ", ".join(sorted(set(LANGUAGE_MAP) - {"javascript"}))
        raise APIError(400, f"language {name!r} is not supported here; supported: {supported}", param="language")
    return LANGUAGE_MAP[name]


class NotText(Exception):
    """A file of the request is not UTF-8 text (veriloop's jobs carry text files): answered SandboxError."""


def decode_files(files: dict[str, str | None]) -> dict[str, str]:
    """SandboxFusion's `files` (path -> base64) as job files; None contents and IGNORE_THIS_FILE paths are skipped."""
    out: dict[str, str] = {}
    for name, content in files.items():
        if not isinstance(content, str) or "IGNORE_THIS_FILE" in name:
            continue
        try:
            out[name] = base64.b64decode(content, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise NotText(f"files[{name!r}] is not UTF-8 text: only text files are supported here") from None
    return out


def build_job(service: JudgeService, body: RunCodeRequest) -> tuple[Job, str]:
    """The job for one `/run_code` request and its veriloop language."""
    language = language_of(body.language)
    toolchain = service.judge.sandbox.toolchain
    limits = limits_for(service, body)
    job = langs.program_job(language, toolchain, body.code, stdin=body.stdin, limits=limits)
    extra = decode_files(body.files)
    if extra:
        job = Job.model_validate({**job.model_dump(), "files": {**extra, **job.files}})  # the program wins, as there
    return job, language


async def gated_run(service: JudgeService, job: Job, wait_s: float) -> ExecResult:
    """Run `job` in one of the judge's slots (shared with /api/judge); Busy when none frees within `wait_s`."""
    judge = service.judge
    service.pending += 1
    try:
        if service.pending > service.config.queue_max:
            raise Busy(f"{service.pending - 1} candidates waiting in all", service.retry_after())
        try:
            await asyncio.wait_for(judge._slots.acquire(), wait_s)
        except TimeoutError:
            raise Busy(f"no sandbox slot within {wait_s:g} s", service.retry_after()) from None
        judge.in_flight += 1
        try:
            await judge.start()
            result = await judge.sandbox.run(job)
        finally:
            judge.in_flight -= 1
            judge._slots.release()
        if result.status is not ExecStatus.INFRA_ERROR:
            service.seconds_per_candidate = 0.9 * service.seconds_per_candidate + 0.1 * result.wall_s
        return result
    finally:
        service.pending -= 1
        if service.pending == 0 and not service.accounts:
            return_free_memory()


def return_code(result: ExecResult) -> int | None:
    if result.exit_code is not None:
        return result.exit_code
    return -result.signal if result.signal else None


def response_of(result: ExecResult, language: str, *, compile_timed_out: bool = False) -> RunCodeResponse:
    """SandboxFusion's answer for a veriloop ExecResult (its status rule: Error -> SandboxError; TLE or rc != 0 ->
    Failed; else Success)."""
    status = result.status
    if status is ExecStatus.INFRA_ERROR:
        return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=result.stderr.strip() or "sandbox error")
    compiled = language in SF_COMPILED
    wall, cpu = round(result.wall_s, 6), result.cpu_s
    finished_compile = CommandRunResult(status=CommandRunStatus.FINISHED, return_code=0, stdout="", stderr="")

    def run(status: CommandRunStatus = CommandRunStatus.FINISHED, code: int | None = None) -> CommandRunResult:
        return CommandRunResult(
            status=status,
            execution_time=wall,
            cpu_time=cpu,
            return_code=code,
            stdout=result.stdout,
            stderr=result.stderr,
        )

    if status is ExecStatus.PASSED:
        return RunCodeResponse(
            status=RunStatus.SUCCESS, compile_result=finished_compile if compiled else None, run_result=run(code=0)
        )
    if status is ExecStatus.TIMEOUT:
        if compiled and compile_timed_out:
            return RunCodeResponse(status=RunStatus.FAILED, compile_result=run(CommandRunStatus.TIME_LIMIT_EXCEEDED))
        return RunCodeResponse(
            status=RunStatus.FAILED,
            compile_result=finished_compile if compiled else None,
            run_result=run(CommandRunStatus.TIME_LIMIT_EXCEEDED),
        )
    code = return_code(result)
    if status is ExecStatus.COMPILE_ERROR and compiled:
        return RunCodeResponse(status=RunStatus.FAILED, compile_result=run(code=code if code else 1))
    message = {
        ExecStatus.MEMORY_LIMIT: "memory limit exceeded",
        ExecStatus.OUTPUT_LIMIT: "output limit exceeded",
        ExecStatus.FAILED: "tests failed",
    }.get(status, "")
    return RunCodeResponse(
        status=RunStatus.FAILED,
        message=message,
        compile_result=finished_compile if compiled else None,
        run_result=run(code=code if code else 1),
    )


async def _compile_timed_out(service: JudgeService, job: Job, result: ExecResult, wait_s: float) -> bool:
    """Which step of a compiled job ran out of time. The ExecResult has one wall time for the job: below the run
    limit only the compile can have timed out, below the compile limit only the run; between, the compile alone is
    run again (rare: a time-out of a compiled language where both limits are close)."""
    compile_s, wall_s = job.limits.compile_s, job.limits.wall_s
    if result.wall_s < wall_s:
        return True
    if result.wall_s < compile_s:
        return False
    compile_only = job.model_copy(update={"steps": [s for s in job.steps if s.kind == "compile"]})
    again = await gated_run(service, compile_only, wait_s)
    return again.status is ExecStatus.TIMEOUT


def wait_s_of(service: JudgeService) -> float:
    return min(service.config.queue_timeout_s, RUN_CODE_WAIT_S)


async def run_code(service: JudgeService, body: RunCodeRequest) -> RunCodeResponse:
    """One SandboxFusion run: the answer, or Busy (504) when the server is overloaded."""
    try:
        job, language = build_job(service, body)
    except NotText as exc:
        return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=str(exc))
    except ConfigError as exc:  # a language whose tools this sandbox lacks: the server's fault, not the request's
        if not langs.available(language_of(body.language), service.judge.sandbox.toolchain):
            return RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=str(exc))
        raise
    wait_s = wait_s_of(service)
    result = await gated_run(service, job, wait_s)
    timed_out_compiling = False
    if result.status is ExecStatus.TIMEOUT and language in SF_COMPILED:
        timed_out_compiling = await _compile_timed_out(service, job, result, wait_s)
    return response_of(result, language, compile_timed_out=timed_out_compiling)


@router.post("/run_code", response_model=RunCodeResponse, responses=RESPONSES)
async def run_code_route(body: RunCodeRequest, request: Request, service: ServiceDep) -> Response:
    """SandboxFusion's `/run_code`: compile (where the language compiles) and run one program with its stdin."""
    work = asyncio.ensure_future(run_code(service, body))
    watcher = asyncio.ensure_future(_watch_disconnect(request, work))  # verl gave up: kill the run
    try:
        answer = await work
    finally:
        watcher.cancel()
    return Response(answer.model_dump_json(), media_type="application/json")  # one serialisation, not FastAPI's two


@router.get("/v1/ping", responses={401: ERRORS[401]})
async def ping() -> str:
    """SandboxFusion's liveness probe: `"pong"`."""
    return "pong"


# --------------------------------------------------------------------------- /submit


MBPP_STOPS = ("\nassert", '\n"""')
HUMANEVAL_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ", "\n```")
"""HumanEval's stop sequences: a raw completion continues the prompt's function up to the first of them."""
HUMANEVAL_DATASETS = {"humaneval_python": "humaneval", "humaneval": "humaneval", "shadow_humaneval_python": "humaneval"}
MBPP_DATASETS = {"mbpp": "mbpp"}


def _task_id(dataset: str, ident: int | str) -> tuple[str, str] | None:
    """(suite, task id) of a SandboxFusion dataset id that names a veriloop suite task."""
    text = str(ident)
    if dataset in HUMANEVAL_DATASETS:
        return "humaneval", text if text.startswith("HumanEval/") else f"HumanEval/{text}"
    if dataset in MBPP_DATASETS:
        return "mbpp", text if text.startswith("MBPP/") else f"MBPP/{text}"
    return None


def _cut(code: str, stops: Sequence[str]) -> str:
    ends = [index for index in (code.find(stop) for stop in stops) if index >= 0]
    return code[: min(ends)] if ends else code


def extracted(completion: str, language: str) -> tuple[str, Literal["fenced", "empty", "heuristic"]]:
    """The completion's program: its fenced block tagged `language` (else its first), else the text itself."""
    code = extract_code(completion, language)
    if "```" in completion:
        return code, "fenced"
    return code, "empty" if not code.strip() else "heuristic"


async def submit(service: JudgeService, body: SubmitRequest) -> EvalResult:
    """CommonOJ when the request carries the cases; else a HumanEval or MBPP task; else 404 (no such dataset here)."""
    data = body.config.provided_data
    if data is not None:
        return await _submit_stdio(service, body, [(case.input.stdin, case.output.stdout) for case in data.test])
    named = _task_id(body.dataset, body.id)
    if named is None:
        raise NotFoundError(
            f"no dataset {body.dataset!r} here: humaneval_python and mbpp name their tasks by id; other problems "
            "come in config.provided_data ({test: [{input: {stdin}, output: {stdout}}]})"
        )
    suite, task_id = named
    return await _submit_judged(service, body, task_id, suite)


async def _submit_stdio(service: JudgeService, body: SubmitRequest, cases: list[tuple[str, str]]) -> EvalResult:
    """CommonOJ: one run per case, stdout compared on the host (veriloop's comparison: trailing whitespace ignored);
    the first failing case ends the submission unless `extra.run_all_cases`, as in SandboxFusion."""
    config = body.config
    language = config.language or "python"
    code, kind = extracted(body.completion, LANGUAGE_MAP[language])
    compiled = LANGUAGE_MAP[language] in SF_COMPILED
    default_run = 10.0 if compiled else 20.0  # SandboxFusion's defaults for compiled and other languages
    requests = [
        RunCodeRequest.model_validate(
            {
                "code": code,
                "language": language,
                "stdin": stdin,
                "compile_timeout": config.compile_timeout or 10.0,
                "run_timeout": config.run_timeout or default_run,
            }
        )
        for stdin, _ in cases
    ]
    tasks = [asyncio.ensure_future(run_code(service, request)) for request in requests]
    outcomes: list[EvalTestCase] = []
    run_all = bool(config.extra.get("run_all_cases", False))
    try:
        for task, (stdin, expected) in zip(tasks, cases, strict=True):
            answer = await task
            stdout = answer.run_result.stdout if answer.run_result is not None else None
            passed = answer.status is RunStatus.SUCCESS and normalise(stdout or "") == normalise(expected)
            info = {"input": {"stdin": stdin}, "output": {"stdout": expected}}
            outcomes.append(EvalTestCase(passed=passed, exec_info=answer, test_info=info))
            if not passed and not run_all:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    accepted = len(outcomes) == len(cases) and all(t.passed for t in outcomes)
    return EvalResult(id=body.id, accepted=accepted, extracted_code=code, tests=outcomes, extracted_type=kind)


async def _submit_judged(service: JudgeService, body: SubmitRequest, task_id: str, suite: str) -> EvalResult:
    """A veriloop task (HumanEval, MBPP): the judge's verdict, one test case per test it reports.

    HumanEval: a completion without a fence continues the prompt (cut at HumanEval's stop sequences), as
    SandboxFusion's non-freeform mode; a fenced one (or `extra.is_freeform`) is the whole program. MBPP: the fenced
    block (else the text) up to `[DONE]`, cut before the tests it may repeat (SandboxFusion's postprocessing)."""
    fields: dict[str, Any] = {"task_id": task_id, "suite": suite, "language": "python"}
    try:
        task = service.judge.task_of(JudgeCandidate.model_validate({**fields, "code": ""}))
    except ConfigError as exc:
        raise NotFoundError(str(exc)) from None
    code, kind = extracted(body.completion, "python")
    if suite == "mbpp":
        code = _cut(code.split("[DONE]")[0], MBPP_STOPS)
    elif not body.config.extra.get("is_freeform") and "```" not in body.completion:
        code, kind = task.prompt + _cut(body.completion, HUMANEVAL_STOPS), "heuristic"
    verdict = await service.judge.judge(JudgeCandidate.model_validate({**fields, "code": code}), 0, None, False)
    return eval_result(service, body.id, code, kind, verdict, "python")


def eval_result(
    service: JudgeService, ident: int | str, code: str, kind: Any, verdict: Verdict, language: str
) -> EvalResult:
    if verdict.status == "infra_error" and verdict.error and verdict.error.startswith("overloaded"):
        raise Busy(verdict.error, service.retry_after())
    if verdict.execution is not None:
        info = response_of(verdict.execution, language)
    elif verdict.status == "infra_error":
        info = RunCodeResponse(status=RunStatus.SANDBOX_ERROR, message=verdict.error or "sandbox error")
    else:  # a formal verifier's verdict
        reason = verdict.verification.reason if verdict.verification is not None else ""
        info = RunCodeResponse(
            status=RunStatus.SUCCESS if verdict.passed else RunStatus.FAILED,
            message=f"{verdict.status}: {reason}".rstrip(": "),
        )
    tests = [
        EvalTestCase(passed=t.passed, exec_info=info, test_info={"name": t.name, "message": t.message})
        for t in verdict.tests
    ] or [EvalTestCase(passed=verdict.passed, exec_info=info, test_info={"status": verdict.status})]
    return EvalResult(
        id=ident,
        accepted=verdict.passed,
        extracted_code=code,
        tests=tests,
        extracted_type=kind,
        extra={"status": verdict.status, "pass_rate": verdict.pass_rate},
    )


@router.post("/submit", responses={**RESPONSES, **NO_PROBLEM})
async def submit_route(body: SubmitRequest, service: ServiceDep) -> EvalResult:
    """SandboxFusion's `/submit`: judge one completion of a dataset problem, with per-test results."""
    return await submit(service, body)


# --------------------------------------------------------------------------- credentials in the URL


class URLCredentials:
    """On the paths under `prefixes`, `Authorization: Basic` credentials whose password is the API token count as
    that bearer token: verl and OpenRLHF send no headers of their own, but put a URL's `user:password@` in Basic
    auth (requests, aiohttp). Installed outside the token middleware; other paths are untouched."""

    def __init__(self, app: ASGIApp, prefixes: Sequence[str]) -> None:
        self.app = app
        self.prefixes = tuple(prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes):
            headers = MutableHeaders(scope=scope)
            scheme, _, value = headers.get("authorization", "").partition(" ")
            if scheme.lower() == "basic":
                try:
                    _, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    password = ""
                headers["authorization"] = f"Bearer {password}"
        await self.app(scope, receive, send)


def install(app: FastAPI, limit_bytes: int) -> None:
    """Mount the SandboxFusion routes under PREFIX, their body limits and the 504 handler."""

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy) -> JSONResponse:
        return error_response(504, exc.message, exc.type, code=exc.code, headers={"Retry-After": str(exc.retry_after)})

    app.include_router(router, prefix=PREFIX)
    for path in ("/run_code", "/submit"):
        app.add_middleware(BodyLimit, limit=limit_bytes, path=PREFIX + path)


def install_credentials(app: FastAPI, prefixes: Sequence[str]) -> None:
    """Add after the token middleware (so it runs first): Basic credentials from the URL count on `prefixes`."""
    app.add_middleware(URLCredentials, prefixes=[p.rstrip("/") + "/" for p in prefixes])
