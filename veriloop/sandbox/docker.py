"""The Docker backend: warm containers from the sandbox image, one job at a time each, via the docker SDK.

Containers run with network_mode=none, a read-only root, tmpfs /work and /tmp, pids and memory limits, every
capability dropped, no-new-privileges and user 65534. Creating a container costs 7 to 15 s on the vfs storage
driver, so containers are kept warm and reused: each job gets a fresh folder under /work, and afterwards every
process of the job is killed, /work, /tmp, /dev/shm and /dev/mqueue are emptied and the job's System V IPC objects
removed. The job's JSON (its files inside) arrives through a read-only bind of a host folder (/in); the runner
(runner.py, bound read-only at /opt/veriloop) writes the files into the job's folder.

The job and the runner share uid 65534 here, so a job can kill its runner; that is reported as the program's
runtime error, and the container is cleaned the same way afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import SandboxError
from veriloop.records import ExecResult, ExecStatus
from veriloop.sandbox.base import (
    INSIDE,
    TOOLS,
    SandboxBackend,
    Toolchain,
    assemble,
    cache_runner_bytecode,
    infra_error,
    parse_runner_output,
    runner_argv,
    runner_spec,
)
from veriloop.sandbox.cgroups import JobCgroup, pid_alive
from veriloop.sandbox.job import JOB_UID, Job

LABEL = "veriloop.sandbox"
_IDS = itertools.count()
RUNNER_DIR = "/opt/veriloop"
RUNNER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}
PIDS_OVERHEAD = 4
ANSWER_SLACK_S = 15.0
CLEAN = ["/work/*", "/tmp/*", "/dev/shm/*", "/dev/mqueue/*"]
# pid 1 of each container: reaps orphans; it has no handler for anything a job could use to stop it.
REAPER = """
import os, signal
def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
while True:
    signal.pause()
    reap()
"""
PROBE = (
    "import json, os, shutil\n"
    f"tools = {list(TOOLS)!r}\n"
    "names = {'python': 'python3'}\n"
    "found = {t: shutil.which(names.get(t, t)) for t in tools}\n"
    "print(json.dumps({t: os.path.realpath(p) for t, p in found.items() if p}))\n"
)


def _client(url: str | None) -> Any:
    try:
        # By name, so that type checkers run from the repository root do not take its docker/ folder (Dockerfiles)
        # for the package; the SDK is untyped anyway.
        docker: Any = importlib.import_module("docker")
    except ImportError:
        raise SandboxError("the docker backend needs the `docker` Python package (pip install docker)") from None
    try:
        client = docker.DockerClient(base_url=url, timeout=3600) if url else docker.from_env(timeout=3600)
        client.ping()
    except Exception as exc:
        raise SandboxError(f"no Docker engine answers ({exc}); run scripts/setup-sandbox.sh") from None
    return client


def engine_available(url: str | None = None) -> str | None:
    """None when an engine answers, else why not (for skips and messages)."""
    try:
        _client(url).close()
    except SandboxError as exc:
        return str(exc)
    return None


class DockerSandbox:
    """Docker backend with a pool of warm containers (`warm_workers`, at least one)."""

    name = "docker"

    def __init__(self, *, image: str, warm_workers: int = 1, work_root: Path | None = None, url: str | None = None):
        self.image = image
        self.url = url
        self.size = max(1, warm_workers)
        base = work_root or Path(tempfile.gettempdir())
        self.root = base / f"veriloop-docker-{os.getpid()}"
        self._client: Any = None
        self._toolchain: Toolchain | None = None
        self._version = ""
        self._idle: list[WarmContainer] = []
        self._busy = 0
        self._lock = threading.Lock()
        self._closed = False
        cache_runner_bytecode()
        _live.add(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> DockerSandbox:
        section = settings.sandbox
        return cls(
            image=section.docker_image,
            warm_workers=section.warm_workers,
            work_root=section.work_root,
            url=section.docker_url,
        )

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return settings.sandbox.docker_image  # the image is the toolchain; the engine's version needs the engine

    def client(self) -> Any:
        if self._client is None:
            client = _client(self.url)
            try:
                client.images.get(self.image)
            except Exception:
                raise SandboxError(
                    f"docker image {self.image} is missing; build it with scripts/setup-sandbox.sh"
                ) from None
            self._version = str(client.version().get("Version", ""))
            self._client = client
            self._remove_stale()
        return self._client

    def _remove_stale(self) -> None:
        for container in self._client.containers.list(all=True, filters={"label": LABEL}):
            owner = container.labels.get("veriloop.pid", "")
            if owner.isdigit() and not pid_alive(int(owner)):
                with contextlib.suppress(Exception):
                    container.remove(force=True)

    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            raise SandboxError("the docker toolchain is known once the engine is reached: await prepare() first")
        return self._toolchain

    async def prepare(self) -> Toolchain:
        """Reach the engine, start one warm container and learn which tools the image has."""
        if self._toolchain is None:
            worker = await self._acquire(64, 64)
            try:
                self._toolchain = await asyncio.to_thread(worker.probe)
            finally:
                self._release(worker, True)
        return self._toolchain

    @property
    def version(self) -> str:
        return self._version

    async def run(self, job: Job) -> ExecResult:
        try:
            worker = await self._acquire(job.limits.pids, job.limits.disk_mb)
        except SandboxError as exc:
            return infra_error(str(exc), sandbox=self.name, version=self._version)
        healthy = False
        try:
            result, healthy = await asyncio.to_thread(worker.execute, job, f"j{next(_IDS)}")
        finally:
            self._release(worker, healthy)
        if isinstance(result, str):
            return infra_error(result, sandbox=self.name, version=self._version)
        if isinstance(result, ExecResult):
            result.sandbox_version = self._version
            return result
        raw, oom = result
        return assemble(job, raw, sandbox=self.name, version=self._version, oom_kills=oom)

    async def _acquire(self, pids: int, disk_mb: int) -> WarmContainer:
        while True:
            with self._lock:
                if self._closed:
                    raise SandboxError("sandbox is closed")
                for index, worker in enumerate(self._idle):
                    if worker.key == (pids, disk_mb):
                        self._busy += 1
                        return self._idle.pop(index)
                if self._busy + len(self._idle) < self.size or self._idle:
                    if self._busy + len(self._idle) >= self.size:
                        evicted = self._idle.pop(0)
                        threading.Thread(target=evicted.close, daemon=True).start()
                    self._busy += 1
                    break
            await asyncio.sleep(0.01)
        try:
            client = await asyncio.to_thread(self.client)
            name = f"veriloop-{os.getpid()}-{next(_IDS)}"
            return await asyncio.to_thread(WarmContainer, client, self.image, self.root / name, name, pids, disk_mb)
        except BaseException:
            with self._lock:
                self._busy -= 1
            raise

    def _release(self, worker: WarmContainer, healthy: bool) -> None:
        with self._lock:
            self._busy -= 1
            if healthy and not self._closed:
                self._idle.append(worker)
                return
        worker.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()
        shutil.rmtree(self.root, ignore_errors=True)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


class WarmContainer:
    """One long-lived container; serves one job at a time."""

    def __init__(self, client: Any, image: str, input_dir: Path, name: str, pids: int, disk_mb: int) -> None:
        self.key = (pids, disk_mb)
        self.input_dir = input_dir
        input_dir.mkdir(parents=True, mode=0o755)
        os.chown(input_dir, JOB_UID, JOB_UID)
        self.memory_mb = 512
        try:
            self.container = client.containers.run(
                image,
                ["python3", "-S", "-c", REAPER],
                detach=True,
                name=name,
                labels={LABEL: "1", "veriloop.pid": str(os.getpid())},
                network_mode="none",
                read_only=True,
                tmpfs={"/work": f"size={disk_mb}m,mode=1777,exec", "/tmp": f"size={disk_mb}m,mode=1777,exec"},
                volumes={
                    str(input_dir): {"bind": "/in", "mode": "ro"},
                    str(INSIDE): {"bind": RUNNER_DIR, "mode": "ro"},
                },
                pids_limit=pids + PIDS_OVERHEAD,
                mem_limit=f"{self.memory_mb}m",
                memswap_limit=f"{self.memory_mb}m",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                user=f"{JOB_UID}:{JOB_UID}",
                working_dir="/work",
                environment=RUNNER_ENV,
                shm_size="16m",
            )
            self.container.reload()
        except Exception as exc:
            shutil.rmtree(input_dir, ignore_errors=True)
            raise SandboxError(f"cannot start a sandbox container from {image}: {exc}") from None
        self.memory = _memory_cgroup(int(self.container.attrs["State"]["Pid"]))

    def probe(self) -> Toolchain:
        code, output = self.container.exec_run(["python3", "-S", "-c", PROBE], user=f"{JOB_UID}:{JOB_UID}")
        if code != 0:
            raise SandboxError(f"cannot list the image's tools: {output.decode(errors='replace')}")
        paths = json.loads(output.decode())
        return Toolchain(paths={str(k): str(v) for k, v in paths.items()}, binds=[], where="image")

    def _set_memory(self, memory_mb: int) -> None:
        if memory_mb != self.memory_mb:
            self.container.update(mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m")
            self.memory_mb = memory_mb

    def execute(self, job: Job, job_id: str) -> tuple[tuple[dict[str, Any], int] | ExecResult | str, bool]:
        """Run one job: (runner result and OOM kills | a finished result | an infra error message, healthy)."""
        spec_file = self.input_dir / f"{job_id}.json"
        started = time.monotonic()
        try:
            spec = runner_spec(
                job, work_dir=f"/work/{job_id}", mount=False, uid=None, kill="all", cleanup=CLEAN, cleanup_ipc=True
            )
            fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                os.fchown(fd, JOB_UID, JOB_UID)
                json.dump(spec, handle)
            self._set_memory(job.limits.memory_mb)
            oom_before = self.memory.oom_kills() if self.memory else 0
            argv = runner_argv("python3", RUNNER_DIR, "once", "--spec", f"/in/{job_id}.json")
            outcome: dict[str, Any] = {}
            thread = threading.Thread(target=self._exec, args=(argv, outcome), daemon=True)
            thread.start()
            thread.join(job.total_time_s() + ANSWER_SLACK_S)
            if thread.is_alive():
                self.clean()
                thread.join(10)
                return f"the sandbox runner did not answer within {job.total_time_s() + ANSWER_SLACK_S:.0f} s", False
            if "error" in outcome:
                return f"docker exec failed: {outcome['error']}", False
            raw = parse_runner_output(outcome["stdout"])
            if raw is None:
                self.clean()
                if outcome["exit_code"] in (137, -9) or (outcome["exit_code"] or 0) > 128:
                    return ExecResult(
                        status=ExecStatus.RUNTIME_ERROR,
                        exit_code=outcome["exit_code"],
                        stderr="the program killed its runner",
                        wall_s=time.monotonic() - started,
                        sandbox="docker",
                    ), True
                return f"runner failed: {outcome['stderr'][-2000:] or outcome['exit_code']}", False
            oom = (self.memory.oom_kills() - oom_before) if self.memory else 0
            return (raw, oom), True
        except Exception as exc:
            return f"docker backend error: {exc}", False
        finally:
            spec_file.unlink(missing_ok=True)

    def _exec(self, argv: list[str], outcome: dict[str, Any]) -> None:
        try:
            code, (out, err) = self.container.exec_run(
                argv, user=f"{JOB_UID}:{JOB_UID}", workdir="/work", environment=RUNNER_ENV, demux=True
            )
            outcome.update(
                exit_code=code,
                stdout=(out or b"").decode(errors="replace"),
                stderr=(err or b"").decode(errors="replace"),
            )
        except Exception as exc:
            outcome["error"] = str(exc)

    def clean(self) -> None:
        """Kill every job process and empty the writable folders (after a runner that did not finish)."""
        with contextlib.suppress(Exception):
            self.container.exec_run(runner_argv("python3", RUNNER_DIR, "clean", *CLEAN), user=f"{JOB_UID}:{JOB_UID}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
        shutil.rmtree(self.input_dir, ignore_errors=True)


def _memory_cgroup(pid: int) -> JobCgroup | None:
    """The container's memory cgroup (to read its OOM-kill count), from its pid 1 as the host sees it."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            directory = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            return JobCgroup(1, [directory]) if directory.exists() else None
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return JobCgroup(2, [Path("/sys/fs/cgroup") / path.lstrip("/")])
    return None


_live: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for sandbox in list(_live):
        sandbox.close()


_CHECKED: type[SandboxBackend] = DockerSandbox
"""mypy checks here that the class has every member of the protocol the registry uses."""
