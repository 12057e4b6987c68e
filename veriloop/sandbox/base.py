"""The Sandbox seam: the protocol, the registry of backends, toolchains, and turning runner output into ExecResult."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from veriloop.config import Settings
from veriloop.records import ExecResult, ExecStatus, TestOutcome
from veriloop.registry import Registry
from veriloop.sandbox.job import Job, Limits, Step

INSIDE = Path(__file__).with_name("inside")
"""What the sandbox binds at /opt/veriloop: the in-sandbox code alone (see inside/__init__.py)."""
RUNNER = INSIDE / "runner.py"
HARNESS = INSIDE / "harness_py.py"
SIGXCPU = 24
SIGXFSZ = 25
SIGKILL = 9


@runtime_checkable
class Sandbox(Protocol):
    """Runs a Job in isolation and reports what happened; never raises for what the program did."""

    name: str

    @property
    def toolchain(self) -> Toolchain: ...

    @property
    def version(self) -> str:
        """The backend's version as each ExecResult records it (`sandbox_version`)."""
        ...

    async def run(self, job: Job) -> ExecResult: ...

    async def aclose(self) -> None: ...


class SandboxBackend(Sandbox, Protocol):
    """A class in `SANDBOXES`: built from settings, and able to say what it runs on without being built."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self: ...

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        """What a run's provenance records for this backend, read without starting it (building one can start
        workers or reach a Docker engine); '' when it cannot tell."""
        ...


SANDBOXES: Registry[type[SandboxBackend]] = Registry(
    "sandbox",
    {
        "bwrap": "veriloop.sandbox.bwrap:BwrapSandbox",
        "docker": "veriloop.sandbox.docker:DockerSandbox",
        "process": "veriloop.sandbox.process:ProcessSandbox",
    },
)


def get_sandbox(settings: Settings, name: str | None = None) -> Sandbox:
    """The sandbox backend named in settings (or `name`), built from settings."""
    return SANDBOXES.load(name or settings.sandbox.backend).from_settings(settings)


def default_limits(settings: Settings) -> Limits:
    section = settings.sandbox
    return Limits(
        wall_s=section.timeout_s,
        memory_mb=section.memory_mb,
        pids=section.pids,
        output_bytes=section.output_bytes,
        file_size_bytes=section.file_size_mb << 20,
        open_files=section.open_files,
        disk_mb=section.disk_mb,
    )


# --------------------------------------------------------------------------- toolchains

TOOLS = ("python", "gcc", "g++", "javac", "java", "node", "rustc", "go")


@dataclass
class Toolchain:
    """Absolute paths of the language tools as the sandbox sees them, and host folders to expose read-only."""

    paths: dict[str, str] = field(default_factory=dict)
    binds: list[str] = field(default_factory=list)
    where: str = "host"

    def path(self, tool: str) -> str | None:
        return self.paths.get(tool)

    def has(self, *tools: str) -> bool:
        return all(tool in self.paths for tool in tools)


@cache
def host_toolchain() -> Toolchain:
    """Tools on this machine: the real interpreter behind sys.executable (never a pyenv shim), rustc's sysroot."""
    paths: dict[str, str] = {}
    binds: list[str] = []
    python = os.path.realpath(sys.executable)
    paths["python"] = python
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        binds.append(prefix)
    for tool in ("gcc", "g++", "javac", "java", "node", "go"):
        found = shutil.which(tool)
        if found:
            paths[tool] = os.path.realpath(found)
    rustc = shutil.which("rustc") or _cargo_rustc()
    if rustc:
        sysroot = _rust_sysroot(rustc)
        if sysroot and Path(sysroot, "bin", "rustc").exists():
            paths["rustc"] = str(Path(sysroot, "bin", "rustc"))
            if not sysroot.startswith("/usr"):
                binds.append(sysroot)
    for tool, path in paths.items():
        if tool not in ("python", "rustc") and not path.startswith("/usr/"):
            binds.append(str(Path(path).parent))
    return Toolchain(paths=paths, binds=sorted(set(binds)), where="host")


def _cargo_rustc() -> str | None:
    candidate = Path.home() / ".cargo" / "bin" / "rustc"
    return str(candidate) if candidate.exists() else None


def _rust_sysroot(rustc: str) -> str | None:
    try:
        out = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return os.path.realpath(text) if out.returncode == 0 and text else None


# --------------------------------------------------------------------------- runner spec and results


def runner_argv(python: str, directory: str, *args: str) -> list[str]:
    """Start the runner by importing it, so its cached bytecode is used (a script is compiled at every start).

    No `site` (its .pth files cost more than a short job) and no bytecode writing (jobs must not leave files).
    """
    code = f"import sys; sys.path[0] = {directory!r}; import runner; runner.main(['runner', *sys.argv[1:]])"
    return [python, "-S", "-B", "-c", code, *args]


@cache
def cache_runner_bytecode() -> None:
    """Write runner.py's and the harness's cached bytecode when missing or stale (best effort: it may be read-only)."""
    import importlib.util
    import py_compile

    for source in (RUNNER, HARNESS):
        cached = Path(importlib.util.cache_from_source(str(source)))
        try:
            info = source.stat()
            header = cached.read_bytes()[:16] if cached.exists() else b""
            fresh = (
                len(header) == 16
                and header[:4] == importlib.util.MAGIC_NUMBER
                and int.from_bytes(header[4:8], "little") == 0
                and int.from_bytes(header[8:12], "little") == int(info.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(header[12:16], "little") == info.st_size & 0xFFFFFFFF
            )
            if not fresh:
                py_compile.compile(
                    str(source),
                    cfile=str(cached),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
        except (OSError, py_compile.PyCompileError):
            continue


def runner_spec(
    job: Job,
    *,
    work_dir: str,
    mount: bool,
    uid: int | None,
    kill: str,
    address_space: int | None = None,
    cleanup: list[str] | None = None,
    cleanup_ipc: bool = False,
    oom_protect: bool = False,
) -> dict[str, Any]:
    """The JSON the in-sandbox runner reads (see runner.py); the job's files travel inside it."""
    limits = job.limits
    return {
        "work_dir": work_dir,
        "files": job.files,
        "mount": mount,
        "disk_bytes": limits.disk_mb << 20,
        "uid": uid,
        "gid": uid,
        "kill": kill,
        "env": job.environment(),
        "oom_protect": oom_protect,
        "limits": {
            "wall_s": limits.wall_s,
            "cpu_s": max(1, int(limits.cpu_limit_s + 0.999)),
            "file_size_bytes": limits.file_size_bytes,
            "open_files": limits.open_files,
            "output_bytes": limits.output_bytes,
            "address_space_bytes": address_space,
        },
        "steps": [_step_spec(job, step) for step in job.steps],
        "trusted": None
        if job.trusted is None
        else {"files": job.trusted.files, "steps": [_step_spec(job, step) for step in job.trusted.steps]},
        "results_file": job.results_file,
        "results_max_bytes": max(limits.output_bytes, 1 << 20),
        "cleanup": cleanup or [],
        "cleanup_ipc": cleanup_ipc,
    }


def _step_spec(job: Job, step: Step) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": step.name,
        "kind": step.kind,
        "argv": step.argv,
        "stdin": step.stdin,
        "timeout_s": job.timeout_of(step),
        "python": step.python,
        "stop_on_failure": step.stop_on_failure,
    }
    if step.judge:
        spec["judge"] = True
    if step.stdin_from:
        spec["stdin_from"] = step.stdin_from
    return spec


def frame(spec: dict[str, Any]) -> bytes:
    body = json.dumps(spec).encode()
    return f"JOB {len(body)}\n".encode() + body


def parse_runner_output(text: str) -> dict[str, Any] | None:
    """The runner's result: the last line that parses as a JSON object with `steps`."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "steps" in value:
                return value
    return None


def infra_error(message: str, *, sandbox: str, version: str, wall_s: float = 0.0) -> ExecResult:
    return ExecResult(
        status=ExecStatus.INFRA_ERROR, stderr=message, sandbox=sandbox, sandbox_version=version, wall_s=wall_s
    )


def assemble(
    job: Job,
    raw: dict[str, Any],
    *,
    sandbox: str,
    version: str,
    oom_kills: int = 0,
    peak_bytes: int | None = None,
) -> ExecResult:
    """One ExecResult from the runner's per-step report; the order of the checks is the status precedence."""
    if raw.get("error"):
        return infra_error(str(raw["error"]), sandbox=sandbox, version=version)
    steps: list[dict[str, Any]] = list(raw.get("steps") or [])
    if not steps:
        return infra_error("the runner ran no step", sandbox=sandbox, version=version)
    last = steps[-1]
    ours = [s for s in steps if not s.get("trusted")]
    compile_failed = next(
        (s for s in ours if (s["kind"] == "compile" and s["exit_code"] != 0) or "syntax_error" in s["flags"]), None
    )
    trusted_broken = next((s for s in steps if s.get("trusted") and s["kind"] == "compile" and s["exit_code"]), None)
    shown = compile_failed or last
    rss = [s["max_rss_kb"] for s in steps if s.get("max_rss_kb") is not None]
    max_rss_mb = max(rss) / 1024 if rss else None
    if peak_bytes is not None:
        max_rss_mb = max(max_rss_mb or 0.0, peak_bytes / (1 << 20))
    cpu = [s["cpu_s"] for s in steps if s.get("cpu_s") is not None]
    result = ExecResult(
        status=ExecStatus.PASSED,
        exit_code=shown.get("exit_code"),
        signal=shown.get("signal"),
        stdout=shown.get("stdout", ""),
        stderr=shown.get("stderr", ""),
        truncated=any(s.get("truncated") for s in steps),
        wall_s=round(sum(float(s.get("wall_s") or 0.0) for s in steps), 6),
        cpu_s=round(sum(cpu), 6) if cpu else None,
        max_rss_mb=round(max_rss_mb, 3) if max_rss_mb is not None else None,
        sandbox=sandbox,
        sandbox_version=version,
    )
    start_error = next((s for s in steps if "start_error" in s["flags"]), None)
    if start_error is not None:
        result.status = ExecStatus.INFRA_ERROR
        result.stderr = start_error.get("stderr", "")
        return result
    if any(s["timed_out"] or s.get("signal") == SIGXCPU for s in steps):
        result.status = ExecStatus.TIMEOUT
    elif oom_kills > 0 or any("memory_error" in s["flags"] for s in steps):
        result.status = ExecStatus.MEMORY_LIMIT
    elif any(s["output_limit"] for s in steps):
        result.status = ExecStatus.OUTPUT_LIMIT
    elif compile_failed is not None:
        result.status = ExecStatus.COMPILE_ERROR
    elif (
        trusted_broken is not None
    ):  # the reference side of a split test program: the task's fault, not the candidate's
        result.status = ExecStatus.INFRA_ERROR
        result.stderr = f"the trusted side of the test program did not build:\n{trusted_broken.get('stderr', '')}"
    elif job.checks is not None:
        from veriloop.sandbox.checks import judge

        judge(job, steps, raw.get("results"), result)
    elif any(s["exit_code"] != 0 for s in steps):
        result.status = ExecStatus.RUNTIME_ERROR
    return result


def outcome(name: str, passed: bool, message: str = "") -> TestOutcome:
    return TestOutcome(name=name, passed=passed, message=message)
