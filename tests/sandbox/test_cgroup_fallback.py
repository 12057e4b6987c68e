"""sandbox.cgroups: where job cgroups cannot be made (the worker container), bwrap jobs are bounded by rlimits.

The unit tests fake only the cgroup file system's refusal; the hostile programs (fork, thread and memory bombs) run
for real in bwrap with `cgroups="off"`, the bounds a worker container gets with `auto` (docker/worker-seccomp.json
and compose.yaml are checked here too; tests/service/test_compose_stack.py runs them in the container).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.errors import SandboxError
from veriloop.records import ExecStatus
from veriloop.sandbox import Limits
from veriloop.sandbox import bwrap as bwrap_module
from veriloop.sandbox.bwrap import BwrapSandbox, JobBounds, rlimit_bounds
from veriloop.sandbox.languages import program_job

REPO = Path(__file__).resolve().parents[2]
SMALL = Limits(wall_s=2.0, memory_mb=128, pids=32, output_bytes=64 * 1024, file_size_bytes=4 << 20, disk_mb=16)
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
THREAD_BOMB = (
    "import threading, time\nwhile True:\n    try:\n"
    "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
    "    except RuntimeError:\n        pass\n"
)
MEMORY_BOMB = "hog = []\nwhile True:\n    hog.append(b'x' * 10_000_000)\n"
LIMITS = "import resource as r\nprint(r.getrlimit(r.RLIMIT_AS)[0], r.getrlimit(r.RLIMIT_NPROC)[0])\n"


def _refuse(*_: object) -> None:
    raise SandboxError("cannot create cgroup /sys/fs/cgroup/memory/veriloop-1-0: Read-only file system")


class _Cgroups:
    """Stands in for the cgroup file system of a container: every create() is refused, and counted."""

    def __init__(self) -> None:
        self.calls = 0

    def create(self, memory_bytes: int, pids: int) -> None:
        self.calls += 1
        _refuse()


def test_required_fails_auto_falls_back_once_off_never_tries(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = _Cgroups()
    monkeypatch.setattr(bwrap_module, "cgroups", lambda: fake)
    with pytest.raises(SandboxError, match="Read-only"):
        JobBounds("required").group(1 << 27, 36)
    auto = JobBounds("auto")
    with caplog.at_level(logging.WARNING, logger="veriloop.sandbox.bwrap"):
        assert auto.group(1 << 27, 36) is None
        assert auto.group(1 << 27, 36) is None
    assert fake.calls == 2  # required once, auto once: then it remembers why
    assert auto.reason is not None and "Read-only" in auto.reason
    assert len([r for r in caplog.records if "rlimits" in r.getMessage()]) == 1
    off = JobBounds("off")
    assert off.group(1 << 27, 36) is None and fake.calls == 2
    with pytest.raises(SandboxError, match=r"sandbox\.cgroups must be one of"):
        JobBounds("sometimes")


def test_rlimit_bounds_never_leave_a_job_unbounded() -> None:
    toolchain = BwrapSandbox(warm_workers=0, cgroups="off").toolchain
    python = program_job("python", toolchain, "print(1)", limits=SMALL)
    assert rlimit_bounds(python, 65534, "off") == {"address_space_bytes": 128 << 20, "nproc": 32}
    for uid in (0, None):  # RLIMIT_NPROC does not bind root
        with pytest.raises(SandboxError, match="root"):
            rlimit_bounds(python, uid, "off")
    for language in ("java", "javascript", "go"):  # RLIMIT_AS cannot hold their runtimes
        with pytest.raises(SandboxError, match="RLIMIT_AS cannot limit"):
            rlimit_bounds(python.model_copy(update={"language": language}), 65534, "off")


def test_setting_reaches_the_backend() -> None:
    settings = load_settings(None, sandbox={"cgroups": "auto"})
    assert BwrapSandbox.from_settings(settings).bounds.mode == "auto"
    assert load_settings(None).sandbox.cgroups == "required"  # hosts keep cgroups or fail
    with pytest.raises(Exception, match="cgroups"):
        load_settings(None, sandbox={"cgroups": "maybe"})


def test_worker_seccomp_profile_lets_bwrap_work_and_refuses_the_rest() -> None:
    profile = json.loads((REPO / "docker" / "worker-seccomp.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {name for rule in profile["syscalls"] if "args" not in rule for name in rule["names"]}
    needed = {"mount", "umount2", "pivot_root", "unshare", "clone", "sethostname", "capset", "prctl", "setresuid"}
    assert not needed & denied
    assert {"bpf", "keyctl", "add_key", "ptrace", "io_uring_setup", "open_by_handle_at", "init_module"} <= denied
    newuser = [rule for rule in profile["syscalls"] if "args" in rule]
    assert len(newuser) == 1 and set(newuser[0]["names"]) == {"unshare", "clone"}
    assert newuser[0]["args"] == [{"index": 0, "value": 0x10000000, "valueTwo": 0x10000000, "op": "SCMP_CMP_MASKED_EQ"}]
    assert next(r for r in profile["syscalls"] if "clone3" in r["names"])["errnoRet"] == 38  # glibc falls back
    compose = (REPO / "compose.yaml").read_text()
    assert "seccomp=./docker/worker-seccomp.json" in compose and "VERILOOP_SANDBOX__CGROUPS: auto" in compose


# --------------------------------------------------------------------------- real bwrap, no cgroup


@pytest.fixture(scope="module", params=["cold", "warm"])
def rlimited(request: pytest.FixtureRequest) -> Iterator[BwrapSandbox]:
    sandbox = BwrapSandbox(warm_workers=0 if request.param == "cold" else 1, cgroups="off")
    yield sandbox
    sandbox.close()


NAMESPACE = "import os\nprint(os.readlink('/proc/self/ns/pid'), flush=True)\n"
"""Prepended to every program: the job's pid namespace, which a process left behind would still be in."""


def _job_processes(namespace: str) -> list[int]:
    """Live processes of the job uid in the job's pid namespace (the other pytest worker's sandbox jobs run as
    the same uid at the same time, so the uid alone does not say whose a process is)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                inside = str((entry / "ns" / "pid").readlink()) == namespace
                status = (entry / "status").read_text()
            except OSError:
                continue
            fields = {line.split(":")[0]: line.split()[1:] for line in status.splitlines() if ":" in line}
            job_uid = fields.get("Uid", [""])[0] == "65534"  # a warm sandbox's own runner shares the namespace
            if inside and job_uid and fields.get("State", ["Z"])[0] != "Z":
                found.append(int(entry.name))
    return found


async def _run(sandbox: BwrapSandbox, code: str, language: str = "python") -> tuple[Any, float]:
    job = program_job("python", sandbox.toolchain, NAMESPACE + code, limits=SMALL)
    if language != "python":
        job = job.model_copy(update={"language": language})
    started = time.monotonic()
    result = await sandbox.run(job)
    elapsed = time.monotonic() - started
    namespace, _, rest = result.stdout.partition("\n")
    if namespace.startswith("pid:["):  # the job ran: nothing of it may outlive run()
        deadline = time.monotonic() + 3
        while _job_processes(namespace) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _job_processes(namespace) == [], "a job process outlived run()"
        result = result.model_copy(update={"stdout": rest})
    return result, elapsed


@pytest.mark.bwrap
@pytest.mark.slow
async def test_hostile_jobs_are_bounded_by_rlimits(rlimited: BwrapSandbox) -> None:
    """The escape suite's bombs, without a cgroup: each ends in its status, in time, and nothing is left behind."""
    result, _ = await _run(rlimited, LIMITS)
    assert result.status is ExecStatus.PASSED and result.stdout.split() == [str(128 << 20), "32"], result  # type: ignore[attr-defined]
    result, elapsed = await _run(rlimited, MEMORY_BOMB)
    assert result.status is ExecStatus.MEMORY_LIMIT and elapsed < 15, result  # type: ignore[attr-defined]
    result, elapsed = await _run(rlimited, FORK_BOMB)
    assert result.status is ExecStatus.TIMEOUT and elapsed < 30, result  # type: ignore[attr-defined]
    result, elapsed = await _run(rlimited, THREAD_BOMB)
    assert result.status in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT) and elapsed < 15, result  # type: ignore[attr-defined]
    # A job the rlimits cannot bound is refused before it runs, and the sandbox stays usable.
    result, _ = await _run(rlimited, "print(1)", language="java")
    assert result.status is ExecStatus.INFRA_ERROR and "RLIMIT_AS cannot limit" in result.stderr, result  # type: ignore[attr-defined]
    result, _ = await _run(rlimited, "print('after')")
    assert result.status is ExecStatus.PASSED and result.stdout.strip() == "after", result  # type: ignore[attr-defined]


RAISE_LIMITS = """
import resource as r
for limit in (r.RLIMIT_AS, r.RLIMIT_NPROC):
    try:
        r.setrlimit(limit, (r.RLIM_INFINITY, r.RLIM_INFINITY))
        print("raised")
    except (ValueError, OSError):
        print("refused")
hog = []
while True:
    hog.append(b'x' * 10_000_000)
"""


@pytest.mark.bwrap
@pytest.mark.slow
async def test_a_job_cannot_lift_the_rlimits_that_stand_in_for_its_cgroup(rlimited: BwrapSandbox) -> None:
    """Without a cgroup the rlimits are the only bound: raising them needs CAP_SYS_RESOURCE, which the job lacks."""
    result, elapsed = await _run(rlimited, RAISE_LIMITS)
    assert result.stdout.split()[:2] == ["refused", "refused"], result
    assert result.status is ExecStatus.MEMORY_LIMIT and elapsed < 15, result
