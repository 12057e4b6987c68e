"""Per-job cgroups: the memory and process limits that bind root, the OOM count, the peak, and the kill switch.

cgroup v1 (separate `memory` and `pids` hierarchies, as on this machine) and v2 (one unified hierarchy with the
memory and pids controllers delegated to us) are both handled. Job cgroups are created below the caller's own
cgroup (read from /proc/self/cgroup) and named `veriloop-<pid>-<n>`, so ones leaked by a dead process are found
and removed at start-up.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from veriloop.errors import SandboxError

_NAME = re.compile(r"^veriloop-(\d+)-\d+$")
_counter = itertools.count()
_cleaned: set[tuple[str, ...]] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class Mount:
    """A cgroup file-system mount: where it is, which cgroup it shows at its root, and its controllers."""

    point: Path
    root: str
    version: int
    controllers: frozenset[str]


def read_mounts(mountinfo: str) -> list[Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        fstype = extra[0]
        if fstype == "cgroup":
            controllers = frozenset(opt for opt in extra[2].split(",") if opt in {"memory", "pids"})
            mounts.append(Mount(Path(fields[4]), fields[3], 1, controllers))
        elif fstype == "cgroup2":
            mounts.append(Mount(Path(fields[4]), fields[3], 2, frozenset()))
    return mounts


def read_membership(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the v2 entry is under the key ""."""
    member: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        names = parts[1].split(",") if parts[1] else [""]
        for name in names:
            member[name] = parts[2]
    return member


def _inside(mount: Mount, path: str) -> Path:
    relative = path
    if mount.root != "/" and path.startswith(mount.root):
        relative = path[len(mount.root) :]
    return mount.point / relative.lstrip("/")


def _write(path: Path, value: str | int) -> None:
    with path.open("w") as handle:
        handle.write(str(value))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _keyed(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class JobCgroup:
    """The cgroup directories of one job (v1: memory + pids; v2: one directory)."""

    version: int
    dirs: list[Path]
    _joined: list[str] = field(default_factory=list)

    @property
    def memory_dir(self) -> Path:
        return self.dirs[0]

    @property
    def pids_dir(self) -> Path:
        return self.dirs[-1]

    def set_limits(self, memory_bytes: int, pids: int) -> None:
        try:
            if self.version == 1:
                self._set_v1_memory(memory_bytes)
                _write(self.pids_dir / "pids.max", pids)
            else:
                _write(self.memory_dir / "memory.max", memory_bytes)
                swap = self.memory_dir / "memory.swap.max"
                if swap.exists():
                    _write(swap, 0)
                _write(self.memory_dir / "pids.max", pids)
        except OSError as exc:
            raise SandboxError(f"cannot set cgroup limits in {self.memory_dir}: {exc.strerror}") from None

    def _set_v1_memory(self, memory_bytes: int) -> None:
        limit = self.memory_dir / "memory.limit_in_bytes"
        memsw = self.memory_dir / "memory.memsw.limit_in_bytes"
        # memsw must stay >= the memory limit: raise it first when growing, lower it last when shrinking.
        order = [limit, memsw] if memory_bytes < self._current_limit() else [memsw, limit]
        for path in order:
            if path.exists():
                _write(path, memory_bytes)

    def _current_limit(self) -> int:
        text = _read(self.memory_dir / "memory.limit_in_bytes").strip()
        return int(text) if text.isdigit() else 1 << 62

    def procs_files(self) -> list[Path]:
        return [directory / "cgroup.procs" for directory in self.dirs]

    def join_paths(self) -> list[str]:
        """Paths of the cgroup.procs files a child writes "0" to, prepared before fork (no allocation later)."""
        return [str(path) for path in self.procs_files()]

    def oom_kills(self) -> int:
        if self.version == 1:
            return _keyed(_read(self.memory_dir / "memory.oom_control"), "oom_kill")
        return _keyed(_read(self.memory_dir / "memory.events"), "oom_kill")

    def peak_bytes(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        text = _read(self.memory_dir / name).strip()
        return int(text) if text.isdigit() else None

    def reset_peak(self) -> None:
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        with contextlib.suppress(OSError):
            _write(self.memory_dir / name, 0)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files():
            found.update(int(word) for word in _read(path).split() if word.isdigit())
        return found

    def kill(self, deadline_s: float = 5.0) -> None:
        """SIGKILL everything in the cgroup until it is empty."""
        if self.version == 2 and (self.memory_dir / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.memory_dir / "cgroup.kill", 1)
        stop = time.monotonic() + deadline_s
        while time.monotonic() < stop:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self, deadline_s: float = 5.0) -> bool:
        """rmdir each directory, retrying while the kernel still counts exiting tasks (EBUSY)."""
        stop = time.monotonic() + deadline_s
        remaining = [d for d in self.dirs if d.exists()]
        while remaining:
            for directory in list(remaining):
                try:
                    directory.rmdir()
                    remaining.remove(directory)
                except FileNotFoundError:
                    remaining.remove(directory)
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > stop:
                        return False
                    self.kill(0.05)
            if remaining:
                time.sleep(0.002)
        return True


class Cgroups:
    """Creates job cgroups below this process's own cgroups; detects v1 or v2 once."""

    def __init__(self, version: int, bases: list[Path]) -> None:
        self.version = version
        self.bases = bases

    @classmethod
    def detect(cls, mountinfo: str | None = None, membership: str | None = None) -> Cgroups:
        mounts = read_mounts(mountinfo if mountinfo is not None else _read(Path("/proc/self/mountinfo")))
        member = read_membership(membership if membership is not None else _read(Path("/proc/self/cgroup")))
        v1 = {c: m for m in mounts if m.version == 1 for c in m.controllers}
        if "memory" in v1 and "pids" in v1:
            bases = [_inside(v1[c], member.get(c, "/")) for c in ("memory", "pids")]
            return cls(1, bases)
        unified = [m for m in mounts if m.version == 2]
        if unified and "" in member:
            base = _inside(unified[0], member[""])
            available = set(_read(base / "cgroup.controllers").split())
            if {"memory", "pids"} <= available:
                return cls(2, [base])
            raise SandboxError(
                f"cgroup v2 at {base} does not offer the memory and pids controllers (it offers: "
                f"{' '.join(sorted(available)) or 'none'}); delegate them to this service's cgroup"
            )
        raise SandboxError("no usable cgroup hierarchy: need cgroup v1 memory+pids or a cgroup v2 mount")

    def _enable_v2_controllers(self) -> None:
        control = self.bases[0] / "cgroup.subtree_control"
        enabled = set(_read(control).split())
        if {"memory", "pids"} <= enabled:
            return
        try:
            _write(control, "+memory +pids")
        except OSError as exc:
            raise SandboxError(
                f"cgroup v2: cannot enable memory and pids for children of {self.bases[0]} ({exc.strerror}); "
                "run veriloop in a cgroup with those controllers delegated and no processes of its own"
            ) from None

    def cleanup_stale(self) -> int:
        """Remove job cgroups left by processes that are gone; returns how many were removed."""
        key = tuple(str(base) for base in self.bases)
        with _lock:
            if key in _cleaned:
                return 0
            _cleaned.add(key)
        removed = 0
        for base in self.bases:
            try:
                entries = list(base.iterdir())
            except OSError:
                continue
            for entry in entries:
                match = _NAME.match(entry.name)
                if match and entry.is_dir() and not pid_alive(int(match.group(1))):
                    stale = JobCgroup(self.version, [entry])
                    stale.kill(1.0)
                    removed += int(stale.remove(1.0))
        return removed

    def create(self, memory_bytes: int, pids: int) -> JobCgroup:
        self.cleanup_stale()
        if self.version == 2:
            self._enable_v2_controllers()
        name = f"veriloop-{os.getpid()}-{next(_counter)}"
        dirs = [base / name for base in self.bases]
        try:
            for directory in dirs:
                directory.mkdir()
        except OSError as exc:
            JobCgroup(self.version, dirs).remove(0.5)
            raise SandboxError(f"cannot create cgroup {dirs[0]}: {exc.strerror}") from None
        group = JobCgroup(self.version, dirs)
        try:
            group.set_limits(memory_bytes, pids)
        except SandboxError:
            group.remove(0.5)
            raise
        return group


_detected: Cgroups | None = None


def cgroups() -> Cgroups:
    """The process-wide Cgroups (detected once)."""
    global _detected
    if _detected is None:
        _detected = Cgroups.detect()
    return _detected
