"""The job runner that runs *inside* every sandbox (bubblewrap, a Docker container, or a plain process).

Standard library only: it runs under the host interpreter and under the image's python3.

    runner.py once [--spec PATH]   run one job (JSON from PATH, or a header + JSON on stdin), print one result line
    runner.py serve                a zygote for warm sandboxes: for each header line on stdin it forks a job
                                   leader that reads the job body itself, so the zygote never holds job data and
                                   a leader forked for job N carries nothing of the jobs before it

Header: ``JOB <nbytes>\\n`` followed by that many bytes of JSON. Result: one JSON line. In serve mode the zygote
writes ``DONE <wait status> <leftovers killed>\\n`` after each job.

A leader (root inside bubblewrap) gives the job private tmpfs mounts for /work and /tmp, copies the input files in,
then runs each step in a child that drops to the job uid with no capabilities, no new privileges and rlimits.
It enforces wall time and the output cap, and kills every process of the job afterwards.
"""

# Raw os calls on purpose (fds, /proc, syscalls inside the sandbox):
# ruff: noqa: PTH100, PTH103, PTH108, PTH112, PTH114, PTH118, PTH120, PTH208, SIM105
from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import resource
import selectors
import shutil
import signal
import stat
import sys
import threading
import time
import traceback
import types
from typing import Any

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
READ_CHUNK = 65536
DRAIN_S = 0.5

_libc: Any = None


def libc() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int) -> None:
    _check(libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = libc().mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def unshare_mounts() -> None:
    _check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount("none", "/", None, MS_REC | MS_PRIVATE, None)


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except OSError:
        return 40


def write_quiet(path: str, text: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        pass


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


def _victims(mode: str, uid: int | None) -> list[int]:
    me = os.getpid()
    found: list[int] = []
    if mode == "uid":
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


# --------------------------------------------------------------------------- the job child


def _drop_privileges(spec: dict[str, Any]) -> None:
    uid = spec.get("uid")
    gid: int = spec["gid"] if spec.get("gid") is not None else (uid or 0)
    if uid is not None and os.geteuid() == 0:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        for cap in range(last_cap() + 1):
            try:
                prctl(PR_CAPBSET_DROP, cap)
            except OSError:
                pass
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.geteuid() == 0 or os.getuid() == 0:
            raise OSError("privilege drop failed")
    else:
        prctl(PR_SET_NO_NEW_PRIVS, 1)


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


def _child(spec: dict[str, Any], step: dict[str, Any], fds: tuple[int, int, int, int]) -> None:
    """In the forked child: become the job (fds, privileges, limits, cwd, env), then exec or run Python."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(4, 65536)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        write_quiet("/proc/self/oom_score_adj", "0")
        _set_limits(spec["limits"])
        _drop_privileges(spec)
        os.chdir(spec["work_dir"])
        env = {str(k): str(v) for k, v in spec.get("env", {}).items()}
        if step.get("python"):
            _run_python(step["argv"], env)
        argv = [str(arg) for arg in step["argv"]]
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # must never return into the leader's code
        try:
            os.write(2, f"sandbox: cannot start {step.get('argv', ['?'])[0]}: {exc}\n".encode())
            os.write(3, b"start_error\n")
        except OSError:
            pass
    os._exit(127)


def _run_python(argv: list[str], env: dict[str, str]) -> None:
    """Run a script in this already-started interpreter as if by `python SCRIPT ARGS` (saves a start-up)."""
    script = os.path.abspath(argv[1])
    os.environ.clear()
    os.environ.update(env)
    if hasattr(time, "tzset"):
        time.tzset()
    sys.argv = [script, *argv[2:]]
    sys.path[0] = os.path.dirname(script)
    sys.path.extend(path for path in [*_site_dirs(), RUNNER_DIR] if path not in sys.path)
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
    code = 0
    try:
        with open(script, "rb") as handle:
            source = handle.read()
        compiled = compile(source, script, "exec")
    except SyntaxError:
        traceback.print_exc(limit=0)
        _status("syntax_error")
        _finish(1)
    except OSError as exc:
        sys.stderr.write(f"python: can't open file {script!r}: {exc}\n")
        _finish(2)
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    try:
        exec(compiled, main.__dict__)
        _join_threads()
    except SystemExit as exc:
        code = _exit_code(exc)
    except MemoryError:
        _status("memory_error")
        traceback.print_exc()
        code = 1
    except BaseException:  # report like the interpreter does
        traceback.print_exc()
        code = 1
    _finish(code)


_SITE_DIRS: list[str] | None = None
RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))
# Imported once by the zygote so that each forked job starts with them loaded (they hold no job data).
PRELOAD = ("harness_py", "ast", "bisect", "collections", "functools", "heapq", "itertools", "math", "re", "string")


def _site_dirs() -> list[str]:
    """Installed packages without running `site` (whose .pth hooks cost more than the job): no .pth processing."""
    global _SITE_DIRS
    if _SITE_DIRS is not None:
        return _SITE_DIRS
    import sysconfig

    found = []
    for path in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), "/usr/lib/python3/dist-packages"):
        if path and os.path.isdir(path) and path not in found:
            found.append(path)
    _SITE_DIRS = found
    return found


def preload() -> None:
    import importlib

    _site_dirs()
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
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    os._exit(code)


# --------------------------------------------------------------------------- the leader


def run_step(spec: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """Run one step in a child process; enforce its wall time and the output cap; kill the rest of the job."""
    limits = spec["limits"]
    cap = int(limits["output_bytes"])
    timeout = float(step.get("timeout_s") or limits["wall_s"])
    stdin_data = step.get("stdin")
    stdin_bytes = stdin_data.encode() if isinstance(stdin_data, str) else b""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(in_w)
        os.close(out_r)
        os.close(err_r)
        os.close(st_r)
        _child(spec, step, (in_r, out_w, err_w, st_w))
    for fd in (in_r, out_w, err_w, st_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    outputs: dict[int, bytearray] = {out_r: bytearray(), err_r: bytearray(), st_r: bytearray()}
    total = 0
    truncated = timed_out = over_output = False
    status_info: tuple[int, Any] | None = None
    sel = selectors.DefaultSelector()
    for fd in (out_r, err_r, st_r):
        sel.register(fd, selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    pending = memoryview(stdin_bytes)
    if pending:
        os.set_blocking(in_w, False)
        sel.register(in_w, selectors.EVENT_WRITE)
    else:
        os.close(in_w)
    deadline = started + timeout
    killed_at: float | None = None
    open_reads = {out_r, err_r, st_r}
    while open_reads or status_info is None:
        now = time.monotonic()
        if status_info is not None and killed_at is None:
            kill_job(spec["kill"], spec.get("uid"), pid)
            killed_at = now
        if killed_at is not None and now - killed_at > DRAIN_S:
            break
        if status_info is None and now >= deadline:
            timed_out = True
            kill_job(spec["kill"], spec.get("uid"), pid)
            killed_at = now
        wait_for = (deadline if killed_at is None else killed_at + DRAIN_S) - now
        for key, _ in sel.select(max(wait_for, 0.0)):
            fd = int(key.fd)
            if fd == pidfd:
                sel.unregister(pidfd)
                status_info = _wait(pid)
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
            room = cap - total
            if len(chunk) > room:
                outputs[fd] += chunk[: max(room, 0)]
                total = cap
                truncated = True
                if not over_output:
                    over_output = True
                    kill_job(spec["kill"], spec.get("uid"), pid)
                    killed_at = killed_at or time.monotonic()
            else:
                outputs[fd] += chunk
                total += len(chunk)
    if status_info is None or killed_at is None:
        kill_job(spec["kill"], spec.get("uid"), pid)
    if status_info is None:
        status_info = _wait(pid)
    sel.close()
    for fd in (out_r, err_r, st_r, pidfd):
        os.close(fd)
    if pending:
        try:
            os.close(in_w)
        except OSError:
            pass
    wait_status, usage = status_info
    flags = outputs[st_r].decode(errors="replace").split()
    result: dict[str, Any] = {
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
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 6) if usage is not None else None,
        "max_rss_kb": int(usage.ru_maxrss) if usage is not None else None,
        "flags": flags,
    }
    return result


def _wait(pid: int) -> tuple[int, Any]:
    while True:
        try:
            _, wait_status, usage = os.wait4(pid, 0)
            return wait_status, usage
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0, None


def _prepare(spec: dict[str, Any]) -> None:
    """Private mounts and the job's files; runs as the leader, before any job code."""
    work = spec["work_dir"]
    uid = spec.get("uid")
    gid: int = spec["gid"] if spec.get("gid") is not None else (uid or 0)
    if spec.get("mount"):
        unshare_mounts()
        size = int(spec["disk_bytes"])
        owner = f",uid={uid},gid={gid}" if uid is not None else ""
        mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0700{owner}")
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    else:
        os.makedirs(work, mode=0o700, exist_ok=True)
    source = spec.get("input_dir")
    if source and os.path.realpath(source) != os.path.realpath(work):
        shutil.copytree(source, work, dirs_exist_ok=True, symlinks=True)
    if uid is not None and os.geteuid() == 0:
        for root, dirs, files in os.walk(work):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), uid, gid)
        os.lchown(work, uid, gid)


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


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
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
    for step in spec["steps"]:
        outcome = run_step(spec, step)
        steps.append(outcome)
        ended_badly = outcome["timed_out"] or outcome["output_limit"] or "start_error" in outcome["flags"]
        failed = outcome["exit_code"] != 0
        if ended_badly or (failed and step.get("kind") == "compile") or (failed and step.get("stop_on_failure")):
            break
    results = _read_results(spec)
    leftovers = kill_job(spec["kill"], spec.get("uid"))
    wipe(spec.get("cleanup", []))
    return {"steps": steps, "results": results, "error": None, "leftovers": leftovers}


def wipe(paths: list[str]) -> None:
    """Remove each path; `DIR/*` empties DIR but keeps it."""
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


def _read_exact(fd: int, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, size - len(chunks))
        if not chunk:
            raise EOFError("input closed")
        chunks += chunk
    return bytes(chunks)


def _read_header(fd: int) -> int | None:
    """Read `JOB <n>\\n` byte by byte, so nothing of the body is consumed here."""
    line = bytearray()
    while True:
        byte = os.read(fd, 1)
        if not byte:
            return None
        if byte == b"\n":
            break
        line += byte
        if len(line) > 64:
            raise ValueError("bad header")
    word, _, size = line.decode().partition(" ")
    if word != "JOB":
        raise ValueError(f"bad header {line!r}")
    return int(size)


def _emit(result: dict[str, Any]) -> None:
    data = (json.dumps(result) + "\n").encode()
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def _leader(size: int) -> None:
    try:
        spec = json.loads(_read_exact(0, size))
        result = run_job(spec)
    except BaseException as exc:  # the host must always get an answer
        result = {"steps": [], "results": None, "error": f"runner failed: {exc!r}"}
    _emit(result)


def serve() -> None:
    """Zygote loop: one forked leader per job; reap it, make sure the job left nothing, report."""
    write_quiet("/proc/self/oom_score_adj", "-1000")
    prctl(PR_SET_DUMPABLE, 0)
    kill_uid = int(os.environ.get("VERILOOP_JOB_UID", "65534"))
    preload()
    while True:
        size = _read_header(0)
        if size is None:
            return
        pid = os.fork()
        if pid == 0:
            try:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _leader(size)
            finally:
                os._exit(0)
        _, wait_status = os.waitpid(pid, 0)
        leftovers = kill_job("uid", kill_uid) if os.geteuid() == 0 else 0
        os.write(1, f"DONE {wait_status} {leftovers}\n".encode())


def once(argv: list[str]) -> None:
    if "--spec" in argv:
        with open(argv[argv.index("--spec") + 1], "rb") as handle:
            spec = json.load(handle)
        try:
            result = run_job(spec)
        except BaseException as exc:
            result = {"steps": [], "results": None, "error": f"runner failed: {exc!r}"}
        _emit(result)
        return
    size = _read_header(0)
    if size is None:
        raise SystemExit("no job on stdin")
    _leader(size)


def main(argv: list[str]) -> None:
    mode = argv[1] if len(argv) > 1 else "once"
    if mode == "serve":
        serve()
    elif mode == "once":
        once(argv[2:])
    elif mode == "clean":  # kill everything this user may signal, then empty the given folders
        kill_job("all", None)
        wipe(argv[2:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
