"""The unsafe backend: a plain child process with rlimits, for machines without bubblewrap or Docker.

It isolates nothing. What it does give: a fresh temporary work dir (removed afterwards), a clean environment,
wall and CPU time limits, an output cap, RLIMIT_FSIZE / RLIMIT_NOFILE, RLIMIT_AS as the memory limit (not for
the JVM, Node or Go, which reserve address space up front), and the kill of every descendant (the runner is a
child subreaper, so double-forked daemons are found too).

What it does NOT give: a read-only host (the job can write anywhere its user can), a network block (loopback and
the internet are reachable), a process limit for root (RLIMIT_NPROC does not bind root, so a fork bomb is not
contained), privacy from other processes (as root it can read their environments), protection of its runner
(the job runs as the same user and can kill it), or a disk quota beyond the per-file size limit.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from veriloop.config import Settings
from veriloop.errors import SandboxError
from veriloop.records import ExecResult, ExecStatus
from veriloop.sandbox.base import (
    INSIDE,
    SandboxBackend,
    Toolchain,
    assemble,
    cache_runner_bytecode,
    frame,
    host_toolchain,
    infra_error,
    parse_runner_output,
    runner_argv,
    runner_spec,
)
from veriloop.sandbox.job import Job

REFUSAL = (
    "the process sandbox runs generated code with NO isolation (it can read and write your files and reach the "
    "network); set sandbox.allow_unsafe = true (or VERILOOP_SANDBOX__ALLOW_UNSAFE=1) to use it anyway, or use "
    "the bwrap or docker sandbox"
)
NO_ADDRESS_LIMIT = {"java", "javascript", "go"}
RUNNER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}
ANSWER_SLACK_S = 10.0


class ProcessSandbox:
    """No isolation; refuses to run unless `allow_unsafe`."""

    name = "process"
    version = "1"

    def __init__(self, *, allow_unsafe: bool = False, work_root: Path | None = None) -> None:
        if not allow_unsafe:
            raise SandboxError(REFUSAL)
        self.root = work_root or Path(tempfile.gettempdir())
        self._toolchain = host_toolchain()
        cache_runner_bytecode()

    @classmethod
    def from_settings(cls, settings: Settings) -> ProcessSandbox:
        return cls(allow_unsafe=settings.sandbox.allow_unsafe, work_root=settings.sandbox.work_root)

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return platform.python_version()  # jobs run on this interpreter, nothing else

    @property
    def toolchain(self) -> Toolchain:
        return self._toolchain

    async def run(self, job: Job) -> ExecResult:
        work = Path(tempfile.mkdtemp(prefix="veriloop-job-", dir=self.root))
        try:
            memory = None if job.language in NO_ADDRESS_LIMIT else job.limits.memory_mb << 20
            spec = runner_spec(job, work_dir=str(work), mount=False, uid=None, kill="descendants", address_space=memory)
            python = self._toolchain.path("python")
            assert python is not None
            started = time.monotonic()
            proc = subprocess.Popen(
                runner_argv(python, str(INSIDE), "once"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=work,
                env=RUNNER_ENV,
                start_new_session=True,
            )
            deadline = job.total_time_s() + ANSWER_SLACK_S
            try:
                out, err = await asyncio.to_thread(proc.communicate, frame(spec), deadline)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return infra_error(
                    f"the runner did not answer within {deadline:.0f} s",
                    sandbox=self.name,
                    version=self.version,
                    wall_s=time.monotonic() - started,
                )
            raw = parse_runner_output(out.decode(errors="replace"))
            if raw is None:
                if proc.returncode is not None and proc.returncode < 0:
                    # The job runs as the runner's own user here, so it can kill it: that is the job's doing.
                    return ExecResult(
                        status=ExecStatus.RUNTIME_ERROR,
                        signal=-proc.returncode,
                        stderr=f"the program killed its runner (signal {-proc.returncode})",
                        wall_s=time.monotonic() - started,
                        sandbox=self.name,
                        sandbox_version=self.version,
                    )
                message = err.decode(errors="replace").strip() or f"runner exited with {proc.returncode}"
                return infra_error(f"runner failed: {message}", sandbox=self.name, version=self.version)
            return assemble(job, raw, sandbox=self.name, version=self.version)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def aclose(self) -> None:
        return None


_CHECKED: type[SandboxBackend] = ProcessSandbox
"""mypy checks here that the class has every member of the protocol the registry uses."""
