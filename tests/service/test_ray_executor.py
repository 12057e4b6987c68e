"""The Ray executor on a local Ray instance: a small suite split into shards, each a Ray task in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from veriloop.agents.runner import create_run
from veriloop.cli import main
from veriloop.config import load_settings
from veriloop.records import RunStatus
from veriloop.service.executor import RayExecutor, get_executor
from veriloop.store import TrajectoryStore


def test_executor_is_chosen_by_settings() -> None:
    settings = load_settings(service={"executor": "ray", "ray_address": "auto"})
    executor = get_executor(settings)
    assert isinstance(executor, RayExecutor) and executor.address == "auto"
    assert get_executor(settings, "local").name == "local"


@pytest.mark.slow
async def test_ray_executor_runs_a_small_suite_and_stops_only_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray", reason="the ray executor needs Ray (the dev and ray extras install it)")
    # Ray writes its auth token under ~/.ray, and a token left there switches later ray.init calls to token mode.
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted"})
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="direct", suite="humaneval", limit=4)
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    executor = RayExecutor(num_cpus=2)
    try:
        finished = await executor.execute(settings, run.id)
        started = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
        assert started, "Ray started no processes of its own"
    finally:
        await executor.aclose()
    deadline = time.monotonic() + 30
    while any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in started):
        assert time.monotonic() < deadline, "Ray's processes outlived the executor"
        time.sleep(0.2)
    assert finished.status is RunStatus.FINISHED
    with TrajectoryStore.from_settings(settings) as store:
        attempts = store.list_attempts(run.id)
        assert sorted(a.task_id for a in attempts) == [f"HumanEval/{i}" for i in range(4)]
        nodes = store.list_nodes(run.id)
        assert len(nodes) == 4 and all(node.exec_result is not None for node in nodes)


@pytest.mark.slow
def test_cli_run_with_the_ray_executor(tmp_path: Path) -> None:
    """In its own process, as a user runs it (one process starting Ray twice trips over the first session)."""
    pytest.importorskip("ray", reason="the ray executor needs Ray (the dev and ray extras install it)")
    argv = [
        sys.executable,
        "-m",
        "veriloop.cli",
        "--home",
        str(tmp_path),
        "--backend",
        "scripted",
        "run",
        "direct",
        "--limit",
        "3",
        "--executor",
        "ray",
        "--json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["status"] == "finished" and report["total"] == 3
    assert [attempt["task_id"] for attempt in report["attempts"]] == [f"HumanEval/{i}" for i in range(3)]


def test_cli_refuses_an_unknown_executor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--home", str(tmp_path), "--backend", "scripted", "run", "direct", "--limit", "1", "--executor", "dask"]
    )
    assert code != 0 and "unknown executor 'dask'" in capsys.readouterr().err
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        assert store.list_runs() == []  # bad input stores nothing
