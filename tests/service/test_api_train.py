"""Training is the method's (`Agent.train`): `POST /api/runs` and the workers reach F2STrans's and ReVISE's loops
as `veriloop run M --train` does.

The training round itself is replaced by a recorder here (fast); the CLI tests
(tests/agents/f2strans/test_f2strans_graph.py, tests/agents/revise/test_cli_train.py) run the real round
through the same `execute_run -> Agent.train` path and check the registered checkpoints.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from veriloop.agents.runner import create_run
from veriloop.config import Settings, load_settings
from veriloop.records import Run, Task
from veriloop.service.app import create_app
from veriloop.service.executor import LocalExecutor
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend, tiny_model_folder

ADD_ONE = "transcoder/ADD_1_TO_A_GIVEN_NUMBER_1"
RIGHT = "```python\ndef add_one(x):\n    return -(~x)\n```\n"


def _recorder(monkeypatch: pytest.MonkeyPatch, module: str) -> list[dict[str, Any]]:
    """Replace `module.train_on_run` with one that records what it was given."""
    calls: list[dict[str, Any]] = []

    def train_on_run(
        settings: Settings, store: TrajectoryStore, run: Run, tasks: Sequence[Task], options: Any
    ) -> dict[str, Any]:
        nodes = [node for task in tasks for node in store.get_tree(run.id, task.id)]
        calls.append({"run": run.id, "tasks": [t.id for t in tasks], "options": options, "nodes": len(nodes)})
        return {}

    monkeypatch.setattr(f"{module}.train_on_run", train_on_run)
    return calls


@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_post_api_runs_trains_f2strans_in_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_settings().paths.data_dir
    calls = _recorder(monkeypatch, "veriloop.agents.f2strans.training")
    settings = load_settings(
        paths={"home": tmp_path, "data_dir": data},
        store={"url": f"sqlite:///{tmp_path / 'api.db'}"},
        llm={"backend": "scripted", "model": "scripted"},
        service={"heartbeat_s": 0.2, "poll_s": 0.05},
    )
    app = create_app(settings, backend=ScriptedBackend([RIGHT]), workers=1)
    with TestClient(app) as client:
        body = {
            "agent": "f2strans",
            "suite": "transcoder",
            "task_ids": [ADD_ONE],
            "options": {"train": True, "turns": 1, "sft_steps": 3, "checkpoint": False},
        }
        response = client.post("/api/runs", json=body)
        assert response.status_code == 201, response.text
        run_id = response.json()["run"]["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run = client.get(f"/api/runs/{run_id}").json()["summary"]["run"]
            if run["status"] in ("finished", "failed"):
                break
            time.sleep(0.1)
    assert run["status"] == "finished", run
    [call] = calls
    assert call["run"] == run_id and call["tasks"] == [ADD_ONE] and call["nodes"] >= 1  # after solving
    assert call["options"].train and call["options"].sft_steps == 3


def test_a_worker_trains_a_revise_run_created_like_the_api_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _recorder(monkeypatch, "veriloop.agents.revise.curriculum")
    model = tiny_model_folder(tmp_path / "tiny")
    settings = load_settings(paths={"home": tmp_path / "home"}, llm={"model": str(model)})
    options = {"train": True, "samples": 1, "max_tokens": 16, "stage_steps": [2, 3]}
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="revise", suite="humaneval", options=options, task_ids=["HumanEval/23"])
    finished = asyncio.run(LocalExecutor().execute(settings, run.id))  # what `veriloop worker` calls per job
    assert finished.status.value == "finished"
    [call] = calls
    assert call["run"] == run.id and call["tasks"] == ["HumanEval/23"] and call["nodes"] >= 2
    assert call["options"].stage_steps == (2, 3) and call["options"].lora is False


def test_a_method_without_a_learning_loop_refuses_train(tmp_path: Path) -> None:
    settings = load_settings(
        paths={"home": tmp_path}, store={"url": f"sqlite:///{tmp_path / 'api.db'}"}, llm={"backend": "scripted"}
    )
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        response = client.post("/api/runs", json={"agent": "direct", "suite": "humaneval", "options": {"train": True}})
    assert 400 <= response.status_code < 500
    assert "train: Extra inputs are not permitted" in response.json()["error"]["message"]
