"""The REST API over a real store (SQLite and PostgreSQL), a real sandbox and the in-app job loop.

The model is scripted (its first reply solves HumanEval/53, later ones echo the prompt and fail);
the real model drives the browser tests' run (tests/service/test_browser.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from veriloop.config import Settings, load_settings
from veriloop.records import RunStatus
from veriloop.service.app import create_app
from veriloop.store import TrajectoryStore, upgrade_database
from veriloop.testing import ScriptedBackend

SOLVES_53 = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
TASKS = ["HumanEval/53", "HumanEval/0"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'api.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    upgrade_database(url)
    return str(url)


def api_settings(home: Path, db_url: str, **service: Any) -> Settings:
    service = {"heartbeat_s": 0.2, "poll_s": 0.05, **service}
    return load_settings(
        paths={"home": home}, store={"url": db_url}, llm={"backend": "scripted", "model": "scripted"}, service=service
    )


@pytest.fixture
def client(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    app = create_app(api_settings(tmp_path, db_url), backend=ScriptedBackend([SOLVES_53]), workers=1)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def idle_client(tmp_path: Path, db_url: str) -> Iterator[TestClient]:
    """No job loop: runs stay queued."""
    with TestClient(create_app(api_settings(tmp_path, db_url), backend=ScriptedBackend())) as test_client:
        yield test_client


def wait_for(client: TestClient, run_id: str, statuses: tuple[str, ...] = ("finished",), timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
        job_settled = statuses == ("running",) or body["job"] is None or body["job"]["status"] != "running"
        if body["summary"]["run"]["status"] in statuses and job_settled:  # the worker records the job's end last
            return body
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not reach {statuses}: {body}")


def create(client: TestClient, **body: Any) -> Any:
    response = client.post("/api/runs", json={"agent": "direct", "suite": "humaneval", "task_ids": TASKS, **body})
    assert response.status_code == 201, response.text
    return response.json()


def error_of(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    return message


@pytest.mark.bwrap
def test_a_queued_run_executes_and_everything_it_stored_is_served(client: TestClient) -> None:
    created = create(client, options={"concurrency": 1})
    run_id = created["run"]["id"]
    assert created["job"]["status"] == "queued" and created["run"]["settings"]["options"]["concurrency"] == 1
    shown = wait_for(client, run_id)
    summary = shown["summary"]
    assert shown["total_tasks"] == 2 and shown["job"]["status"] == "done"
    assert summary["tasks"] == 2 and summary["tasks_passed"] == 1 and summary["nodes"] == 2

    runs = client.get("/api/runs", params={"agent": "direct", "status": "finished"}).json()["runs"]
    assert [row["run"]["id"] for row in runs] == [run_id] and runs[0]["pass_rate"] == 0.5
    assert client.get("/api/runs", params={"agent": "mucode"}).json()["runs"] == []

    tasks = {row["task_id"]: row for row in client.get(f"/api/runs/{run_id}/tasks").json()}
    assert tasks["HumanEval/53"]["status"] == "passed" and tasks["HumanEval/0"]["status"] == "failed"
    attempts = client.get(f"/api/runs/{run_id}/attempts", params={"task_id": "HumanEval/53"}).json()
    assert [a["status"] for a in attempts] == ["passed"]
    [node] = client.get(f"/api/runs/{run_id}/trees/HumanEval/53").json()
    assert node["code"].startswith("def add") and node["exec_result"]["status"] == "passed"
    assert client.get(f"/api/nodes/{node['id']}").json()["id"] == node["id"]
    assert client.get(f"/api/nodes/{node['id']}/execution").json()["status"] == "passed"
    assert error_of(client.get(f"/api/nodes/{node['id']}/verification"), 404).endswith("has no verification")
    executions = client.get(f"/api/runs/{run_id}/executions").json()
    assert sorted(e["execution"]["status"] for e in executions) == ["failed", "passed"]
    assert client.get(f"/api/runs/{run_id}/verifications").json() == []
    assert len(client.get(f"/api/runs/{run_id}/nodes").json()) == 2

    page = client.get(f"/api/runs/{run_id}/overview").json()
    held = page["figures"]["held_out"]
    assert page["figures"]["headline"] == "held_out" and page["figures"]["public"] is None
    assert (held["label"], held["tasks"], held["tasks_passed"], held["pass_rate"]) == ("held-out tests", 2, 1, 0.5)
    assert [(p["k"], p["value"], p["tasks"]) for p in held["pass_at_k"]] == [(1, 0.5, 2)]
    assert held["per_turn"] == [{"turn": 0, "pass_rate": 0.5, "nodes": 2}]
    assert page["provenance"]["suite"]["name"] == "humaneval" and page["provenance"]["suite"]["tasks"] == 2
    figures, provenance = shown["summary"]["figures"], shown["summary"]["provenance"]
    assert figures["held_out"]["pass_rate"] == 0.5 and provenance["model"] == summary["run"]["model"]
    compared = client.get(f"/api/runs/{run_id}/compare/{run_id}").json()
    assert (compared["shared_tasks"], compared["wins"], compared["losses"], compared["mcnemar_p"]) == (2, 0, 0, 1.0)
    assert page["charts"]["error_classes"] == {"exec: failed": 1}

    with client.stream("GET", f"/api/runs/{run_id}/events") as stream:
        text = "".join(stream.iter_text())
    assert "event: end" in text and '"done": 2' in text

    export = client.post("/api/exports", json={"kind": "verifier", "run_ids": [run_id[:8]]})
    assert export.status_code == 202, export.text
    info = export.json()
    assert info["run_ids"] == [run_id]
    for _ in range(100):
        info = client.get(f"/api/exports/{info['id']}").json()
        if info["status"] != "running":
            break
        time.sleep(0.05)
    assert info["status"] == "finished" and info["rows"] == 2, info
    rows = [json.loads(line) for line in client.get(info["download"]).text.splitlines()]
    assert sorted(row["label"] for row in rows) == [False, True]

    assert error_of(client.post(f"/api/runs/{run_id}/cancel"), 409).endswith("already ended (finished)")
    assert error_of(client.post(f"/api/runs/{run_id}/resume"), 409).endswith("already finished")
    models = client.get("/api/models").json()
    assert models["served"] == "scripted" and models["checkpoints"] == []


def test_bad_input_gets_a_clear_4xx_and_changes_nothing(idle_client: TestClient, db_url: str) -> None:
    client = idle_client
    cases = [
        ({"agent": "nosuch", "suite": "humaneval"}, 400, "nosuch"),
        ({"agent": "direct", "suite": "humaneval", "options": {"turns": 3}}, 400, "bad options for agent 'direct'"),
        ({"agent": "direct", "suite": "nosuch"}, 404, "nosuch"),  # a name, like a run id: schema-valid, not found
        ({"agent": "direct", "suite": "humaneval", "task_ids": ["HumanEval/nosuch"]}, 404, "HumanEval/nosuch"),
        ({"agent": "direct", "suite": "humaneval", "limit": 0}, 400, "limit"),
        ({"agent": "direct", "suite": "humaneval", "limit": "3"}, 400, "limit"),  # JSON types, as the schema says
        ({"agent": "direct", "suite": "humaneval", "options": {"concurrency": "2"}}, 400, "concurrency"),
        ({"agent": "direct", "suite": "humaneval", "colour": "red"}, 400, "colour"),
        ({"suite": "humaneval"}, 400, "agent"),
    ]
    for body, status, fragment in cases:
        assert fragment in error_of(client.post("/api/runs", json=body), status), body
    assert "run" in error_of(client.get("/api/runs/0123456789"), 404)
    assert error_of(client.get("/api/runs", params={"status": "sleeping"}), 400).startswith("status")
    assert error_of(client.post("/api/exports", json={"kind": "sft", "run_ids": ["missing"]}), 404)
    assert error_of(client.post("/api/exports", json={"kind": "poems", "run_ids": ["x"]}), 400).startswith("kind")
    assert error_of(client.get("/api/exports/nosuchexport"), 404)
    assert client.get("/api/runs").json()["runs"] == []
    with TrajectoryStore(db_url) as store:
        assert store.list_runs() == [] and store.list_tasks() == []


def test_a_run_may_ask_for_another_model(idle_client: TestClient) -> None:
    run = create(idle_client, model="checkpoint:abc")["run"]
    assert run["model"] == "checkpoint:abc" and run["settings"]["llm"]["model"] == "checkpoint:abc"


def test_cancel_and_resume_a_queued_run(idle_client: TestClient) -> None:
    run_id = create(idle_client)["run"]["id"]
    cancelled = idle_client.post(f"/api/runs/{run_id}/cancel")
    assert cancelled.status_code == 202
    assert cancelled.json()["run"]["status"] == "cancelled" and cancelled.json()["job"]["status"] == "cancelled"
    resumed = idle_client.post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 202
    assert resumed.json()["run"]["status"] == "pending" and resumed.json()["job"]["status"] == "queued"
    assert error_of(idle_client.post(f"/api/runs/{run_id}/resume"), 409).endswith("already queued")


@pytest.mark.slow
def test_cancel_a_running_run_stops_it_at_the_next_heartbeat(tmp_path: Path, db_url: str) -> None:
    gate: list[str] = []

    def slow(prompt: Any) -> str:
        time.sleep(0.3)  # a slow model: the run is still going when the cancel arrives
        gate.append("called")
        return "```python\npass\n```"

    app = create_app(api_settings(tmp_path, db_url), backend=ScriptedBackend([slow] * 50), workers=1)
    with TestClient(app) as client:
        run_id = create(client, limit=40, task_ids=[], options={"concurrency": 1})["run"]["id"]
        wait_for(client, run_id, ("running",))
        while not gate:
            time.sleep(0.05)
        assert client.post(f"/api/runs/{run_id}/cancel").json()["job"]["cancel_requested"] is True
        shown = wait_for(client, run_id, ("cancelled",))
        assert shown["job"]["status"] == "cancelled" and shown["summary"]["attempts"] < 40


def test_token_guards_everything_but_health(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERILOOP_API_TOKEN", "s3cret")
    with TestClient(create_app(api_settings(tmp_path, db_url), backend=ScriptedBackend())) as client:
        assert client.get("/health").status_code == 200
        for path in ("/api/runs", "/v1/models", "/openapi.json"):
            assert error_of(client.get(path), 401) == "missing or invalid bearer token"
        assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        page = client.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/"
        assert client.post("/login", data={"token": "s3cret", "next": "/"}, follow_redirects=False).status_code == 303
        assert client.get("/").status_code == 200  # the cookie now carries the token
        assert client.get("/api/runs").status_code == 200


def test_openapi_lists_every_api_route_and_no_dashboard_page(idle_client: TestClient) -> None:
    schema = idle_client.get("/openapi.json").json()
    routes = [r for r in idle_client.app.routes if isinstance(r, APIRoute)]  # type: ignore[attr-defined]
    for route in routes:
        if route.path.startswith(("/api/", "/v1/")) or route.path == "/health":
            methods = {method.lower() for method in route.methods or ()}
            assert methods <= set(schema["paths"][route.path]), route.path
    assert not any(path in schema["paths"] for path in ("/", "/runs/{run_id}", "/nodes/{node_id}", "/compare"))
    create_schema = schema["components"]["schemas"]["RunCreate"]
    assert set(create_schema["properties"]) == {"agent", "suite", "model", "options", "limit", "task_ids"}


def test_run_status_enum_matches_the_filter(idle_client: TestClient) -> None:
    for status in RunStatus:
        assert idle_client.get("/api/runs", params={"status": status.value}).status_code == 200
