"""The escape suite: hostile programs on every backend end in the right status, in time, and leave nothing behind.

The process backend gives no isolation; it runs only the cases its guarantees cover (see process.py): limits on
time, output, file size and address space, the kill of every descendant, a clean environment of its own.
"""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import pytest

from veriloop.records import ExecStatus
from veriloop.sandbox import Job, Limits
from veriloop.sandbox.languages import program_job

ALL = [
    "bwrap_cold",
    "bwrap_warm",
    "process",
    pytest.param("docker", marks=pytest.mark.docker),
]
ISOLATED = [b for b in ALL if b != "process"]
SMALL = Limits(wall_s=2.0, memory_mb=128, pids=32, output_bytes=64 * 1024, file_size_bytes=4 << 20, disk_mb=16)


def job(sandbox: object, code: str, **limits: object) -> Job:
    return program_job("python", sandbox.toolchain, code, limits=SMALL.model_copy(update=limits))  # type: ignore[attr-defined]


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def job_processes() -> list[int]:
    """Host processes of the job uid, except the Docker containers' reapers (pid 1 of each container)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "")
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "")
        if uid == "65534" and state != "Z" and b"signal.pause" not in cmdline:
            found.append(int(entry.name))
    return found


async def run(sandbox: object, the_job: Job) -> tuple[object, float]:
    started = time.monotonic()
    result = await sandbox.run(the_job)  # type: ignore[attr-defined]
    elapsed = time.monotonic() - started
    if sandbox.name != "process":  # type: ignore[attr-defined]
        # A leak is a process that stays: the other pytest worker's jobs run as the same uid but come and go.
        leftover = set(job_processes())
        deadline = time.monotonic() + 10
        while leftover and time.monotonic() < deadline:
            time.sleep(0.05)
            leftover &= set(job_processes())
        assert not leftover, "a job process outlived run()"
    return result, elapsed


FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
THREAD_BOMB = """
import threading, time
while True:
    try:
        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
    except RuntimeError:
        pass
"""
MEMORY_BOMB = """
hog = []
while True:
    hog.append(b"x" * 10_000_000)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_fork_bomb_times_out_and_is_contained(sandbox: object) -> None:
    result, elapsed = await run(sandbox, job(sandbox, FORK_BOMB))
    assert result.status is ExecStatus.TIMEOUT, result  # type: ignore[attr-defined]
    assert elapsed < 30  # Docker's reaper needs a few seconds for the zombies


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_thread_bomb(sandbox: object) -> None:
    result, elapsed = await run(sandbox, job(sandbox, THREAD_BOMB))
    assert result.status in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT), result  # type: ignore[attr-defined]
    assert elapsed < 15


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_memory_bomb(sandbox: object) -> None:
    result, elapsed = await run(sandbox, job(sandbox, MEMORY_BOMB, wall_s=10.0))
    assert result.status is ExecStatus.MEMORY_LIMIT, result  # type: ignore[attr-defined]
    assert elapsed < 15


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_busy_loop(sandbox: object) -> None:
    result, elapsed = await run(sandbox, job(sandbox, "while True:\n    pass\n", wall_s=1.5))
    assert result.status is ExecStatus.TIMEOUT  # type: ignore[attr-defined]
    assert elapsed < 10


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_long_sleep(sandbox: object) -> None:
    result, elapsed = await run(sandbox, job(sandbox, "import time\ntime.sleep(60)\n", wall_s=1.0))
    assert result.status is ExecStatus.TIMEOUT  # type: ignore[attr-defined]
    assert elapsed < 10


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_endless_output(sandbox: object) -> None:
    result, _ = await run(sandbox, job(sandbox, "while True:\n    print('x' * 1000)\n"))
    assert result.status is ExecStatus.OUTPUT_LIMIT  # type: ignore[attr-defined]
    assert result.truncated  # type: ignore[attr-defined]
    assert len(result.stdout) + len(result.stderr) <= SMALL.output_bytes  # type: ignore[attr-defined]


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_disk_fill_hits_the_quota(sandbox: object) -> None:
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n    i += 1\n"
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.RUNTIME_ERROR, result  # type: ignore[attr-defined]
    assert "No space left" in result.stderr or "File too large" in result.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_file_size_limit(sandbox: object) -> None:
    code = "open('big', 'wb').write(b'x' * (8 << 20))\n"
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.RUNTIME_ERROR, result  # type: ignore[attr-defined]
    assert "File too large" in result.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_writes_outside_the_work_dir_fail(sandbox: object, tmp_path: Path) -> None:
    token = f"veriloop-escape-{random.getrandbits(48):x}"
    targets = [
        "/usr/" + token,
        "/etc/" + token,
        "/" + token,
        "/in/" + token,
        "/opt/veriloop/" + token,
        f"{tmp_path}/{token}",
        f"/root/{token}",
        f"/proc/1/{token}",
    ]
    code = (
        f"import sys\nwritten = []\nfor path in {targets!r}:\n    try:\n        open(path, 'w').write('x')\n"
        "        written.append(path)\n    except OSError:\n        pass\n"
        "print(written)\nsys.exit(3 if written else 0)\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    for path in targets:
        assert not Path(path).exists()


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_only_the_in_sandbox_code_is_visible(sandbox: object) -> None:
    """The runner's folder is bound alone: a job sees runner.py and the judge, no host module and no package."""
    code = (
        "import os, sys\nnames = sorted(name for _, _, files in os.walk('/opt/veriloop') for name in files"
        " if name.endswith('.py'))\nprint(names)\ntry:\n    import veriloop\n    print('veriloop', veriloop.__file__)\n"
        "except ImportError:\n    print('no veriloop')\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    lines = result.stdout.splitlines()  # type: ignore[attr-defined]
    assert lines == ["['__init__.py', 'harness_py.py', 'runner.py']", "no veriloop"], result.stdout  # type: ignore[attr-defined]


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_a_job_cannot_plant_code_or_bytecode_in_the_runners_folder(sandbox: object) -> None:
    """The judge's own files are the trust base of every verdict: a job that could replace harness_py.py, or plant a
    newer cached bytecode beside it, would write the next job's verdicts. The folder is bound read-only."""
    from veriloop.sandbox.base import INSIDE

    before = {path: path.read_bytes() for path in INSIDE.rglob("*") if path.is_file()}
    targets = [
        "/opt/veriloop/harness_py.py",
        "/opt/veriloop/runner.py",
        "/opt/veriloop/__pycache__/harness_py.cpython-311.pyc",
        "/opt/veriloop/__pycache__/planted.pyc",
        "/opt/veriloop/sitecustomize.py",
    ]
    code = (
        f"import os, sys\nwritten = []\nfor path in {targets!r}:\n    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        open(path, 'wb').write(b'import sys; sys.exit(0)')\n        written.append(path)\n"
        "    except OSError:\n        pass\nprint(written)\nsys.exit(3 if written else 0)\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    after = {path: path.read_bytes() for path in INSIDE.rglob("*") if path.is_file()}
    assert after == before


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_host_environment_is_invisible(sandbox: object, monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"secret-{random.getrandbits(48):x}"
    monkeypatch.setenv("VERILOOP_TEST_SECRET", token)
    code = (
        "import os\nprint(dict(os.environ))\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n"
        "        try:\n            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "        except OSError:\n            pass\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    assert token not in result.stdout  # type: ignore[attr-defined]
    assert "VERILOOP_TEST_SECRET" not in result.stdout  # type: ignore[attr-defined]


async def test_process_backend_gives_a_clean_environment(
    process_sandbox: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERILOOP_TEST_SECRET", "s3cret")
    result, _ = await run(process_sandbox, job(process_sandbox, "import os\nprint(dict(os.environ))\n"))
    assert result.status is ExecStatus.PASSED  # type: ignore[attr-defined]
    assert "s3cret" not in result.stdout  # type: ignore[attr-defined]
    assert "TZ" in result.stdout and "PYTHONHASHSEED" in result.stdout  # type: ignore[attr-defined]


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_no_loopback_connection_to_the_host(sandbox: object) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = (
        "import socket, sys\ns = socket.socket()\ns.settimeout(1)\ntry:\n"
        f"    s.connect(('127.0.0.1', {port}))\n    sys.exit(3)\nexcept OSError as exc:\n    print('blocked', exc)\n"
    )
    try:
        result, _ = await run(sandbox, job(sandbox, code))
        assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
        assert "blocked" in result.stdout  # type: ignore[attr-defined]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_double_forked_daemon_does_not_outlive_the_job(sandbox: object) -> None:
    token = f"0.{random.getrandbits(40)}"
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '30', '{token}'])\n    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent done')\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    deadline = time.monotonic() + 3
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(token) == []


@pytest.mark.parametrize("sandbox", ALL, indirect=True)
async def test_killing_its_parent(sandbox: object) -> None:
    code = "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(1)\nprint('parent survived?')\n"
    result, elapsed = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.RUNTIME_ERROR, result  # type: ignore[attr-defined]
    assert elapsed < 15
    after = await sandbox.run(job(sandbox, "print('still fine')\n"))  # type: ignore[attr-defined]
    assert after.status is ExecStatus.PASSED and "still fine" in after.stdout


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_job_runs_unprivileged(sandbox: object) -> None:
    code = (
        "import os\nstatus = open('/proc/self/status').read()\n"
        "caps = [l.split()[1] for l in status.splitlines() if l.startswith(('CapEff', 'CapBnd'))]\n"
        "nnp = [l.split()[1] for l in status.splitlines() if l.startswith('NoNewPrivs')]\n"
        "print(os.getuid(), os.getgid(), caps, nnp)\n"
    )
    result, _ = await run(sandbox, job(sandbox, code))
    assert result.status is ExecStatus.PASSED, result  # type: ignore[attr-defined]
    assert result.stdout.split()[:2] == ["65534", "65534"]  # type: ignore[attr-defined]
    assert "'0000000000000000'" in result.stdout and "['1']" in result.stdout  # type: ignore[attr-defined]


SHM_WRITE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
ident = libc.shmget({key}, 4096, 0o1666)
if ident < 0:
    sys.exit(0)
address = libc.shmat(ident, None, 0)
ctypes.memmove(address, b"{token}", {size})
libc.shmdt(ctypes.c_void_p(address))
print("left", ident)
"""
SHM_READ = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
ident = libc.shmget({key}, 4096, 0o666)
print(ctypes.string_at(libc.shmat(ident, None, 0), {size}) if ident >= 0 else "none")
"""


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_system_v_shared_memory_does_not_reach_the_next_job(sandbox: object) -> None:
    """SysV IPC objects outlive their processes: a warm worker must not hand one job's to the next."""
    key, token = random.randrange(1 << 20, 1 << 30), f"shm-{random.getrandbits(40):x}"
    first, _ = await run(sandbox, job(sandbox, SHM_WRITE.format(key=key, token=token, size=len(token))))
    assert first.status is ExecStatus.PASSED, first  # type: ignore[attr-defined]
    second, _ = await run(sandbox, job(sandbox, SHM_READ.format(key=key, size=len(token))))
    assert second.status is ExecStatus.PASSED, second  # type: ignore[attr-defined]
    assert token not in second.stdout and "none" in second.stdout  # type: ignore[attr-defined]


KEY_ADD = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
# add_key("user", description, payload, size, KEY_SPEC_USER_KEYRING): the keyring of the uid, not of the process
print(libc.syscall(248, b"user", b"{name}", b"{token}", {size}, -4), ctypes.get_errno())
"""
KEY_READ = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
found = libc.syscall(250, 10, -4, b"user", b"{name}", 0)  # KEYCTL_SEARCH in the user keyring
buffer = ctypes.create_string_buffer(64)
size = libc.syscall(250, 11, found, buffer, 64) if found > 0 else -1  # KEYCTL_READ
print(buffer.raw[: max(size, 0)])
"""


@pytest.mark.parametrize("sandbox", ISOLATED, indirect=True)
async def test_kernel_keyring_does_not_reach_the_next_job(sandbox: object) -> None:
    """The keyring is not namespaced: every job runs as uid 65534, so a key one job adds would wait for the next."""
    if os.uname().machine != "x86_64":
        pytest.skip("the test's syscall numbers are x86_64's")
    name, token = f"veriloop-{random.getrandbits(40):x}", f"key-{random.getrandbits(40):x}"
    first, _ = await run(sandbox, job(sandbox, KEY_ADD.format(name=name, token=token, size=len(token))))
    assert first.status is ExecStatus.PASSED, first  # type: ignore[attr-defined]
    assert first.stdout.split()[0] == "-1", first  # type: ignore[attr-defined]
    second, _ = await run(sandbox, job(sandbox, KEY_READ.format(name=name)))
    assert second.status is ExecStatus.PASSED, second  # type: ignore[attr-defined]
    assert token not in second.stdout  # type: ignore[attr-defined]
