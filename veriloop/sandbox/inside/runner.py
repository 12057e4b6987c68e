"""The job runner that runs *inside* every sandbox (bubblewrap, a Docker container, or a plain process).

Standard library only: it runs under the host interpreter and under the image's python3.

    runner.py once [--spec PATH]   run one job (JSON from PATH, or a header + JSON on stdin), print one result line
    runner.py serve                a warm sandbox: a zygote plus a supervisor, many jobs, one result line each
    runner.py clean DIR/* ...      kill every process this user may signal, empty the given folders and remove
                                   its System V IPC objects (Docker: between jobs in one container)

Header: ``JOB <nbytes>\\n`` followed by that many bytes of JSON (the job's files travel inside it). Result: one JSON
line. In serve mode a ``READY`` line comes first, and each result also says whether the worker may take another job
(`clean`).

In `once` mode the runner is the job's leader: it mounts private tmpfs /work and /tmp when asked (the sandbox gives it
a mount namespace of its own), writes the job's files, and runs each step in a forked child that drops to the job
uid with no capabilities, no new privileges, rlimits and a seccomp filter. It enforces wall time and the output
cap, and kills every process of the job afterwards.

In `serve` mode two processes split that work so that a job never sees state left by an earlier one, with one fork
per step: the *zygote* (the process the sandbox started) has imported what jobs need and never touches job data; it
forks a step process on request and reports its exit. The *supervisor*, forked from the zygote once before any job,
reads jobs, mounts a fresh tmpfs /work and /tmp per job, sends each step's pipes and spec to the zygote (file
descriptors over a socket: the zygote never reads them), supervises the step, and unmounts afterwards. Nothing is
ever forked from the supervisor, and the zygote moves to a fresh IPC namespace between jobs.
"""

# Raw os calls on purpose (fds, /proc, syscalls inside the sandbox):
# ruff: noqa: PTH100, PTH102, PTH103, PTH108, PTH112, PTH114, PTH118, PTH120, PTH208, SIM105
from __future__ import annotations

import atexit
import io
import json
import marshal
import os
import resource
import signal
import stat
import sys
import time

TYPE_CHECKING = False  # typing itself costs milliseconds at every cold start
if TYPE_CHECKING:
    import socket
    from typing import Any

CLONE_NEWIPC = 0x08000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
READ_CHUNK = 65536
DRAIN_S = 0.5
RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))
_STARTUP_TZ = os.environ.get("TZ")
# Imported once by the zygote so that each forked job starts with them loaded (they hold no job data).
PRELOAD = ("harness_py", "ast", "bisect", "collections", "functools", "heapq", "itertools", "math", "re", "string")
# The kernel keyring (add_key, request_key, keyctl) is not namespaced: a key one job adds to uid 65534's keyring
# would be readable by the next job, warm or cold. Blocked per audit arch (native, then compat), as Docker does.
KEYRING_SYSCALLS = {
    "x86_64": ((0xC000003E, (248, 249, 250, 0x400000F8, 0x400000F9, 0x400000FA)), (0x40000003, (286, 287, 288))),
    "aarch64": ((0xC00000B7, (217, 218, 219)), (0x40000028, (309, 310, 311))),
}

_libc: Any = None
_bounding: list[int] | None = None
_inherited = False  # set in the zygote: its steps inherit the restrictions and signal dispositions
_seccomp: Any = None
_site: list[str] | None = None


def libc() -> Any:
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int) -> None:
    import ctypes

    _check(libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    import ctypes

    rc = libc().mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def unmount_all(target: str, limit: int = 16) -> None:
    """Detach every mount stacked on `target` (lazily: nothing of the job is running any more)."""
    import ctypes
    import errno

    for _ in range(limit):
        if libc().umount2(target.encode(), MNT_DETACH) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # not a mount point (any more)
                return
            _check(-1, f"umount {target}")
    raise OSError(f"{target}: more than {limit} mounts stacked")


def bounding_caps() -> list[int]:
    """The capabilities still in this process's bounding set (bwrap leaves the runner a handful)."""
    global _bounding
    if _bounding is None:
        try:
            with open("/proc/self/status") as handle:
                mask = next(int(line.split()[1], 16) for line in handle if line.startswith("CapBnd:"))
            _bounding = [cap for cap in range(64) if mask >> cap & 1]
        except (OSError, StopIteration, ValueError):
            _bounding = list(range(64))
    return _bounding


def seccomp_program(machine: str) -> bytes | None:
    """A classic-BPF filter that fails the keyring syscalls with EPERM and allows the rest; None on unknown arches."""
    import struct

    table = KEYRING_SYSCALLS.get(machine)
    if table is None:
        return None
    load, jump_eq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    program: list[tuple[int, int | None, int, int]] = [(load, 0, 0, 4)]  # A = arch
    for arch, numbers in table:
        block: list[tuple[int, int | None, int, int]] = [(load, 0, 0, 0)]  # A = syscall number
        block += [(jump_eq, None, 0, number) for number in numbers]  # None: jump to the deny return
        block.append((ret, 0, 0, allow))
        program.append((jump_eq, 0, len(block), arch))
        program += block
    program.append((ret, 0, 0, allow))
    denied = len(program)
    program.append((ret, 0, 0, deny))
    return b"".join(
        struct.pack("=HBBI", code, denied - index - 1 if jt is None else jt, jf, k)
        for index, (code, jt, jf, k) in enumerate(program)
    )


def _seccomp_args() -> Any:
    """prctl's arguments for the keyring filter, built once (the zygote builds them before forking), or ()."""
    import ctypes

    global _seccomp
    if _seccomp is None:
        program = seccomp_program(os.uname().machine)
        if program is None:
            _seccomp = ()
        else:

            class Fprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            buffer = ctypes.create_string_buffer(program, len(program))
            fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
            _seccomp = (PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0, buffer, fprog)
    return _seccomp


def install_seccomp() -> None:
    """Install the keyring filter on this process (needs no-new-privileges first); a no-op on unknown arches."""
    args = _seccomp_args()
    if args:
        _check(libc().prctl(*args[:5]), "seccomp")


def write_quiet(path: str, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, text.encode())
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- processes


def _proc_uid(pid: int) -> tuple[int, str] | None:
    """Real uid and state of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            state, uid = "", -1
            for line in handle:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
            return uid, state
    except (OSError, ValueError, IndexError):
        return None


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
        return int(text[text.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _state(pid: int) -> str:
    """A process's state letter ("" when it is gone), from the one-line /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
        return chr(text[text.rindex(b")") + 2])
    except (OSError, ValueError, IndexError):
        return ""


def _victims(mode: str, uid: int | None) -> list[int]:
    me = os.getpid()
    found: list[int] = []
    if mode == "others":  # bwrap: the pid namespace holds the job, its init, this runner and the runner's parent
        keep = {1, me, os.getppid()}
        for pid in _pids():
            if pid not in keep and _state(pid) not in ("Z", ""):
                found.append(pid)
    elif mode == "uid":
        for pid in _pids():
            info = _proc_uid(pid)
            if pid != me and info is not None and info[0] == uid and info[1] != "Z":
                found.append(pid)
    elif mode == "all":
        for pid in _pids():
            info = _proc_uid(pid)
            if pid not in (1, me) and info is not None and info[1] != "Z":
                found.append(pid)
    else:  # descendants of this process (it is a child subreaper, so orphans stay below it)
        parents = {pid: _parent(pid) for pid in _pids()}
        for pid in parents:
            seen, cursor = 0, parents.get(pid, -1)
            while cursor > 1 and seen < 64:
                if cursor == me:
                    info = _proc_uid(pid)
                    if info is not None and info[1] != "Z":
                        found.append(pid)
                    break
                cursor, seen = parents.get(cursor, -1), seen + 1
    return found


def kill_job(mode: str, uid: int | None, keep: int | None = None, deadline_s: float = 5.0) -> int:
    """SIGKILL every process of the job until none is left; returns how many were signalled."""
    killed = 0
    stop = time.monotonic() + deadline_s
    while time.monotonic() < stop:
        if mode == "all":
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        victims = _victims(mode, uid)
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        if mode == "descendants":
            _reap_orphans(keep)
        time.sleep(0.002)
    if mode == "descendants":
        _reap_orphans(keep)
    return killed


def _reap_orphans(keep: int | None) -> None:
    """Reap zombie children that were re-parented here, but not `keep` (the step's child, waited for later)."""
    me = os.getpid()
    for pid in _pids():
        if pid != keep and _parent(pid) == me:
            info = _proc_uid(pid)
            if info is not None and info[1] == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass


def remove_ipc() -> None:
    """Remove the System V IPC objects this user may remove (shared memory, semaphores, queues): they outlive jobs."""
    import ctypes

    ipc_rmid = 0
    for table in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{table}") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 2 or not fields[1].isdigit():
                continue
            ident = int(fields[1])
            if table == "shm":
                libc().shmctl(ident, ipc_rmid, ctypes.c_void_p(None))
            elif table == "sem":
                libc().semctl(ident, 0, ipc_rmid)
            else:
                libc().msgctl(ident, ipc_rmid, ctypes.c_void_p(None))


# --------------------------------------------------------------------------- the job child


def _default_signals() -> None:
    for number in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)


def _restrict() -> None:
    """No new privileges, an empty capability bounding set and the keyring filter: what no job may do without.

    The effective capabilities stay (the setuid to the job uid clears them), so the zygote does this once for
    itself and every step it forks inherits it, without a prctl of its own.
    """
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    for cap in bounding_caps():
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            pass
    install_seccomp()


def _drop_privileges(spec: dict[str, Any]) -> None:
    uid = spec.get("uid")
    gid: int = spec["gid"] if spec.get("gid") is not None else (uid or 0)
    if uid is not None and os.geteuid() == 0:
        if not _inherited:
            _restrict()
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.geteuid() == 0 or os.getuid() == 0:
            raise OSError("privilege drop failed")
    else:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        try:
            install_seccomp()  # best effort where the runner is not root (Docker's own profile covers it there)
        except OSError:
            pass


def _set_limits(limits: dict[str, Any]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    fsize = int(limits["file_size_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    nofile = int(limits["open_files"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    address_space = limits.get("address_space_bytes")
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (int(address_space), int(address_space)))
    nproc = limits.get("nproc")  # binds the job's uid (not root): where no cgroup's pids.max does
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))


def _child(spec: dict[str, Any], step: dict[str, Any], fds: tuple[int, ...]) -> None:
    """In the forked child: become the job (fds, privileges, limits, cwd, env), then exec or run Python.

    A judged step (see harness_py) gets a fifth descriptor, fd 4: its verdict pipe. In `once` mode it starts a fresh
    interpreter rather than running in this fork of the runner, whose memory holds the whole job, tests included.
    """
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), 65536)
        if not _inherited:
            _default_signals()
        write_quiet("/proc/self/oom_score_adj", "0")
        _set_limits(spec["limits"])
        _drop_privileges(spec)
        os.chdir(spec["work_dir"])
        env = {str(k): str(v) for k, v in spec.get("env", {}).items()}
        argv = [str(arg) for arg in step["argv"]]
        if step.get("python") and step.get("judge") and not _inherited:
            env["PYTHONPATH"] = RUNNER_DIR
            argv = [argv[0], "-S", "-B", *argv[1:]]
        elif step.get("python"):
            _run_python(step["argv"], env)
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # must never return into the runner's code
        try:
            os.write(2, f"sandbox: cannot start {step.get('argv', ['?'])[0]}: {exc}\n".encode())
            os.write(3, b"start_error\n")
        except OSError:
            pass
    os._exit(127)


def _run_python(argv: list[str], env: dict[str, str]) -> None:
    """Run a script in this already-started interpreter as if by `python SCRIPT ARGS` (saves a start-up)."""
    script = os.path.abspath(argv[1])
    # os.environ's own clear() and update() run more interpreter code than the job (pages to copy after the fork)
    data = os.environ._data  # type: ignore[attr-defined]
    for key in data:
        os.unsetenv(key)
    data.clear()
    for key, value in env.items():
        data[key.encode()] = value.encode()
        os.putenv(key, value)
    if hasattr(time, "tzset") and env.get("TZ") != _STARTUP_TZ:  # the interpreter set it up at start
        time.tzset()
    sys.argv = [script, *argv[2:]]
    sys.path[0] = os.path.dirname(script)
    sys.path.extend(path for path in [*_site_dirs(), RUNNER_DIR] if path not in sys.path)
    _job_stdio()
    code = 0
    try:
        with open(script, "rb") as handle:
            source = handle.read()
        compiled = compile(source, script, "exec")
    except SyntaxError:
        _print_exception(limit=0)
        _status("syntax_error")
        _finish(1)
    except OSError as exc:
        sys.stderr.write(f"python: can't open file {script!r}: {exc}\n")
        _finish(2)
    main = type(sys)("__main__")
    main.__file__ = script
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    import traceback  # noqa: F401  (now: the program may leave no memory to import it with later)

    try:
        try:
            exec(compiled, main.__dict__)
            _join_threads()
        except SystemExit as exc:
            code = _exit_code(exc)
        except MemoryError:
            _status("memory_error")
            _print_exception()
            code = 1
        except BaseException:  # report like the interpreter does
            _print_exception()
            code = 1
    except BaseException:  # reporting failed (no memory left, closed stderr): still the program's own failure
        code = 1
    _finish(code)


def _job_stdio() -> None:
    """sys.stdin/stdout/stderr for the job, on fds 0-2 (now its pipes).

    The interpreter's own start-up streams already sit on those fds and the runner never uses them (it reads and
    writes raw fds), so their buffers are empty: reuse them when they are UTF-8, which saves building three new
    ones in every step.
    """
    streams = (sys.stdin, sys.stdout, sys.stderr)
    if (
        all(stream is not None and stream.fileno() == fd for fd, stream in enumerate(streams))
        and (sys.stdin, sys.stdout, sys.stderr) == (sys.__stdin__, sys.__stdout__, sys.__stderr__)
        and all(stream.encoding.lower().replace("-", "") == "utf8" for stream in streams)
        and sys.stderr.errors == "backslashreplace"
    ):
        return
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    for name in ("stdin", "stdout", "stderr"):
        setattr(sys, f"__{name}__", getattr(sys, name))


def _print_exception(limit: int | None = None) -> None:
    import traceback

    try:
        traceback.print_exc(limit=limit)
    except MemoryError:
        _status("memory_error")


def _site_dirs() -> list[str]:
    """Installed packages without running `site` (whose .pth hooks cost more than the job): no .pth processing."""
    global _site
    if _site is not None:
        return _site
    import sysconfig

    found = []
    for path in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), "/usr/lib/python3/dist-packages"):
        if path and os.path.isdir(path) and path not in found:
            found.append(path)
    _site = found
    return found


def preload() -> None:
    import importlib

    _site_dirs()
    bounding_caps()
    _seccomp_args()
    libc()
    if RUNNER_DIR not in sys.path:
        sys.path.append(RUNNER_DIR)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:
        pass
    return 1


def _join_threads() -> None:
    threading = sys.modules.get("threading")
    if threading is None:  # the program started no thread
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _status(word: str) -> None:
    try:
        os.write(3, f"{word}\n".encode())
    except OSError:
        pass


def _finish(code: int) -> None:
    try:
        atexit._run_exitfuncs()
    except BaseException:
        _print_exception()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    os._exit(code)


# --------------------------------------------------------------------------- starting steps


class ForkLauncher:
    """`once` mode: the runner forks each step itself and waits for it."""

    def __init__(self) -> None:
        self.pid = 0
        self.fd = -1

    def start(self, spec: dict[str, Any], step: dict[str, Any], child: tuple[int, ...], parent: tuple[int, ...]) -> int:
        pid = os.fork()
        if pid == 0:
            for fd in parent:
                os.close(fd)
            _child(spec, step, tuple(child))
        self.pid = pid
        self.fd = os.pidfd_open(pid)
        return pid

    def exited(self) -> tuple[int, float | None, int | None] | None:
        """Called when `fd` is readable: the step's exit."""
        return self.wait()

    def release(self) -> None:
        os.close(self.fd)

    def wait(self) -> tuple[int, float | None, int | None]:
        while True:
            try:
                _, status, usage = os.wait4(self.pid, 0)
                return status, usage.ru_utime + usage.ru_stime, int(usage.ru_maxrss)
            except InterruptedError:
                continue
            except ChildProcessError:
                return 0, None, None


class ZygoteLauncher:
    """`serve` mode: the zygote forks each step; its pipes and spec reach the step as fds the zygote never reads."""

    def __init__(self, ctrl: socket.socket) -> None:
        self.ctrl = ctrl
        self.fd = ctrl.fileno()
        self.pid = 0  # learnt from the exit report: the kill of the job's pid namespace reaches the step anyway
        self.sequence = 0

    def start(self, spec: dict[str, Any], step: dict[str, Any], child: tuple[int, ...], parent: tuple[int, ...]) -> int:
        import socket

        keys = ("limits", "uid", "gid", "work_dir", "env")
        memfd = os.memfd_create("step", os.MFD_CLOEXEC)
        try:  # marshal: the step reads it with less of the interpreter than json needs (fewer pages to copy)
            # Not the step's stdin: a judged step's stdin is its tests, which the candidate it forks must never see.
            shown = {key: value for key, value in step.items() if key != "stdin"}
            data = marshal.dumps({"spec": {key: spec.get(key) for key in keys}, "step": shown})
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view) :]
            self.sequence += 1
            self.pid = 0
            socket.send_fds(self.ctrl, [b"F %d" % self.sequence], [memfd, *child])
        finally:
            os.close(memfd)
        return 0

    def exited(self) -> tuple[int, float | None, int | None] | None:
        words = self.ctrl.recv(128).split()
        if not words:
            raise OSError("the zygote is gone")
        if len(words) != 6 or words[0] != b"X" or int(words[1]) != self.sequence:
            return None  # the report of a step abandoned earlier
        self.pid = int(words[2])
        return int(words[3]), float(words[4]), int(words[5])

    def wait(self) -> tuple[int, float | None, int | None]:
        while True:
            found = self.exited()
            if found is not None:
                return found

    def release(self) -> None:
        return None


if TYPE_CHECKING:  # (a runtime `X | Y` of classes needs Python 3.10; the runner runs on 3.9 too)
    Launcher = ForkLauncher | ZygoteLauncher


# --------------------------------------------------------------------------- the leader / supervisor


def run_step(spec: dict[str, Any], step: dict[str, Any], launcher: Launcher) -> dict[str, Any]:
    """Run one step in a child process; enforce its wall time and the output cap; kill the rest of the job."""
    import selectors

    limits = spec["limits"]
    cap = int(limits["output_bytes"])
    timeout = float(step.get("timeout_s") or limits["wall_s"])
    stdin_data = step.get("stdin")
    stdin_bytes = stdin_data.encode() if isinstance(stdin_data, str) else b""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    judged = bool(step.get("judge"))
    res_r, res_w = os.pipe() if judged else (-1, -1)
    child: tuple[int, ...] = (in_r, out_w, err_w, st_w)
    parent: tuple[int, ...] = (in_w, out_r, err_r, st_r)
    if judged:
        child, parent = (*child, res_w), (*parent, res_r)
    started = time.monotonic()
    try:
        pid = launcher.start(spec, step, child, parent)
    except BaseException:
        for fd in (*child, *parent):
            os.close(fd)
        raise
    for fd in child:
        os.close(fd)
    outputs: dict[int, bytearray] = {out_r: bytearray(), err_r: bytearray(), st_r: bytearray()}
    results_cap = int(spec.get("results_max_bytes", 1 << 20))
    if judged:
        outputs[res_r] = bytearray()
    total = 0
    truncated = timed_out = over_output = False
    status_info: tuple[int, float | None, int | None] | None = None
    sel = selectors.PollSelector()  # a handful of fds: poll(2) is cheaper than making an epoll fd per step
    reads = (out_r, err_r, st_r, res_r) if judged else (out_r, err_r, st_r)
    for fd in reads:
        sel.register(fd, selectors.EVENT_READ)
    sel.register(launcher.fd, selectors.EVENT_READ)
    pending = memoryview(stdin_bytes)
    if pending:
        os.set_blocking(in_w, False)
        sel.register(in_w, selectors.EVENT_WRITE)
    else:
        os.close(in_w)
    deadline = started + timeout
    killed_at: float | None = None
    open_reads = set(reads)

    def stop() -> None:
        kill_job(spec["kill"], spec.get("uid"), pid)
        if status_info is None and pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)  # not reaped yet, so still this step (even before it dropped to the uid)
            except OSError:
                pass

    while open_reads or status_info is None:
        now = time.monotonic()
        if status_info is not None and killed_at is None:
            stop()
            killed_at = now
        if killed_at is not None and now - killed_at > DRAIN_S:
            break
        if status_info is None and now >= deadline:
            timed_out = True
            stop()
            killed_at = now
        wait_for = (deadline if killed_at is None else killed_at + DRAIN_S) - now
        for key, _ in sel.select(max(wait_for, 0.0)):
            fd = int(key.fd)
            if fd == launcher.fd:
                status_info = launcher.exited()
                if status_info is not None:
                    sel.unregister(launcher.fd)
                continue
            if fd == in_w:
                try:
                    written = os.write(in_w, pending[:READ_CHUNK])
                    pending = pending[written:]
                except (BrokenPipeError, BlockingIOError):
                    pending = pending[:0]
                if not pending:
                    sel.unregister(in_w)
                    os.close(in_w)
                continue
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                sel.unregister(fd)
                open_reads.discard(fd)
                continue
            if fd == st_r:
                outputs[fd] += chunk[: max(0, 4096 - len(outputs[fd]))]
                continue
            if fd == res_r:
                outputs[fd] += chunk[: max(0, results_cap - len(outputs[fd]))]
                continue
            room = cap - total
            if len(chunk) > room:
                outputs[fd] += chunk[: max(room, 0)]
                total = cap
                truncated = True
                if not over_output:
                    over_output = True
                    stop()
                    killed_at = killed_at or time.monotonic()
            else:
                outputs[fd] += chunk
                total += len(chunk)
    if status_info is None or killed_at is None:
        stop()
    if status_info is None:
        status_info = launcher.wait()
    sel.close()
    launcher.release()
    for fd in reads:
        os.close(fd)
    if pending:
        try:
            os.close(in_w)
        except OSError:
            pass
    wait_status, cpu_s, max_rss_kb = status_info
    flags = outputs[st_r].decode(errors="replace").split()
    return {
        "name": step.get("name", "run"),
        "kind": step.get("kind", "run"),
        "exit_code": os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None,
        "signal": os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None,
        "stdout": outputs[out_r].decode(errors="replace"),
        "stderr": outputs[err_r].decode(errors="replace"),
        "truncated": truncated,
        "timed_out": timed_out,
        "output_limit": over_output,
        "wall_s": round(time.monotonic() - started, 6),
        "cpu_s": round(cpu_s, 6) if cpu_s is not None else None,
        "max_rss_kb": max_rss_kb,
        "flags": flags,
        "results": outputs[res_r].decode(errors="replace") if judged else None,
    }


def _prepare(spec: dict[str, Any]) -> None:
    """Private tmpfs mounts (when asked) and the job's files; runs as the leader, before any job code."""
    work = spec["work_dir"]
    uid = spec.get("uid")
    gid: int = spec["gid"] if spec.get("gid") is not None else (uid or 0)
    if spec.get("mount"):
        size = int(spec["disk_bytes"])
        ids = f",uid={uid},gid={gid}" if uid is not None else ""
        mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0700{ids}")
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    else:
        os.makedirs(work, mode=0o700, exist_ok=True)
    owner = (int(uid), gid) if uid is not None and os.geteuid() == 0 else None
    made = {work}
    for name, content in (spec.get("files") or {}).items():
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if not parts or ".." in parts:
            raise OSError(f"job file name {name!r} leaves the work dir")
        folder = work
        for part in parts[:-1]:
            folder = os.path.join(folder, part)
            if folder not in made:
                os.mkdir(folder, 0o755)
                if owner is not None:
                    os.chown(folder, *owner, follow_symlinks=False)
                made.add(folder)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(folder, parts[-1]), flags, 0o644)
        try:
            view = memoryview(str(content).encode("utf-8", "surrogateescape"))
            while view:
                view = view[os.write(fd, view) :]
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)


def _read_results(spec: dict[str, Any]) -> str | None:
    """The test harness's results file, read without following links and capped in size."""
    name = spec.get("results_file")
    if not name:
        return None
    path = os.path.join(spec["work_dir"], name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, int(spec.get("results_max_bytes", 1 << 20)))
        return data.decode(errors="replace")
    finally:
        os.close(fd)


def run_job(spec: dict[str, Any], launcher: Launcher | None = None) -> dict[str, Any]:
    launcher = launcher or ForkLauncher()
    if spec.get("oom_protect"):
        write_quiet("/proc/self/oom_score_adj", "-1000")
    if spec.get("kill") == "descendants":
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(PR_SET_DUMPABLE, 0)
    try:
        _prepare(spec)
    except OSError as exc:
        return {"steps": [], "results": None, "error": f"runner could not prepare the job: {exc}"}
    steps: list[dict[str, Any]] = []
    finished = _run_steps(spec, spec["steps"], launcher, steps)
    results = next((s["results"] for s in steps if s.get("results") is not None), None)
    if results is None:
        results = _read_results(spec)
    trusted = spec.get("trusted")
    if trusted and finished:
        # The trusted phase (the reference side of a test program) runs where the candidate has left nothing: its
        # processes are killed, its work dir and /tmp replaced by fresh ones holding only the trusted files.
        kill_job(spec["kill"], spec.get("uid"))
        try:
            _reset(spec, trusted.get("files") or {})
        except OSError as exc:
            return {"steps": steps, "results": results, "error": f"runner could not prepare the trusted phase: {exc}"}
        first = len(steps)
        _run_steps(spec, trusted["steps"], launcher, steps)
        for outcome in steps[first:]:
            outcome["trusted"] = True
    leftovers = kill_job(spec["kill"], spec.get("uid"))
    wipe(spec.get("cleanup", []))
    if spec.get("cleanup_ipc"):
        remove_ipc()
    return {"steps": steps, "results": results, "error": None, "leftovers": leftovers}


def _run_steps(
    spec: dict[str, Any], todo: list[dict[str, Any]], launcher: Launcher, steps: list[dict[str, Any]]
) -> bool:
    """Run steps in order into `steps`; True when every one ran to a zero exit within its limits.

    A step with `stdin_from` reads the stdout of the earlier step of that name (the candidate's recorded values).
    """
    for step in todo:
        source = step.get("stdin_from")
        if source:
            earlier = next((s for s in reversed(steps) if s["name"] == source), None)
            step = dict(step, stdin=earlier["stdout"] if earlier is not None else "")
        outcome = run_step(spec, step, launcher)
        steps.append(outcome)
        ended_badly = outcome["timed_out"] or outcome["output_limit"] or "start_error" in outcome["flags"]
        failed = outcome["exit_code"] != 0
        if ended_badly or (failed and step.get("kind") == "compile") or (failed and step.get("stop_on_failure")):
            return False
    return all(s["exit_code"] == 0 for s in steps)


def _reset(spec: dict[str, Any], files: dict[str, str]) -> None:
    """A fresh work dir and /tmp holding only `files` (private tmpfs mounts again where the runner mounts them)."""
    if spec.get("mount"):
        for path in (spec["work_dir"], "/tmp"):
            unmount_all(path)
    else:
        wipe([spec["work_dir"], *spec.get("cleanup", [])])
    _prepare({**spec, "files": files})


def wipe(paths: list[str]) -> None:
    """Remove each path; `DIR/*` empties DIR but keeps it."""
    import shutil

    for path in paths:
        if path.endswith("/*"):
            base = path[:-2]
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for name in names:
                target = os.path.join(base, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    try:
                        os.unlink(target)
                    except OSError:
                        pass
        else:
            shutil.rmtree(path, ignore_errors=True)


def _read_header(stream: io.BufferedReader[io.FileIO]) -> int | None:
    line = stream.readline(64)
    if not line:
        return None
    word, _, size = line.decode().strip().partition(" ")
    if word != "JOB" or not size.isdigit():
        raise ValueError(f"bad header {line!r}")
    return int(size)


def _read_body(stream: io.BufferedReader[io.FileIO], size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError("input closed")
    return data


def _emit(result: dict[str, Any]) -> None:
    data = (json.dumps(result) + "\n").encode()
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


# --------------------------------------------------------------------------- serve: zygote and supervisor


def serve() -> None:
    """The zygote: preload, start the supervisor, then fork one step process per request."""
    import gc
    import socket

    write_quiet("/proc/self/oom_score_adj", "-1000")
    prctl(PR_SET_DUMPABLE, 0)
    preload()
    ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ctrl.close()
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            supervise(theirs)
        finally:
            os._exit(0)
    theirs.close()
    _check(libc().unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")  # the supervisor keeps the first one to itself
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)  # the job stream is the supervisor's alone
    os.dup2(devnull, 1)
    os.close(devnull)
    global _inherited
    _default_signals()
    os.environ.clear()
    _restrict()
    _inherited = True
    gc.freeze()  # forked steps then never touch (copy) the preloaded objects for garbage collection
    zygote(ctrl)


def zygote(ctrl: socket.socket) -> None:
    import select
    import socket

    children: dict[int, tuple[int, bytes]] = {}  # pidfd -> (pid, the supervisor's number for the step)
    while True:
        ready, _, _ = select.select([ctrl.fileno(), *children], [], [])
        for fd in ready:
            if fd != ctrl.fileno():
                pid, number = children.pop(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime
                ctrl.send(b"X %s %d %d %.6f %d" % (number, pid, status, cpu, int(usage.ru_maxrss)))
                continue
            message, fds, _, _ = socket.recv_fds(ctrl, 32, 8)
            if not message:
                return
            words = message.split()
            if words == [b"N"]:  # a new job: its steps get a fresh System V IPC namespace
                _check(libc().unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
            elif len(words) == 2 and words[0] == b"F" and len(fds) in (5, 6):
                pid = os.fork()
                if pid == 0:
                    _step_process(fds)
                children[os.pidfd_open(pid)] = (pid, words[1])
            for received in fds:
                os.close(received)


def _step_process(fds: list[int]) -> None:
    """A fresh fork of the zygote: read this step's spec from its memfd, then become the step."""
    try:  # no prctl here: the sandbox ends when the zygote does, and _restrict() already ran in the zygote
        size = os.fstat(fds[0]).st_size
        data = bytearray()
        while len(data) < size:
            chunk = os.pread(fds[0], size - len(data), len(data))
            if not chunk:
                break
            data += chunk
        message = marshal.loads(bytes(data))
    except BaseException:
        try:
            os.write(fds[4], b"start_error\n")
        except OSError:
            pass
        os._exit(127)
    _child(message["spec"], message["step"], tuple(fds[1:]))


def supervise(ctrl: socket.socket) -> None:
    """The supervisor: one job at a time from stdin, one result line each on stdout."""
    launcher = ZygoteLauncher(ctrl)
    stream = io.BufferedReader(io.FileIO(0, "r", closefd=False), buffer_size=1 << 16)
    os.write(1, b"READY\n")  # the zygote has preloaded: jobs may come
    while True:
        size = _read_header(stream)
        if size is None:
            return
        try:
            spec = json.loads(_read_body(stream, size))
            result = run_job(spec, launcher)
        except BaseException as exc:  # the host must always get an answer
            result = {"steps": [], "results": None, "error": f"runner failed: {exc!r}"}
        # run_job killed the job's processes after each step and once more at the end: something still alive at that
        # last pass (or an error part-way) means this worker is not to be trusted with another job.
        result["clean"] = not result.get("error") and not result.get("leftovers")
        if not result["clean"]:
            kill_job("others", None)
        _emit(result)
        # Then the clean-up, while the host reads the result (unmounting waits for the kernel); the next job is read
        # only after it. A failure here ends this worker: the host sees its output close and starts another.
        for path in ("/work", "/tmp"):
            unmount_all(path)
        ctrl.send(b"N")


def once(argv: list[str]) -> None:
    if "--spec" in argv:
        with open(argv[argv.index("--spec") + 1], "rb") as handle:
            spec = json.load(handle)
    else:
        stream = io.BufferedReader(io.FileIO(0, "r", closefd=False))
        size = _read_header(stream)
        if size is None:
            raise SystemExit("no job on stdin")
        try:
            spec = json.loads(_read_body(stream, size))
        except (ValueError, EOFError) as exc:
            _emit({"steps": [], "results": None, "error": f"runner failed: {exc!r}"})
            return
    try:
        result = run_job(spec)
    except BaseException as exc:  # the host must always get an answer
        result = {"steps": [], "results": None, "error": f"runner failed: {exc!r}"}
    _emit(result)


def main(argv: list[str]) -> None:
    mode = argv[1] if len(argv) > 1 else "once"
    if mode == "serve":
        serve()
    elif mode == "once":
        once(argv[2:])
    elif mode == "clean":  # kill everything this user may signal, then empty the given folders
        kill_job("all", None)
        wipe(argv[2:])
        remove_ipc()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
