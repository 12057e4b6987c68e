"""llama.cpp's `llama-server`: finding it, building it once, and running it on a GGUF file.

Used by `veriloop bench llm --peer llama_cpp`, which measures llama.cpp beside the embedded backend, and by the
`llama_cpp` backend (llama_cpp_backend.py), which serves generate calls through it.

The binary is llama.cpp's own `llama-server` (parallel slots with continuous batching, `-np N`), built from the
llama.cpp sources that llama-cpp-python `LLAMA_CPP_PYTHON` vendors in its PyPI sdist: the sdist is the only
download (no wheel, no git, no model hub; the server's web UI and HTTPS are configured off so cmake fetches
nothing). The build takes 6 to 20 minutes on two cores, so it is never `make setup`'s or CI's business; it is cached
under `<cache_dir>/llama.cpp/<version>/bin`. Build it with

    python -m veriloop.llm.llama_server build

A binary named by the caller (the backend's `llm.llama_server`), then `VERILOOP_LLAMA_SERVER`, then a `llama-server`
on PATH, is used first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from veriloop.errors import BackendError

LLAMA_CPP_PYTHON = "0.3.36"
"""The llama-cpp-python sdist whose vendored llama.cpp is built (its `vendor/llama.cpp`)."""

SERVER_ENV = "VERILOOP_LLAMA_SERVER"
"""A `llama-server` binary to use instead of finding or building one."""

BUILD_COMMAND = "python -m veriloop.llm.llama_server build"
"""What builds the binary into the cache (the settings' cache dir; `--cache-dir` for another)."""

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)
"""Release, `-march=native`, static; no web UI (its prebuilt assets would be a download) and no HTTPS."""

Echo = Callable[[str], None]


def _echo(message: str) -> None:
    print(f"[llama-server] {message}", file=sys.stderr, flush=True)


def cache_root(cache_dir: Path) -> Path:
    return cache_dir / "llama.cpp" / LLAMA_CPP_PYTHON


def cached_binary(cache_dir: Path) -> Path:
    """Where `build_llama_server` puts the binary."""
    return cache_root(cache_dir) / "bin" / "llama-server"


def _executable(path: Path, origin: str) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BackendError(f"{origin}={path} is not an executable file")
    return path


def find_llama_server(cache_dir: Path, configured: str | Path | None = None) -> Path | None:
    """`configured` (a path the caller names), else `$VERILOOP_LLAMA_SERVER`, else `llama-server` on PATH, else the
    cached build; None when there is none. A named binary that is not executable raises."""
    if configured:
        return _executable(Path(configured).expanduser(), "the named llama-server")
    named = os.environ.get(SERVER_ENV)
    if named:
        return _executable(Path(named), SERVER_ENV)
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    cached = cached_binary(cache_dir)
    return cached if cached.is_file() else None


def _run(command: Sequence[str], log: Path, echo: Echo, what: str) -> None:
    started = time.perf_counter()
    echo(f"{what}: {' '.join(command)} (log {log})")
    with log.open("a") as out:
        done = subprocess.run(list(command), stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BackendError(f"{what} failed ({done.returncode}); the end of {log}:\n{tail}")
    echo(f"{what}: done in {time.perf_counter() - started:.0f} s")


def build_llama_server(cache_dir: Path, jobs: int | None = None, echo: Echo = _echo) -> Path:
    """Download the llama-cpp-python sdist (nothing else), build its vendored `llama-server`, cache and return it.

    Runs under `nice` (the build takes minutes on two cores and should not starve the machine).
    """
    root = cache_root(cache_dir)
    for folder in ("sdist", "src", "bin"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    started = time.perf_counter()
    sdist = root / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.is_file():
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        _run([*pip, f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(sdist.parent)], log, echo, "download sdist")
    source = root / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        echo(f"extracting {sdist.name}")
        with tarfile.open(sdist) as archive:
            archive.extractall(root / "src", filter="data")
    if not (source / "CMakeLists.txt").is_file():
        raise BackendError(f"{sdist} holds no vendor/llama.cpp")
    build = root / "build"
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    _run([*nice, "cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], log, echo, "configure")
    jobs = jobs or os.cpu_count() or 1
    echo(f"building llama-server with {jobs} jobs: 6 to 20 minutes on two cores")
    _run([*nice, "cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], log, echo, "build")
    binary = cached_binary(cache_dir)
    shutil.copy2(build / "bin" / "llama-server", binary)
    echo(f"llama-server built in {time.perf_counter() - started:.0f} s: {binary}")
    return binary


def ensure_llama_server(cache_dir: Path, build: bool = True, echo: Echo = _echo) -> Path:
    """The `llama-server` to run: found, or built once when `build` (else an error saying how to get one)."""
    found = find_llama_server(cache_dir)
    if found is not None:
        return found
    if not build:
        raise BackendError(
            f"no llama-server: set {SERVER_ENV}, put one on PATH, or let the bench build it (drop --peer-no-build)"
        )
    return build_llama_server(cache_dir, echo=echo)


def bundled_gguf(cache_dir: Path, name: str) -> Path:
    """The GGUF file of bundled model `name`, the bytes veriloop converts: the wheel's file itself, or the parts
    joined once (hash-checked) under `<cache_dir>/gguf`, since the converter's joined copy is not kept."""
    from veriloop.llm.models import BUNDLED, join_gguf

    model = BUNDLED[name]
    if len(model.parts) == 1:
        return model.part_paths()[0]
    dest = cache_dir / "gguf" / model.gguf_file
    if dest.is_file() and model.size is not None and dest.stat().st_size == model.size:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    join_gguf(model, partial)
    partial.replace(dest)
    return dest


def peak_rss_mb(pid: int) -> float | None:
    """A process's peak resident set (VmHWM) in MiB; None where /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class LlamaServer:
    """A running `llama-server`: its process and base URL."""

    process: subprocess.Popen[bytes]
    url: str
    command: list[str]
    log: Path
    started_s: float = 0.0
    props: dict[str, Any] = field(default_factory=dict)

    def peak_rss_mb(self) -> float | None:
        return peak_rss_mb(self.process.pid)

    def exited(self) -> str | None:
        """None while the process runs; else how it ended, with the end of its log."""
        code = self.process.poll()
        if code is None:
            return None
        return f"llama-server exited with {code}; the end of {self.log}:\n{log_tail(self.log)}"

    def stop(self, timeout_s: float = 20.0) -> None:
        """Terminate the process (kill it if it does not end within `timeout_s`); safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


def server_command(
    binary: Path, gguf: Path, *, port: int, slots: int, context: int, threads: int, extra: Sequence[str] = ()
) -> list[str]:
    return [
        str(binary),
        *("-m", str(gguf)),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("-np", str(slots), "-c", str(context)),
        *("--threads", str(threads), "--threads-batch", str(threads)),
        *extra,
    ]


def start_llama_server(
    binary: Path,
    gguf: Path,
    *,
    slots: int,
    context: int,
    threads: int,
    log: Path,
    ready_timeout_s: float = 300.0,
    extra: Sequence[str] = (),
) -> LlamaServer:
    """Start `llama-server` on `gguf` with `slots` parallel slots of `context / slots` tokens each (continuous
    batching) on a free localhost port and wait for /health; the process is stopped again if it never gets there."""
    port = free_port()
    command = server_command(binary, gguf, port=port, slots=slots, context=context, threads=threads, extra=extra)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("wb") as out:
        try:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise BackendError(f"cannot start {binary}: {exc}") from None
    server = LlamaServer(process, f"http://127.0.0.1:{port}", command, log)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            ended = server.exited()
            if ended is not None:
                raise BackendError(ended)
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise BackendError(f"llama-server did not answer /health within {ready_timeout_s:.0f} s (log {log})")
            time.sleep(0.2)
        server.started_s = round(time.perf_counter() - started, 2)
        with contextlib.suppress(httpx.HTTPError, ValueError):
            server.props = httpx.get(f"{server.url}/props", timeout=5.0).json()
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def llama_server(binary: Path, gguf: Path, **options: Any) -> Iterator[LlamaServer]:
    """`start_llama_server(binary, gguf, **options)` until the block ends."""
    server = start_llama_server(binary, gguf, **options)
    try:
        yield server
    finally:
        server.stop()


def server_version(binary: Path) -> str:
    """What `llama-server --version` says (its build number and commit), or '' where it says nothing."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return "; ".join(line for line in lines if "version" in line or "built with" in line) or (lines[0] if lines else "")


def main(argv: list[str] | None = None) -> int:
    """`python -m veriloop.llm.llama_server build [--cache-dir DIR] [--jobs N]`: build and cache the binary."""
    parser = argparse.ArgumentParser(prog="python -m veriloop.llm.llama_server", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "find"], help="build: build and cache it; find: print the path")
    parser.add_argument("--cache-dir", default="", help="Cache folder (default: the settings' paths.cache_dir).")
    parser.add_argument("--jobs", type=int, default=0, help="Parallel compile jobs (default: the CPU count).")
    args = parser.parse_args(argv)
    if args.cache_dir:
        cache_dir = Path(args.cache_dir)
    else:
        from veriloop.config import load_settings

        cache_dir = load_settings().paths.cache_dir
    if args.action == "find":
        found = find_llama_server(cache_dir)
        print(found if found is not None else f"no llama-server (build it with: {BUILD_COMMAND})")
        return 0 if found is not None else 1
    print(build_llama_server(cache_dir, jobs=args.jobs or None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
