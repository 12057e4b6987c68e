"""The default sandbox: bubblewrap namespaces + per-job cgroups + a drop to uid 65534 inside.

bwrap runs as root without a user namespace, so the runner inside is root in fresh pid, net, ipc, uts, mount and
cgroup namespaces with a read-only view of /usr, the interpreter and the toolchains. The runner gives each job
private tmpfs mounts for /work and /tmp, writes the job's files (they travel in the job's JSON: nothing is written
on the host) and runs its steps as uid 65534 with no capabilities, no new privileges and the keyring syscalls
blocked. The cgroup (memory, pids) binds root as well; the pid namespace and --die-with-parent take the whole tree
down.

Where job cgroups cannot be made (a container whose cgroup file system is read-only), `sandbox.cgroups` decides:
`required` fails the job, `auto` and `off` bound each job with rlimits instead (RLIMIT_AS for memory, RLIMIT_NPROC
for processes, both binding because the job runs as uid 65534) under the container's own cgroup limits. A job gets
either a cgroup or those rlimits, never neither: languages whose runtimes reserve address space up front (JVM,
Node, Go) are refused there.

Cold jobs start one bwrap each. Warm workers keep a bwrap with a zygote and a supervisor waiting (see runner.py
`serve`): each step is a fresh fork of a process that has never seen job data, in a fresh tmpfs work dir and a
fresh IPC namespace per job.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from functools import cache
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import SandboxError
from veriloop.records import ExecResult
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
from veriloop.sandbox.cgroups import JobCgroup, cgroups
from veriloop.sandbox.job import JOB_UID, Job

log = logging.getLogger(__name__)

RUNNER_DIR = "/opt/veriloop"
RUNNER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}
# Capabilities the root runner keeps inside: mounts for the job's tmpfs, chown of its files, the uid drop, the
# kill of its processes, and its own oom_score_adj. The job itself keeps none.
RUNNER_CAPS = ["CAP_SYS_ADMIN", "CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL", "CAP_SYS_RESOURCE"]
PIDS_OVERHEAD = 4  # bwrap, its pid-1 reaper, the runner (and the zygote in warm workers)
ANSWER_SLACK_S = 10.0
MAX_JOBS_PER_WORKER = 500
READY_TIMEOUT_S = 60.0
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/work:/bin/sh\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
CGROUP_MODES = ("required", "auto", "off")
# Runtimes that reserve address space up front: RLIMIT_AS cannot be their memory limit (they fail to start).
NO_ADDRESS_LIMIT = frozenset({"java", "javascript", "go"})


def rlimit_bounds(job: Job, uid: int | None, why: str) -> dict[str, int]:
    """The runner's limits that bound a job's memory and processes where no cgroup does, or SandboxError.

    RLIMIT_NPROC does not bind root and RLIMIT_AS does not fit every runtime: a job neither can bound is refused,
    never run without a memory or process limit.
    """
    if uid is None or uid == 0:
        raise SandboxError(f"no job cgroup ({why}) and the job runs as root, where RLIMIT_NPROC does not bind")
    if job.language in NO_ADDRESS_LIMIT:
        raise SandboxError(
            f"no job cgroup ({why}), and RLIMIT_AS cannot limit {job.language}'s memory (its runtime reserves "
            "address space up front): run this language where job cgroups work (sandbox.cgroups=required)"
        )
    return {"address_space_bytes": job.limits.memory_mb << 20, "nproc": job.limits.pids}


class JobBounds:
    """Makes each job's cgroup, or says why there is none (`auto` decides once, at the first failure)."""

    def __init__(self, mode: str) -> None:
        if mode not in CGROUP_MODES:
            raise SandboxError(f"sandbox.cgroups must be one of {', '.join(CGROUP_MODES)}, not {mode!r}")
        self.mode = mode
        self.reason: str | None = "sandbox.cgroups=off" if mode == "off" else None
        self._lock = threading.Lock()

    def group(self, memory_bytes: int, pids: int) -> JobCgroup | None:
        """A job cgroup with these limits; None where rlimit_bounds() must stand in; SandboxError when required."""
        if self.reason is not None:
            return None
        try:
            return cgroups().create(memory_bytes, pids)
        except SandboxError as exc:
            if self.mode == "required":
                raise
            with self._lock:
                first, self.reason = self.reason is None, f"sandbox.cgroups=auto: {exc}"
            if first:
                log.warning("bwrap jobs are bounded by rlimits (RLIMIT_AS, RLIMIT_NPROC), not cgroups: %s", exc)
            return None


@cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@cache
def bwrap_version() -> str:
    path = bwrap_path()
    if path is None:
        return ""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().removeprefix("bubblewrap ").strip()


def _work_root(settings_root: Path | None) -> Path:
    root = settings_root or Path(tempfile.gettempdir()) / f"veriloop-sandbox-{os.getuid()}"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    etc = root / "etc"
    if not (etc / "group").exists():
        etc.mkdir(exist_ok=True)
        (etc / "passwd").write_text(PASSWD)
        (etc / "group").write_text(GROUP)
    return root


def bwrap_argv(toolchain: Toolchain, root: Path, mode: str) -> list[str]:
    path = bwrap_path()
    if path is None:
        raise SandboxError("bubblewrap (bwrap) is not installed; run scripts/setup-sandbox.sh")
    argv = [
        path,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--hostname",
        "sandbox",
    ]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if Path(top).is_symlink():
            argv += ["--symlink", str(Path(top).readlink()), top]
        elif Path(top).is_dir():
            argv += ["--ro-bind", top, top]
    argv += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/opt"]
    for extra in ("/etc/ld.so.cache", "/etc/ssl", "/etc/alternatives", "/etc/java-17-openjdk", "/etc/localtime"):
        argv += ["--ro-bind-try", extra, extra]
    argv += ["--ro-bind", str(root / "etc" / "passwd"), "/etc/passwd"]
    argv += ["--ro-bind", str(root / "etc" / "group"), "/etc/group"]
    ancestors = sorted({str(parent) for bind in toolchain.binds for parent in Path(bind).parents} - {"/"})
    for directory in ancestors:
        if not directory.startswith("/usr"):  # bwrap would copy the host's mode (/root is 0700)
            argv += ["--perms", "0755", "--dir", directory]
    for bind in toolchain.binds:
        argv += ["--ro-bind", bind, bind]
    argv += ["--ro-bind", str(INSIDE), RUNNER_DIR]
    argv += ["--proc", "/proc", "--dev", "/dev", "--dir", "/work", "--dir", "/tmp", "--chdir", "/"]
    for key, value in RUNNER_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--cap-drop", "ALL"]
    for cap in RUNNER_CAPS:
        argv += ["--cap-add", cap]
    python = toolchain.path("python")
    assert python is not None
    argv += ["--", *runner_argv(python, RUNNER_DIR, mode)]
    return argv


def _joiner(paths: list[str]) -> Any:
    encoded = [p.encode() for p in paths]

    def join() -> None:  # runs in the forked child before exec: enter the job's cgroups
        for path in encoded:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join


class BwrapSandbox:
    """bubblewrap backend; `warm_workers` pre-started sandboxes serve jobs, cold starts when none is set."""

    name = "bwrap"

    def __init__(self, *, warm_workers: int = 2, work_root: Path | None = None, cgroups: str = "required") -> None:
        self.warm_workers = warm_workers
        self.bounds = JobBounds(cgroups)
        self.root = _work_root(work_root)
        self._toolchain = host_toolchain()
        cache_runner_bytecode()
        self._idle: list[WarmWorker] = []
        self._live: set[WarmWorker] = set()
        self._busy = 0
        self._lock = threading.Lock()
        self._closed = False
        _live.add(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> BwrapSandbox:
        section = settings.sandbox
        return cls(warm_workers=section.warm_workers, work_root=section.work_root, cgroups=section.cgroups)

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return bwrap_version()

    def _fallback(self, job: Job, group: JobCgroup | None) -> dict[str, int]:
        """The rlimits this job needs on top of its spec: none with a cgroup, memory and processes without one."""
        if group is not None:
            return {}
        return rlimit_bounds(job, JOB_UID, self.bounds.reason or "no cgroup")

    @property
    def toolchain(self) -> Toolchain:
        return self._toolchain

    @property
    def version(self) -> str:
        return bwrap_version()

    async def run(self, job: Job) -> ExecResult:
        if bwrap_path() is None:
            return infra_error(
                "bubblewrap (bwrap) is not installed; run scripts/setup-sandbox.sh", sandbox=self.name, version=""
            )
        try:
            if self.warm_workers > 0:
                return await self._run_warm(job)
            return await self._run_cold(job)
        except SandboxError as exc:
            return infra_error(str(exc), sandbox=self.name, version=self.version)

    # ----------------------------------------------------------------------- cold

    async def run_cold(self, job: Job) -> ExecResult:
        """One fresh bwrap for this job, whatever the warm setting (the benchmark's cold figure)."""
        try:
            return await self._run_cold(job)
        except SandboxError as exc:
            return infra_error(str(exc), sandbox=self.name, version=self.version)

    async def _run_cold(self, job: Job) -> ExecResult:
        group: JobCgroup | None = None
        try:
            limits = job.limits
            group = self.bounds.group(limits.memory_mb << 20, limits.pids + PIDS_OVERHEAD)
            extra = self._fallback(job, group)
            argv = bwrap_argv(self._toolchain, self.root, "once")
            spec = runner_spec(job, work_dir="/work", mount=True, uid=JOB_UID, kill="others", oom_protect=True)
            spec["limits"].update(extra)
            started = time.monotonic()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=_joiner(group.join_paths()) if group is not None else None,
                close_fds=True,
            )
            deadline = job.total_time_s() + ANSWER_SLACK_S
            try:
                out, err = await asyncio.to_thread(proc.communicate, frame(spec), deadline)
            except subprocess.TimeoutExpired:
                proc.kill()
                if group is not None:
                    group.kill()
                proc.communicate()
                return infra_error(
                    f"the sandbox runner did not answer within {deadline:.0f} s",
                    sandbox=self.name,
                    version=self.version,
                    wall_s=time.monotonic() - started,
                )
            except asyncio.CancelledError:
                proc.kill()
                if group is not None:
                    group.kill()
                raise
            raw = parse_runner_output(out.decode(errors="replace"))
            if raw is None:
                message = err.decode(errors="replace").strip() or f"bwrap exited with {proc.returncode}"
                return infra_error(f"sandbox failed: {message}", sandbox=self.name, version=self.version)
            return assemble(
                job,
                raw,
                sandbox=self.name,
                version=self.version,
                oom_kills=group.oom_kills() if group is not None else 0,
                peak_bytes=None,
            )
        finally:
            if group is not None:
                group.kill()
                group.remove()

    # ----------------------------------------------------------------------- warm

    async def _run_warm(self, job: Job) -> ExecResult:
        worker = await self._acquire()
        healthy = False
        try:
            try:
                extra = self._fallback(job, worker.group)
            except SandboxError:  # refused before the job reached the worker, which stays good
                healthy = worker.ready
                raise
            raw, oom, healthy = await worker.execute(job, extra)
        finally:
            self._release(worker, healthy)
        if raw is None:
            return infra_error(f"warm sandbox failed: {oom}", sandbox=self.name, version=self.version)
        return assemble(job, raw, sandbox=self.name, version=self.version, oom_kills=int(oom))

    async def _acquire(self) -> WarmWorker:
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxError("sandbox is closed")
                if self._idle:
                    self._busy += 1
                    return self._idle.pop()
                if self._busy < self.warm_workers:
                    self._busy += 1
                    break
            await asyncio.sleep(0.005)
        try:
            worker = WarmWorker(self._toolchain, self.root, self.bounds)
            with self._lock:
                self._live.add(worker)
            return worker
        except BaseException:
            with self._lock:
                self._busy -= 1
            raise

    def _release(self, worker: WarmWorker, healthy: bool) -> None:
        with self._lock:
            self._busy -= 1
            if healthy and not self._closed and worker.jobs < MAX_JOBS_PER_WORKER:
                self._idle.append(worker)
                return
            self._live.discard(worker)
        worker.close()

    async def start_warm(self, count: int | None = None) -> None:
        """Start warm workers ahead of the first jobs (otherwise they start on demand)."""
        wanted = min(count if count is not None else self.warm_workers, self.warm_workers)
        started = []
        try:
            for _ in range(wanted):
                started.append(await self._acquire())
            await asyncio.gather(*(worker.wait_ready() for worker in started))
        finally:
            for worker in started:
                self._release(worker, worker.ready)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live.difference_update(idle)
        for worker in idle:
            worker.close()

    def worker_pids(self) -> list[int]:
        """Host pids of the live warm workers' bwrap processes (the benchmark reads their CPU time)."""
        with self._lock:
            return [worker.proc.pid for worker in self._live]

    async def aclose(self) -> None:
        self.close()


class WarmWorker:
    """One pre-started bwrap with the zygote and supervisor (runner.py `serve`); one job at a time."""

    def __init__(self, toolchain: Toolchain, root: Path, bounds: JobBounds) -> None:
        self.group = bounds.group(512 << 20, 64 + PIDS_OVERHEAD)
        self.limits = (512 << 20, 64 + PIDS_OVERHEAD)
        self.oom_seen = 0
        self.jobs = 0
        argv = bwrap_argv(toolchain, root, "serve")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=_joiner(self.group.join_paths()) if self.group is not None else None,
            close_fds=True,
            bufsize=0,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.stdin, False)
        os.set_blocking(self.stdout, False)
        self._buffer = b""
        self.ready = False

    async def wait_ready(self) -> None:
        """Wait for the runner's READY line (the interpreter has started and preloaded)."""
        if self.ready:
            return
        try:
            line = await asyncio.wait_for(self._read_line(), READY_TIMEOUT_S)
        except TimeoutError:
            raise SandboxError(f"the warm sandbox did not start within {READY_TIMEOUT_S:.0f} s") from None
        except (OSError, EOFError) as exc:
            raise SandboxError(f"the warm sandbox did not start: {exc}") from None
        if line != b"READY":
            raise SandboxError(f"the warm sandbox did not start: {line[:200]!r}")
        self.ready = True

    async def execute(self, job: Job, extra: dict[str, int]) -> tuple[dict[str, Any] | None, int | str, bool]:
        """Run one job; returns (runner result or None, oom kills or an error message, worker still healthy).

        `extra`: rlimits added to the job's (the memory and process bounds where this worker has no cgroup).

        The pipes are driven from the event loop itself (no thread per job: two fewer hand-offs per check).
        """
        self.jobs += 1
        try:
            await self.wait_ready()
            limits = job.limits
            wanted = (limits.memory_mb << 20, limits.pids + PIDS_OVERHEAD)
            if wanted != self.limits and self.group is not None:
                self.group.set_limits(*wanted)
                self.limits = wanted
            spec = runner_spec(job, work_dir="/work", mount=True, uid=JOB_UID, kill="others")
            spec["limits"].update(extra)
            await self._write(frame(spec))
            line = await asyncio.wait_for(self._read_line(), job.total_time_s() + ANSWER_SLACK_S)
            raw = parse_runner_output(line.decode(errors="replace"))
            if raw is None:
                return None, f"unreadable runner answer {line[:200]!r}", False
            oom_total = self.group.oom_kills() if self.group is not None else 0
            oom, self.oom_seen = oom_total - self.oom_seen, oom_total
            return raw, oom, raw.get("clean") is True
        except TimeoutError:
            return None, "the warm runner stopped answering", False
        except (OSError, ValueError, EOFError, SandboxError) as exc:
            return None, str(exc) or type(exc).__name__, False

    @staticmethod
    async def _ready(fd: int, write: bool) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        (loop.add_writer if write else loop.add_reader)(fd, wake)
        try:
            await ready
        finally:
            (loop.remove_writer if write else loop.remove_reader)(fd)

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.stdin, view) :]
            except BlockingIOError:
                await self._ready(self.stdin, write=True)

    async def _read_line(self) -> bytes:
        while b"\n" not in self._buffer:
            try:
                chunk = os.read(self.stdout, 1 << 20)
            except BlockingIOError:
                await self._ready(self.stdout, write=False)
                continue
            if not chunk:
                raise EOFError("the warm runner closed its output")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()  # without a cgroup, the pid namespace ends with bwrap (--die-with-parent)
        if self.group is not None:
            self.group.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        if self.group is not None:
            self.group.remove()


_live: weakref.WeakSet[BwrapSandbox] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for sandbox in list(_live):
        sandbox.close()


_CHECKED: type[SandboxBackend] = BwrapSandbox
"""mypy checks here that the class has every member of the protocol the registry uses."""
