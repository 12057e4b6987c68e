"""Trusted tools (Dafny, Nagini, Verus) run on untrusted input inside bubblewrap.

A verifier reads a candidate's program, so it runs with the isolation candidate code gets: fresh pid, net, ipc,
uts and cgroup namespaces (no network), the host file system read-only with /root, /home and /tmp hidden behind
private tmpfs mounts (a fresh /tmp per run), no host environment variables (a fixed PATH, HOME=/tmp), a cgroup
memory and pids limit, and a wall-clock limit enforced by the caller (the bwrap process is killed; its pid
namespace goes with it). The job's files are bound read-write at /run/job, the only writable host path.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from veriloop.errors import SandboxError
from veriloop.sandbox.bwrap import bwrap_path
from veriloop.sandbox.cgroups import JobCgroup, cgroups

JOB_DIR = "/run/job"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "TZ": "UTC"}
HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/work")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolSandbox:
    """How to wrap a tool's argv: the memory and pids bound, and host paths the tool needs under hidden folders."""

    memory_mb: int = 4096
    pids: int = 512
    binds: tuple[str, ...] = ()
    """Host paths bound read-only at the same place (a virtualenv under /work, a toolchain under /root)."""

    @property
    def available(self) -> bool:
        return bwrap_path() is not None

    def argv(self, argv: Sequence[str], job_dir: Path) -> list[str]:
        """`argv` run inside bwrap with `job_dir` at /job (the working directory)."""
        path = bwrap_path()
        if path is None:
            raise SandboxError("bubblewrap (bwrap) is not installed; run scripts/setup-sandbox.sh")
        wrapped = [
            path,
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ]
        for hidden in HIDDEN:
            if Path(hidden).is_dir() and not Path(hidden).is_symlink():
                wrapped += ["--tmpfs", hidden]
        for bind in self._binds():
            wrapped += ["--ro-bind", bind, bind]
        wrapped += ["--bind", str(job_dir), JOB_DIR, "--chdir", JOB_DIR]
        for key, value in ENV.items():
            wrapped += ["--setenv", key, value]
        # The JVM's container probe crashes on a cgroup v1 hierarchy seen from a fresh cgroup namespace; the heap
        # is sized from the cgroup's limit instead.
        java = f"-XX:-UseContainerSupport -XX:MaxRAM={self.memory_mb}m"
        wrapped += ["--setenv", "JAVA_TOOL_OPTIONS", java]
        wrapped += ["--cap-drop", "ALL", "--", *argv]
        return wrapped

    def _binds(self) -> list[str]:
        """Tool paths that lie under a hidden folder, outermost first so inner binds are not shadowed."""
        wanted = set()
        for bind in self.binds:
            real = os.path.realpath(bind)
            for candidate in {bind, real}:
                if any(candidate == h or candidate.startswith(h + "/") for h in HIDDEN) and Path(candidate).exists():
                    wanted.add(candidate)
        return sorted(wanted, key=lambda p: (p.count("/"), p))

    def cgroup(self) -> JobCgroup | None:
        """A fresh cgroup with the memory and pids limits, or None (logged) where cgroups cannot be written."""
        try:
            return cgroups().create(self.memory_mb << 20, self.pids)
        except (SandboxError, OSError) as exc:
            log.warning("verifier runs without a memory limit: %s", exc)
            return None

    def with_binds(self, *paths: str | Path) -> ToolSandbox:
        return ToolSandbox(self.memory_mb, self.pids, (*self.binds, *(str(p) for p in paths)))


DEFAULT = ToolSandbox()
"""What a verifier built without settings uses: bwrap with the default limits."""


def joiner(group: JobCgroup | None) -> Callable[[], None] | None:
    """A preexec function that moves the forked child into `group` before exec (so bwrap and all it starts are
    inside the limits from the first instruction)."""
    if group is None:
        return None
    encoded = [p.encode() for p in group.join_paths()]

    def join() -> None:
        for path in encoded:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join


def release(group: JobCgroup | None) -> None:
    if group is not None:
        with contextlib.suppress(SandboxError, OSError):
            group.kill()
            group.remove()
