"""Nagini: Python programs with `nagini_contracts` (Requires/Ensures/Invariant), verified by a warm worker.

A cold `nagini FILE` costs 7 to 27 s (JVM start, Viper prelude, JIT); the warm worker (`nagini_worker.py`, run
by the Nagini virtualenv's Python) pays that once and then answers in about a second per file. Workers are
shared by every verifier in the process (keyed by interpreter), serve one request at a time, and are
recycled when they crash, run past the timeout, or grow beyond the memory bound. Nagini's own `--server`
mode is avoided: it binds a fixed port on all interfaces, has no timeout and dies on some inputs.
"""

from __future__ import annotations

import ast
import asyncio
import atexit
import contextlib
import functools
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import SandboxError
from veriloop.records import Candidate, Diagnostic, Task, VerifyResult, VerifyStatus
from veriloop.sandbox.cgroups import JobCgroup
from veriloop.sandbox.tools import DEFAULT as DEFAULT_SANDBOX
from veriloop.sandbox.tools import ENV as TOOL_ENV
from veriloop.sandbox.tools import JOB_DIR, ToolSandbox, joiner, release
from veriloop.verifiers.base import FormalVerifier, infra_error, node_score, tool_sandbox, tool_version
from veriloop.verifiers.nagini_dialect import NAGINI
from veriloop.verifiers.target import VerifierTarget, hash_comments

WORKER = Path(__file__).with_name("nagini_worker.py")
START_TIMEOUT_S = 600.0
VERSION_PROBE = "import importlib.metadata as m; print('nagini', m.version('nagini'))"
"""What the virtualenv's Python is asked for a version without starting the JVM (the worker reports the same)."""
VERSION = r"nagini (\S+)"

CLASSES: tuple[tuple[str, str], ...] = (
    ("postcondition", "postcondition"),
    ("precondition", "precondition"),
    ("invariant", "invariant"),
    ("termination", "decreases"),
    ("decreases", "decreases"),
    ("assert", "assertion"),
    ("permission", "permission"),
    ("fold", "permission"),
    ("exhale", "permission"),
    ("type", "type"),
    ("syntax", "syntax"),
    ("unsupported", "unsupported"),
    ("invalid", "invalid_program"),
)


def classify(error_id: str, message: str = "") -> str:
    """Nagini's error ids look like `postcondition.violated:assertion.false`; the part before `:` says what."""
    head, _, reason = error_id.partition(":")
    for text in (head, message.lower(), reason):
        for needle, kind in CLASSES:
            if needle in text:
                return kind
    return "other"


def default_python(settings: Settings) -> Path:
    """The Nagini virtualenv's interpreter: the setting, else `.venv-nagini` beside the checkout, else under home."""
    if settings.verifiers.nagini_python is not None:
        return settings.verifiers.nagini_python
    beside = Path(__file__).resolve().parents[2] / ".venv-nagini" / "bin" / "python"
    if beside.exists():
        return beside
    return settings.paths.home / "nagini-venv" / "bin" / "python"


def nagini_version(python: Path, cache_dir: Path | None = None) -> str:
    """The Nagini installed in the virtualenv of `python`, memoised per interpreter ('' when it is missing)."""
    return tool_version(str(python), ["-c", VERSION_PROBE], VERSION, cache_dir)


class WorkerError(Exception):
    """The worker died, timed out or could not start; the message says which."""


@dataclass
class Reply:
    payload: dict[str, Any]
    seconds: float
    rss_mb: float | None = None


_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nagini-spawner")
"""Workers are started from this one long-lived thread. bwrap's --die-with-parent is Linux's parent-death signal,
which fires when the *thread* that forked the child ends: started from `asyncio.to_thread`, a worker died with
its event loop's executor, so every `asyncio.run` (each test, each CLI command) paid a cold JVM start."""


class NaginiWorker:
    """One supervised worker process; thread-safe, one request at a time."""

    def __init__(self, python: Path, *, memory_mb: int = 3072, sandbox: ToolSandbox | None = None) -> None:
        self.python = python
        self.memory_mb = memory_mb
        self.sandbox = sandbox
        self._jobs: Path | None = None
        self._group: JobCgroup | None = None
        self.version = ""
        self.starts = 0
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._next_id = 0

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _start(self) -> None:
        if not self.python.exists():
            raise WorkerError(f"Nagini's Python {self.python} is missing; run scripts/setup-verifiers.sh")
        self._lines = queue.Queue()
        self._jobs = Path(tempfile.mkdtemp(prefix="veriloop-nagini-"))
        argv = [str(self.python), "-u", str(WORKER)]
        preexec = None
        if self.sandbox is not None:
            venv = self.python.parent.parent
            box = self.sandbox.with_binds(venv, WORKER.parent, Path(os.path.realpath(self.python)).parent.parent)
            try:
                argv = box.argv(argv, self._jobs)
            except SandboxError as exc:
                raise WorkerError(str(exc)) from None
            self._group = box.cgroup()
            preexec = joiner(self._group)
        spawn = functools.partial(
            subprocess.Popen,
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            cwd=self._jobs,
            preexec_fn=preexec,
            env=dict(TOOL_ENV) if self.sandbox is not None else None,
        )
        self._process = _SPAWNER.submit(spawn).result()
        self.starts += 1
        stdout = self._process.stdout
        assert stdout is not None
        lines = self._lines

        def pump() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="nagini-worker-stdout", daemon=True).start()
        ready = self._read(START_TIMEOUT_S)
        if not ready.get("ready"):
            self._stop()
            raise WorkerError(f"the Nagini worker did not start: {ready}")
        self.version = str(ready.get("version", ""))

    def _read(self, timeout_s: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self._stop()
            raise WorkerError("timeout") from None
        if line is None:
            self._stop()
            raise WorkerError("the Nagini worker exited")
        payload: dict[str, Any] = json.loads(line)
        return payload

    def ensure_started(self) -> str:
        with self._lock:
            if not self.alive:
                self._start()
            return self.version

    def request(self, code: str, timeout_s: float) -> Reply:
        """Verify the program `code`; raises WorkerError("timeout") after `timeout_s` (the worker is then recycled).

        The file goes into the worker's job folder (bound at /run/job inside its sandbox) and is removed after."""
        with self._lock:
            if not self.alive:
                self._start()
            assert self._process is not None and self._process.stdin is not None and self._jobs is not None
            self._next_id += 1
            folder = self._jobs / str(self._next_id)
            folder.mkdir()
            (folder / "program.py").write_text(code)
            inside = Path(JOB_DIR if self.sandbox is not None else str(self._jobs), str(self._next_id), "program.py")
            started = time.perf_counter()
            try:
                self._process.stdin.write(json.dumps({"id": self._next_id, "path": str(inside)}) + "\n")
                self._process.stdin.flush()
            except OSError:
                self._stop()
                raise WorkerError("the Nagini worker exited") from None
            try:
                payload = self._read(timeout_s)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            seconds = time.perf_counter() - started
            rss = self._rss_mb()
            if rss > self.memory_mb:
                self._stop()
            return Reply(payload, seconds, rss or None)

    def _rss_mb(self) -> float:
        if self._process is None:
            return 0.0
        if self._group is not None:
            peak = self._group.peak_bytes()
            current = _current_bytes(self._group)
            if current is not None:
                return current / (1 << 20)
            if peak is not None:
                return peak / (1 << 20)
        try:
            for line in Path(f"/proc/{self._process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return 0.0
        return 0.0

    def _stop(self) -> None:
        process, self._process = self._process, None
        group, self._group = self._group, None
        jobs, self._jobs = self._jobs, None
        release(group)
        if jobs is not None:
            shutil.rmtree(jobs, ignore_errors=True)
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def close(self) -> None:
        with self._lock:
            self._stop()


def _current_bytes(group: JobCgroup) -> int | None:
    """The cgroup's memory in use now (memory.current, v1 usage_in_bytes): the JVM's and all it started."""
    for name in ("memory.current", "memory.usage_in_bytes"):
        path = group.memory_dir / name
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().split()[0])
    return None


_WORKERS: dict[tuple[str, int, ToolSandbox | None], NaginiWorker] = {}
_WORKERS_LOCK = threading.Lock()


def shared_worker(python: Path, memory_mb: int = 3072, sandbox: ToolSandbox | None = None) -> NaginiWorker:
    """The process-wide warm worker for this interpreter and isolation (started on first use)."""
    with _WORKERS_LOCK:
        key = (str(python), memory_mb, sandbox)
        if key not in _WORKERS:
            _WORKERS[key] = NaginiWorker(python, memory_mb=memory_mb, sandbox=sandbox)
        return _WORKERS[key]


def close_workers() -> None:
    with _WORKERS_LOCK:
        workers = list(_WORKERS.values())
        _WORKERS.clear()
    for worker in workers:
        worker.close()


def functions(code: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of every function, methods included."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((node.name, node.lineno, node.end_lineno or node.lineno))
    return found


def result_from_reply(code: str, payload: dict[str, Any], version: str, seconds: float) -> VerifyResult:
    """The worker's reply as a VerifyResult: one diagnostic per error, counts per function."""
    status = VerifyStatus(payload.get("status", "infra_error"))
    diagnostics = [
        Diagnostic(
            severity="error",
            kind=classify(str(e.get("id", "")), str(e.get("message", ""))),
            message=str(e.get("message", "")),
            line=e.get("line"),
            column=e.get("column"),
        )
        for e in payload.get("errors", [])
    ]
    if status is VerifyStatus.SYNTAX_ERROR and not diagnostics:
        diagnostics.append(Diagnostic(severity="error", kind="type", message=str(payload.get("text", ""))))
    spans = functions(code) if status in (VerifyStatus.VERIFIED, VerifyStatus.FAILED) else []
    lines = [d.line for d in diagnostics if d.line is not None]
    failed = {name for name, first, last in spans for line in lines if first <= line <= last}
    verified = len(spans) - len(failed)
    errors = len(diagnostics) if status is not VerifyStatus.VERIFIED else 0
    return VerifyResult(
        status=status,
        verified=verified,
        errors=errors,
        diagnostics=diagnostics,
        score=node_score(status, verified, errors, len(diagnostics)),
        tool="nagini",
        version=version,
        duration_s=seconds,
        reason=str(payload.get("text", ""))[:500] if status is VerifyStatus.INFRA_ERROR else None,
    )


TARGET = VerifierTarget(
    "nagini",
    language="python",
    title="Nagini (Python with nagini_contracts)",
    fence="python",
    dialect=NAGINI,
    ensures=r"\bEnsures\s*\(",
    comments=hash_comments,
    declarations=r"^\s*(from|import|def|class|@)",
    exploit_kinds=("def",),
    shape="Start with `from nagini_contracts.contracts import *` and state the contract with Requires(...) and "
    "Ensures(...) calls at the top of each function body.",
    exploit_example=("def ident(x: int) -> int:\n    Ensures(Result() == Result())", "    return 0"),
    suite="alphaverus-dafny2nagini",
)


class NaginiVerifier:
    """Verifies a Python candidate with Nagini through the shared warm worker."""

    name = "nagini"
    target = TARGET

    def __init__(
        self,
        python: Path,
        *,
        timeout_s: float = 60.0,
        memory_mb: int = 3072,
        sandbox: ToolSandbox | None = DEFAULT_SANDBOX,
    ) -> None:
        self.python = python
        self.timeout_s = timeout_s
        self.worker = shared_worker(python, memory_mb, sandbox)

    @classmethod
    def from_settings(cls, settings: Settings) -> NaginiVerifier:
        section = settings.verifiers
        return cls(
            default_python(settings),
            timeout_s=section.timeout_s,
            memory_mb=section.nagini_memory_mb,
            sandbox=tool_sandbox(settings),
        )

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return nagini_version(default_python(settings), settings.paths.cache_dir)

    def options(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s, "backend": "silicon"}

    async def version(self) -> str:
        try:
            return await asyncio.to_thread(self.worker.ensure_started)
        except WorkerError:
            return ""

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await self.check(candidate.code)

    async def check(self, code: str) -> VerifyResult:
        try:
            ast.parse(code)
        except SyntaxError as exc:
            diag = Diagnostic(severity="error", kind="syntax", message=str(exc.msg), line=exc.lineno, column=exc.offset)
            return VerifyResult(
                status=VerifyStatus.SYNTAX_ERROR,
                errors=1,
                diagnostics=[diag],
                score=-1.0,
                tool=self.name,
                version=await self.version(),
            )
        try:
            version = await asyncio.to_thread(self.worker.ensure_started)
        except WorkerError as exc:
            return infra_error(self.name, "", str(exc))
        started = time.perf_counter()
        try:
            reply = await asyncio.to_thread(self.worker.request, code, self.timeout_s)
        except WorkerError as exc:
            seconds = time.perf_counter() - started
            if str(exc) == "timeout":
                return VerifyResult(
                    status=VerifyStatus.TIMEOUT,
                    tool=self.name,
                    version=version,
                    duration_s=seconds,
                    score=-1.0,
                    reason=f"no verdict within {self.timeout_s:g} s; the worker was recycled",
                    diagnostics=[Diagnostic(kind="timeout", message="verification timed out")],
                )
            return infra_error(self.name, version, str(exc), seconds)
        result = result_from_reply(code, reply.payload, version, reply.seconds)
        return result.model_copy(update={"max_rss_mb": reply.rss_mb})

    async def aclose(self) -> None:
        return None  # the worker is shared by the process; close_workers() ends it


_CHECKED: type[FormalVerifier] = NaginiVerifier
"""mypy checks here that the class has every member of the protocols the guard and the registry use."""

atexit.register(close_workers)
