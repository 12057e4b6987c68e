"""The Compose stack for real: build the images, bring up postgres, migrate, api and two workers, run μCode on three
HumanEval tasks with the embedded model through the REST API only, kill the worker holding the run mid-run, see the
other one finish it, download a preference export, and take everything down.

Offline by default (compose.local.yaml: local Debian bases from scripts/build-base-images.sh and a wheelhouse from
scripts/build-wheelhouse.sh; both idempotent). VERILOOP_COMPOSE_PUBLIC=1 builds from the public images and PyPI
instead. Each phase's wall time is printed (pytest -s shows it) and asserted nowhere: timings are not correctness.
The Docker engine is the one DOCKER_HOST names (default: the local socket).

Run by CI (one xdist worker, handed out first: tests/conftest.py LONG_FILES_FIRST). Cold, from nothing, on the
overlay2 storage driver that scripts/setup-sandbox.sh now picks, measured here on 2 shared cores (2026-12-02):
  load ~3: bases 194 s, wheelhouse 57 s (one after the other then), build 338 s, up 25 s, run 218 s, down 21 s:
           16.3 min in all (`pytest -s`, DOCKER_HOST on an overlay2 dockerd)
  load ~7: bases and wheelhouse side by side 403 s, build 485 s, up 35 s, run 353 s, migrate again 20 s,
           down 16 s: 24.5 min (other helpers' benchmarks on the same 2 cores)
On fuse-overlayfs (the fallback where overlay2 cannot be mounted), with the bases and wheelhouse there: build 732 s,
up 22 s, run 132 s, migrate 14 s, down 8 s: 16.3 min, about 20 cold.
On vfs (every layer and every container a full copy of the image) the images alone take 35-50 min cold and the
warm stack 21 min (build 550 s, up 207 s, run 215 s, migrate 65 s, down 126 s), so the test skips there unless
VERILOOP_TEST_COMPOSE_STACK=1; VERILOOP_TEST_COMPOSE_STACK=0 skips it anywhere.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from veriloop.testing import free_port

REPO = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose")
DOCKER = shutil.which("docker")
PROJECT = "veriloop-stack-test"
TASKS = 3
PUBLIC = os.environ.get("VERILOOP_COMPOSE_PUBLIC") == "1"
FILES = ["-f", "compose.yaml"] if PUBLIC else ["-f", "compose.yaml", "-f", "compose.local.yaml"]


def _storage_driver() -> str | None:
    """The Docker engine's storage driver (None without an engine: the docker marker skips then)."""
    if DOCKER is None:
        return None
    try:
        info = subprocess.run(
            [DOCKER, "info", "--format", "{{.Driver}}"], capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    return (info.stdout.strip() or None) if info.returncode == 0 else None


def _why_not_run() -> str | None:
    """VERILOOP_TEST_COMPOSE_STACK=0 skips, =1 runs whatever the engine; by default it runs unless the engine copies
    every layer and container whole (vfs), which makes the cold images take 35-50 min instead of about 10."""
    choice = os.environ.get("VERILOOP_TEST_COMPOSE_STACK", "")
    if choice == "0":
        return "VERILOOP_TEST_COMPOSE_STACK=0"
    if choice != "1" and _storage_driver() == "vfs":
        return (
            "the Docker engine uses the vfs storage driver: the images would take 35-50 min cold "
            "(scripts/setup-sandbox.sh picks overlay2 where it can; VERILOOP_TEST_COMPOSE_STACK=1 runs it anyway)"
        )
    return None


WHY_NOT = _why_not_run() if COMPOSE is not None else None

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(COMPOSE is None, reason="needs docker-compose (make services)"),
    pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or ""),
]


class Stack:
    """`docker-compose` with this test's project name, files and variables; records each phase's wall time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.timings: dict[str, float] = {}

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert COMPOSE is not None
        result = subprocess.run(
            [COMPOSE, "-p", PROJECT, *FILES, *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"docker-compose {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    def timed(self, phase: str, *args: str, timeout: float = 1800) -> None:
        started = time.monotonic()
        self.compose(*args, timeout=timeout)
        self.timings[phase] = round(time.monotonic() - started, 1)

    def containers(self, service: str | None = None, *, all_states: bool = False) -> list[str]:
        assert DOCKER is not None
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        flags = ["-a"] if all_states else []
        out = subprocess.run(
            [DOCKER, "ps", "-q", "--no-trunc", *flags, *filters], capture_output=True, text=True, check=True
        ).stdout
        return out.split()

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60", check=False, timeout=120).stdout[-12000:]


def _prepare_offline(env: dict[str, str], timings: dict[str, float]) -> None:
    """The local base images and the wheelhouse, side by side (debootstrap and pip download from different places);
    both scripts do nothing when their result is already there."""

    def run(script: str) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        result = subprocess.run(
            ["bash", str(REPO / "scripts" / script)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        timings[script.removesuffix(".sh")] = round(time.monotonic() - started, 1)
        return result

    scripts = ("build-base-images.sh", "build-wheelhouse.sh")
    with ThreadPoolExecutor(len(scripts)) as pool:
        for script, result in zip(scripts, pool.map(run, scripts), strict=True):
            assert result.returncode == 0, f"{script}:\n{result.stderr[-4000:]}"


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Stack, httpx.Client]]:
    port = free_port()
    token = secrets.token_hex(16)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        # Another Docker engine than the default one (DOCKER_HOST), as docker and docker-compose read it.
        **{k: v for k, v in os.environ.items() if k in ("DOCKER_HOST", "DOCKER_CONFIG")},
        "VERILOOP_API_TOKEN": token,
        "VERILOOP_PORT": str(port),
        "POSTGRES_PASSWORD": secrets.token_hex(12),
        "VERILOOP_LEASE_S": "20",  # a killed worker's run comes back after 20 s instead of 60
        "VERILOOP_HEARTBEAT_S": "3",
        # On the vfs storage driver creating a container copies the whole image: minutes, not Compose's 60 s.
        "COMPOSE_HTTP_TIMEOUT": "900",
    }
    stack = Stack(env)
    if not PUBLIC:
        _prepare_offline({**os.environ, **env}, stack.timings)
    stack.compose("down", "-v", "--remove-orphans", check=False)  # a previous run that died half-way
    stack.timed("build", "build", "--parallel")
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    try:
        stack.timed("up", "up", "-d", "--scale", "worker=2")
        _wait_healthy(client, stack)
        yield stack, client
    finally:
        client.close()
        started = time.monotonic()
        down = stack.compose("down", "-v", "--remove-orphans", check=False, timeout=600)
        stack.timings["down"] = round(time.monotonic() - started, 1)
        print(f"\ncompose stack timings (s): {json.dumps(stack.timings)}")
        assert down.returncode == 0, down.stderr
        assert stack.containers(all_states=True) == [], "containers left after docker-compose down -v"
        label = f"label=com.docker.compose.project={PROJECT}"
        volumes = subprocess.run(
            ["docker", "volume", "ls", "-q", "--filter", label], capture_output=True, text=True, check=True
        ).stdout.split()
        assert volumes == [], f"volumes left after docker-compose down -v: {volumes}"


def _wait_healthy(client: httpx.Client, stack: Stack, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if client.get("/health").json().get("status") == "ok":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(2)
    pytest.fail(f"the api never became healthy:\n{stack.logs()}")


def _events(client: httpx.Client, run_id: str, until: Any, timeout_s: float) -> list[tuple[str, dict[str, Any]]]:
    """Follow the run's server-sent events until `until(event, data)` holds (or the stream ends)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with client.stream("GET", f"/api/runs/{run_id}/events", params={"interval": 1}, timeout=30) as response:
                assert response.status_code == 200, response.read()
                assert response.headers["content-type"].startswith("text/event-stream")
                event = ""
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line.removeprefix("event: ")
                    elif line.startswith("data: "):
                        data = json.loads(line.removeprefix("data: "))
                        seen.append((event, data))
                        if until(event, data) or event == "end":
                            return seen
                    if time.monotonic() > deadline:
                        break
        except httpx.ReadTimeout:
            continue  # the stream stays quiet for a while (keep-alives every 15 s): reconnect
    pytest.fail(f"events of run {run_id} did not reach the expected state in {timeout_s} s; last: {seen[-3:]}")


def test_a_run_survives_losing_its_worker_and_is_exported(stack: tuple[Stack, httpx.Client]) -> None:
    compose, client = stack
    workers = compose.containers("worker")
    assert len(workers) == 2, compose.logs()
    assert client.get("/health", headers={"Authorization": ""}).status_code == 200
    assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401

    started = time.monotonic()
    created = client.post(
        "/api/runs",
        json={"agent": "mucode", "suite": "humaneval", "limit": TASKS, "options": {"turns": 2, "max_tokens": 160}},
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]

    # Mid-run: some node stored, not every task finished.
    events = _events(client, run_id, lambda event, data: data["nodes"] >= 1 and data["done"] < TASKS, 1200)
    assert events[-1][0] == "progress" and events[-1][1]["status"] == "running", events[-1]
    detail = client.get(f"/api/runs/{run_id}").json()
    holder = detail["job"]["worker"]
    nodes_before = {node["id"] for node in client.get(f"/api/runs/{run_id}/nodes").json()}
    victim = [cid for cid in workers if holder.split(":")[0] == cid[:12]]
    assert len(victim) == 1, (holder, workers)
    # It stays dead (no restart policy), so the run can only be finished by the other worker.
    subprocess.run(["docker", "update", "--restart", "no", victim[0]], check=True, capture_output=True)
    subprocess.run(["docker", "kill", victim[0]], check=True, capture_output=True)
    killed_at = time.monotonic()

    events = _events(client, run_id, lambda event, data: event == "end", 1800)
    compose.timings["run"] = round(time.monotonic() - started, 1)
    compose.timings["recovery_after_kill"] = round(time.monotonic() - killed_at, 1)
    end = events[-1]
    assert end[0] == "end" and end[1]["status"] == "finished", (end, compose.logs())
    assert end[1]["done"] == TASKS

    # The worker stores the run's final status, then closes its job: poll briefly for the second.
    detail = client.get(f"/api/runs/{run_id}").json()
    deadline = time.monotonic() + 60
    while detail["job"]["status"] == "running" and time.monotonic() < deadline:
        time.sleep(1)
        detail = client.get(f"/api/runs/{run_id}").json()
    assert detail["job"]["status"] == "done" and detail["job"]["claims"] >= 2, detail["job"]
    assert detail["job"]["worker"] != holder
    attempts = client.get(f"/api/runs/{run_id}/attempts").json()
    finished: dict[str, int] = {}
    for attempt in attempts:
        if attempt["status"] in ("passed", "failed"):  # finished: an answer was scored
            finished[attempt["task_id"]] = finished.get(attempt["task_id"], 0) + 1
    assert len(finished) == TASKS and set(finished.values()) == {1}, attempts
    nodes_after = {node["id"] for node in client.get(f"/api/runs/{run_id}/nodes").json()}
    assert nodes_before <= nodes_after, f"nodes lost: {nodes_before - nodes_after}"
    # The candidates ran in bubblewrap inside the worker containers (bounded by rlimits where, as here, the containers
    # cannot make job cgroups: docs/service.md), and no execution ended in a sandbox failure.
    executions = client.get(f"/api/runs/{run_id}/executions").json()
    assert executions, "no candidate was executed"
    assert {e["execution"]["sandbox"] for e in executions} == {"bwrap"}, executions[:3]
    assert [e for e in executions if e["execution"]["status"] == "infra_error"] == [], executions

    dashboard = client.get("/", headers={"Accept": "text/html"})
    assert dashboard.status_code == 200 and run_id in dashboard.text

    # Back up, then upgrade: the one-shot migration runs again on the live database and changes nothing.
    backup = compose.compose("exec", "-T", "postgres", "pg_dump", "-U", "veriloop", "veriloop", timeout=300)
    assert "CREATE TABLE public.runs" in backup.stdout and run_id in backup.stdout
    started = time.monotonic()
    compose.compose("run", "--rm", "migrate", timeout=900)
    compose.timings["migrate_again"] = round(time.monotonic() - started, 1)
    assert client.get(f"/api/runs/{run_id}").json()["summary"]["run"]["status"] == "finished"

    export = client.post("/api/exports", json={"kind": "preference", "run_ids": [run_id]})
    assert export.status_code == 202, export.text
    info = export.json()
    deadline = time.monotonic() + 300
    while info["status"] == "running" and time.monotonic() < deadline:
        time.sleep(1)
        info = client.get(f"/api/exports/{info['id']}").json()
    assert info["status"] == "finished", info
    download = client.get(info["download"])
    assert download.status_code == 200 and download.headers["content-type"].startswith("application/jsonl")
    rows = [json.loads(line) for line in download.text.splitlines() if line.strip()]
    assert len(rows) == info["rows"]
    for row in rows:
        assert {"prompt", "chosen", "rejected"} <= set(row), row
