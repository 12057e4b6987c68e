"""The Verifier seam: the protocols, the registry by name, and a hermetic runner for verifier processes.

Every tool run gets its own temp dir, a wall-clock limit (the whole process group is killed on expiry),
and reports duration, CPU time and peak memory taken from the kernel's accounting of the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from veriloop.config import Settings
from veriloop.errors import ConfigError, SandboxError
from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.registry import Registry
from veriloop.sandbox.tools import ENV, ToolSandbox, joiner, release

if TYPE_CHECKING:
    from veriloop.verifiers.target import VerifierTarget


@runtime_checkable
class Verifier(Protocol):
    """Judges a candidate against its task; never raises for what the candidate contains.

    What callers use: the registered verifiers follow it, and so do the wrappers (guard, cache) and test doubles."""

    name: str

    async def version(self) -> str: ...

    def options(self) -> dict[str, Any]:
        """Everything besides the tool version that changes the verdict (part of the cache key)."""
        ...

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class RegisteredVerifier(Verifier, Protocol):
    """A class in `VERIFIERS`: built from settings, described by its target, able to name its tool's version.

    Everything the rest of veriloop asks of a verifier by name goes through these members, so none of it lists
    the verifiers it knows."""

    target: VerifierTarget
    """The language it checks, as the guard, the CLI, the task suites and AlphaVerus read it (`target.py`); a class
    attribute, read without building the verifier."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self: ...

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        """The version of the tool these settings name, read without starting it ('' when it does not run): what a
        run's provenance records, where building the verifier could cost a JVM start."""
        ...


@runtime_checkable
class FormalVerifier(RegisteredVerifier, Protocol):
    """A verifier that proves a program against the specification it states; its target names a guard dialect."""

    async def check(self, code: str) -> VerifyResult:
        """The verdict on a whole program: the guard's triviality probes send their rewritten programs here."""
        ...


@runtime_checkable
class ReadingVerifier(Protocol):
    """What a formal verifier whose tool prints the program back as it parsed it (Dafny's `/dprint`) adds: a
    capability of its own, so the guard asks for it alone (a verifier without it is guarded without the reading)."""

    async def parsed(self, code: str) -> str | None:
        """The program as the tool's parser read it; None where it does not print it. The guard looks for escapes
        in that reading after a `verified`, so a program its lexer reads otherwise than the tool cannot pass."""
        ...


VERIFIERS: Registry[type[RegisteredVerifier]] = Registry(
    "verifier",
    {
        "tests": "veriloop.verifiers.tests:TestsVerifier",
        "dafny": "veriloop.verifiers.dafny:DafnyVerifier",
        "nagini": "veriloop.verifiers.nagini:NaginiVerifier",
        "verus": "veriloop.verifiers.verus:VerusVerifier",
    },
)


def load_verifier(name: str, settings: Settings) -> RegisteredVerifier:
    """The bare verifier `name` (no guard, no cache)."""
    return VERIFIERS.load(name).from_settings(settings)


# --------------------------------------------------------------------------- running tools


@dataclass
class ToolRun:
    """What one verifier process did."""

    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float | None
    max_rss_mb: float | None
    timed_out: bool

    @property
    def output(self) -> str:
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr


def run_tool(
    argv: Sequence[str],
    files: Mapping[str, str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    sandbox: ToolSandbox | None = None,
) -> ToolRun:
    """Write `files` into a fresh temp dir, run `argv` there with a deadline, and reap it with wait4 (rusage).

    With a `sandbox` the tool runs inside bwrap (no network, read-only host, no host environment, a private
    /tmp, a cgroup memory limit) with the files at /run/job; without one it runs on the host (the tool's version
    query, and hosts without bwrap where the settings say so)."""
    with (
        tempfile.TemporaryDirectory(prefix="veriloop-verify-") as work,
        tempfile.TemporaryDirectory(prefix="veriloop-verify-out-") as logs,
    ):
        for name, text in files.items():
            Path(work, name).write_text(text)
        out_path, err_path = Path(logs, "stdout"), Path(logs, "stderr")
        try:
            command = sandbox.argv(argv, Path(work)) if sandbox is not None else list(argv)
        except SandboxError as exc:
            return ToolRun(list(argv), None, "", str(exc), 0.0, None, None, False)
        group = sandbox.cgroup() if sandbox is not None else None
        environment = dict(ENV) if sandbox is not None else {**os.environ, **(env or {})}
        started = time.perf_counter()
        try:
            with out_path.open("wb") as out, err_path.open("wb") as err:
                try:
                    process = subprocess.Popen(
                        command,
                        cwd=work,
                        stdout=out,
                        stderr=err,
                        stdin=subprocess.DEVNULL,
                        env=environment,
                        start_new_session=True,
                        preexec_fn=joiner(group),
                    )
                except (OSError, subprocess.SubprocessError) as exc:
                    why = getattr(exc, "strerror", None) or str(exc)
                    return ToolRun(list(argv), None, "", f"cannot start {argv[0]}: {why}", 0.0, None, None, False)
                status, usage, timed_out = _wait(process.pid, started + timeout_s)
        finally:
            release(group)
        wall = time.perf_counter() - started
        process.returncode = 0  # reaped by wait4 already; keep Popen from waiting again
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        return ToolRun(
            argv=list(argv),
            returncode=code,
            stdout=out_path.read_text(errors="replace"),
            stderr=err_path.read_text(errors="replace"),
            wall_s=wall,
            cpu_s=(usage.ru_utime + usage.ru_stime) if usage else None,
            max_rss_mb=usage.ru_maxrss / 1024 if usage else None,
            timed_out=timed_out,
        )


def tool_sandbox(settings: Settings, *binds: str | Path) -> ToolSandbox | None:
    """The isolation verifier processes get: bwrap unless `verifiers.isolation` is `none`."""
    section = settings.verifiers
    if section.isolation == "none":
        return None
    if section.isolation != "bwrap":
        raise ConfigError(f"verifiers.isolation must be bwrap or none, not {section.isolation!r}")
    return ToolSandbox(memory_mb=section.memory_mb, binds=tuple(str(b) for b in binds))


def _wait(pid: int, deadline: float) -> tuple[int | None, Any, bool]:
    delay = 0.002
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # helpers the tool left behind (a solver) go with it
            return status, usage, False
        if time.perf_counter() >= deadline:
            _kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            return status, usage, True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- tool versions

_VERSIONS: dict[tuple[str, int, int], str] = {}


def tool_version(command: str, argv: Sequence[str], pattern: str, cache_dir: Path | None = None) -> str:
    """The version a tool reports, memoised per binary (path, size, mtime) in memory and in `cache_dir`.

    Asking Dafny costs half a second of Mono start; a cache hit must not pay it in every new process.
    """
    found = shutil.which(command)
    if found is None:
        return ""
    real = os.path.realpath(found)
    info = Path(real).stat()
    key = (real, info.st_size, int(info.st_mtime))
    if key in _VERSIONS:
        return _VERSIONS[key]
    record = cache_dir / "tool-versions.json" if cache_dir is not None else None
    stored: dict[str, str] = {}
    if record is not None and record.exists():
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads(record.read_text())
    label = "|".join(str(part) for part in key)
    if label not in stored:
        run = run_tool([command, *argv], {}, timeout_s=120)
        match = re.search(pattern, run.output)
        if run.returncode is None or not match:
            return ""
        stored[label] = match.group(1)
        if record is not None:
            with contextlib.suppress(OSError):
                record.parent.mkdir(parents=True, exist_ok=True)
                temp = record.with_suffix(f".{os.getpid()}.tmp")
                temp.write_text(json.dumps(stored, indent=1))
                temp.replace(record)
    _VERSIONS[key] = stored[label]
    return stored[label]


# --------------------------------------------------------------------------- scores


def node_score(status: VerifyStatus, verified: int, errors: int, n_err: int = 0, n_note: int = 0) -> float:
    """AlphaVerus's node score: 1 when verified, -1 when unusable, else v/(v+e) minus 0.1 per error, 0.04 per note."""
    if status is VerifyStatus.VERIFIED:
        return 1.0
    if status is not VerifyStatus.FAILED or verified + errors == 0:
        return -1.0
    total = verified + errors
    return verified / total - (0.1 * n_err + 0.04 * n_note) / total


def infra_error(tool: str, version: str, message: str, duration_s: float = 0.0) -> VerifyResult:
    return VerifyResult(
        status=VerifyStatus.INFRA_ERROR, tool=tool, version=version, duration_s=duration_s, score=-1.0, reason=message
    )
