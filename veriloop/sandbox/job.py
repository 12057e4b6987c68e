"""What a sandbox runs: files, steps (compile, then run), limits, a clean environment, and how to judge the output."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from veriloop.errors import ConfigError

JOB_UID = 65534
"""The unprivileged uid (nobody) that every job runs as inside bwrap and Docker."""

MiB = 1 << 20

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}
"""The deterministic environment every job starts from (nothing of the host's passes in unless listed)."""


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Limits(Spec):
    """Resource limits of one job; they bind root too (cgroups plus a non-root uid inside the sandbox)."""

    wall_s: float = Field(10.0, gt=0, le=3600, description="Wall-clock seconds per run step.")
    cpu_s: float | None = Field(None, gt=0, le=3600, description="CPU seconds per process; None = the wall limit.")
    compile_s: float = Field(60.0, gt=0, le=3600, description="Wall-clock seconds per compile step.")
    memory_mb: int = Field(512, ge=16, le=65536, description="Memory of the whole job (cgroup), runner included.")
    pids: int = Field(64, ge=4, le=4096, description="Processes plus threads of the job (cgroup pids.max).")
    output_bytes: int = Field(MiB, ge=1024, le=256 * MiB, description="stdout + stderr bytes kept per step.")
    file_size_bytes: int = Field(16 * MiB, ge=0, description="Largest file the job may write (RLIMIT_FSIZE).")
    open_files: int = Field(256, ge=16, le=65536, description="Open file descriptors per process (RLIMIT_NOFILE).")
    disk_mb: int = Field(64, ge=1, le=65536, description="Size of the job's private /work and /tmp (tmpfs).")

    @property
    def cpu_limit_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.wall_s


class Step(Spec):
    """One command of a job, run in the job's work dir."""

    name: str = "run"
    kind: Literal["compile", "run"] = "run"
    argv: list[str] = Field(min_length=1)
    stdin: str | None = None
    timeout_s: float | None = Field(None, gt=0, description="Overrides the job's wall (or compile) limit.")
    python: bool = Field(False, description="argv is [python, script, *args]: run it in the warm interpreter.")
    stop_on_failure: bool = False
    judge: bool = Field(False, description="The Python test judge (harness_py): its verdicts come back on fd 4.")
    stdin_from: str | None = Field(None, description="stdin is the stdout of the earlier step of this name.")


class StdioCase(Spec):
    """One stdin/stdout test: the program's stdout must equal `expected` (trailing whitespace ignored)."""

    name: str
    stdin: str = ""
    expected: str


class Checks(Spec):
    """How the job's output is judged into per-test outcomes; `kind` says which fields apply."""

    kind: Literal["python_asserts", "stdio", "harness"]
    expected_tests: int | None = Field(None, description="Tests the harness must report (python_asserts).")
    cases: list[StdioCase] = Field(default_factory=list, description="stdio: one run step per case, same order.")


class Phase(Spec):
    """The trusted side of a split test program: run after the job's steps, in a fresh work dir, with these files."""

    files: dict[str, str] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)


class Job(Spec):
    """A unit of sandboxed work: a fresh work dir holding `files`, then `steps` in order."""

    files: dict[str, str] = Field(default_factory=dict, description="Relative path -> text content.")
    steps: list[Step] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict, description="Added to (and overriding) BASE_ENV.")
    pass_env: list[str] = Field(default_factory=list, description="Host variables passed in by name.")
    limits: Limits = Field(default_factory=Limits)
    language: str = ""
    results_file: str | None = Field(None, description="File the test harness writes, read back after the run.")
    checks: Checks | None = None
    trusted: Phase | None = Field(None, description="Steps the candidate cannot reach (split test programs).")

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts:
                raise ConfigError(f"job file name {name!r} must be a relative path inside the work dir")
        return files

    def environment(self) -> dict[str, str]:
        env = dict(BASE_ENV)
        for name in self.pass_env:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(self.env)
        return env

    def timeout_of(self, step: Step) -> float:
        if step.timeout_s is not None:
            return step.timeout_s
        return self.limits.compile_s if step.kind == "compile" else self.limits.wall_s

    def total_time_s(self) -> float:
        steps = [*self.steps, *(self.trusted.steps if self.trusted is not None else [])]
        return sum(self.timeout_of(step) for step in steps)


def simple_job(command: list[str], files: dict[str, str] | None = None, stdin: str | None = None, **kw: object) -> Job:
    """A one-step job: run `command` (argv) with `files` in the work dir."""
    return Job.model_validate({"files": files or {}, "steps": [{"argv": command, "stdin": stdin}], **kw})
