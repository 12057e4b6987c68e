"""POST /api/judge over the real sandbox (bubblewrap) and a real store: verdicts, jobs, limits, storage.

Hostile candidates here attack the resources and the process (fork bombs, memory, output floods, exits,
killing their parent); the forged-verdict attacks are issue 14's adversarial suites on the same helpers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from veriloop.config import Settings, load_settings
from veriloop.judge.client import JudgeClient, JudgeError
from veriloop.service.app import create_app
from veriloop.store import TrajectoryStore, upgrade_database
from veriloop.store.exports import ExportFilter, ExportOptions, build_rows
from veriloop.testing import ScriptedBackend, free_port

ADD = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
GOOD = {"code": ADD, "tests": TESTS, "entry_point": "add"}
WRONG = {"code": "def add(a, b):\n    return abs(a) + b\n", "tests": TESTS, "entry_point": "add"}
SLOW = {"code": "import time\ntime.sleep(30)\n" + ADD, "tests": TESTS, "limits": {"wall_s": 1}}
HOSTILE = [
    "import os\nwhile True:\n    os.fork()\n",  # fork bomb
    "x = bytearray(2 << 30)\n",  # 2 GiB
    "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",  # output flood
    "import os\nos.kill(os.getppid(), 9)\n",  # kill the runner
    "import sys\nsys.exit(0)\n",  # leave before the tests
    "import os, signal\nos.killpg(0, signal.SIGKILL)\n",  # kill the whole group
]


def judge_settings(home: Path, **judge: Any) -> Settings:
    url = f"sqlite:///{home / 'judge.db'}"
    upgrade_database(url)
    return load_settings(
        paths={"home": home},
        store={"url": url},
        llm={"backend": "scripted", "model": "scripted"},
        judge=judge,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(judge_settings(tmp_path, sync_max=8), backend=ScriptedBackend())) as test_client:
        yield test_client


def post(client: TestClient, candidates: list[dict[str, Any]], **extra: Any) -> Any:
    response = client.post("/api/judge", json={"candidates": candidates, **extra})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow
def test_verdicts_come_back_in_order_with_rewards_and_per_test_outcomes(client: TestClient) -> None:
    stdio = {
        "code": "print(input()[::-1])",
        "tests": [{"stdin": "abc", "expected": "cba"}, {"stdin": "x", "expected": "y"}],
    }
    stored = {"code": "def strlen(string):\n    return len(string)\n", "task_id": "HumanEval/23"}
    body = post(client, [GOOD, WRONG, SLOW, stdio, stored], reward={"mode": "pass_rate"})
    results = body["results"]
    assert [r["index"] for r in results] == [0, 1, 2, 3, 4]
    assert [r["status"] for r in results] == ["passed", "failed", "timeout", "failed", "passed"]
    assert [r["reward"] for r in results] == [1.0, 0.5, 0.0, 0.5, 1.0]
    assert [t["passed"] for t in results[1]["tests"]] == [True, False]
    assert results[0]["execution"]["sandbox"] == "bwrap" and results[0]["kind"] == "tests"
    assert body["run_id"] is None


@pytest.mark.slow
def test_hostile_programs_fail_and_never_take_the_judge_down(client: TestClient) -> None:
    hostile = [{"code": code + ADD, "tests": TESTS, "limits": {"wall_s": 2}} for code in HOSTILE]
    results = post(client, [*hostile, GOOD])["results"]
    for candidate, result in zip(HOSTILE, results, strict=False):
        assert result["status"] not in ("passed", "infra_error"), (candidate, result)
        assert result["reward"] == 0.0
    assert results[-1]["status"] == "passed"  # the sandbox still serves the next candidate


def test_security_findings_are_reported_and_penalised(client: TestClient) -> None:
    shell = {
        "code": "import subprocess\ndef add(a, b):\n    subprocess.run(f'echo {a}', shell=True)\n    return a + b\n",
        "tests": TESTS,
    }
    results = post(client, [shell, GOOD], reward={"security_weight": 0.3})["results"]
    assert results[0]["status"] == "passed" and {f["test_id"] for f in results[0]["security"]} >= {"B602"}
    assert results[0]["reward"] == pytest.approx(0.7) and results[1]["reward"] == 1.0 and not results[1]["security"]


def test_a_candidate_cannot_silence_the_scan(client: TestClient) -> None:
    """`# nosec` is the candidate's own comment, and code that crashes bandit is not clean code."""
    code = "import subprocess  # nosec\ndef add(a, b):\n    subprocess.run(f'echo {a}', shell=True)  # nosec B602\n"
    silenced = {"code": code + "    return a + b\n", "tests": TESTS}
    crashing = {"code": ADD + "ONE = " + "+".join(["1"] * 1500) + "\n", "tests": TESTS}  # bandit recurses too deep
    results = post(client, [silenced, crashing], reward={"security_weight": 0.3})["results"]
    assert results[0]["status"] == "passed" and {f["test_id"] for f in results[0]["security"]} >= {"B602", "B404"}
    assert results[0]["reward"] < 1.0
    assert results[1]["status"] == "passed" and [f["test_id"] for f in results[1]["security"]] == ["unscanned"]
    assert results[1]["reward"] == pytest.approx(0.7)


def test_bad_input_is_refused_before_any_work(tmp_path: Path) -> None:
    settings = judge_settings(tmp_path, max_candidates=3, max_body_mb=0.05)
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        assert client.post("/api/judge", json={"candidates": [GOOD] * 4}).status_code == 413
        big = client.post("/api/judge", json={"candidates": [{**GOOD, "code": "#" * 60_000 + "\n" + ADD}]})
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
        both = client.post("/api/judge", json={"candidates": [{**GOOD, "task_id": "HumanEval/0"}]})
        assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]
        assert client.post("/api/judge", json={"candidates": []}).status_code == 400
        assert client.post("/api/judge", content=b"{", headers={"content-type": "application/json"}).status_code == 400


def test_a_large_batch_becomes_a_job_with_progress_events_and_the_same_results(client: TestClient) -> None:
    candidates = [GOOD, WRONG] * 5
    started = client.post("/api/judge", json={"candidates": candidates})
    assert started.status_code == 202, started.text
    job = started.json()
    with client.stream("GET", job["events"]) as events:
        text = "".join(events.iter_text())
    progress = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert progress[-1] == {"id": job["id"], "status": "finished", "done": 10, "total": 10, "passed": 5}
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    finished = client.get(f"/api/judge/jobs/{job['id']}").json()
    direct = post(client, candidates[:8])["results"]
    assert [r["status"] for r in finished["results"]] == ["passed", "failed"] * 5
    assert [r["reward"] for r in finished["results"][:8]] == [r["reward"] for r in direct]
    assert client.get("/api/judge/jobs/nope").status_code == 404


@pytest.mark.slow
def test_per_token_limits_answer_429_with_retry_after(tmp_path: Path) -> None:
    settings = judge_settings(tmp_path, token_requests=1, sync_max=1)
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        slower = {**SLOW, "limits": {"wall_s": 20}}
        job = client.post("/api/judge", json={"candidates": [slower, slower], "mode": "job"}).json()
        refused = client.post("/api/judge", json={"candidates": [GOOD]})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        other = client.post("/api/judge", json={"candidates": [GOOD]}, headers={"Authorization": "Bearer other"})
        assert other.status_code == 200 and other.json()["results"][0]["status"] == "passed"
        cancelled = client.delete(f"/api/judge/jobs/{job['id']}").json()
        assert cancelled["status"] in ("cancelled", "finished"), cancelled  # DELETE ends it either way
        assert client.post("/api/judge", json={"candidates": [GOOD]}).status_code == 200  # the books are settled


@pytest.mark.slow
def test_overload_and_a_broken_sandbox_give_infra_error_never_failed(tmp_path: Path) -> None:
    settings = judge_settings(tmp_path, concurrency=1, queue_timeout_s=0.3)
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        results = post(client, [SLOW, GOOD, WRONG])["results"]
    assert results[0]["status"] == "timeout"
    assert [(r["status"], r["reward"]) for r in results[1:]] == [("infra_error", None)] * 2
    assert "overloaded" in results[1]["error"]
    broken = judge_settings(tmp_path / "b").model_copy(deep=True)
    broken.sandbox.work_root = Path("/proc/self/no-such-folder")
    with TestClient(create_app(broken, backend=ScriptedBackend())) as client:
        results = post(client, [GOOD, WRONG])["results"]
    assert [(r["status"], r["reward"]) for r in results] == [("infra_error", None)] * 2, results


def test_store_true_records_a_run_that_exports_can_filter_by_security(client: TestClient, tmp_path: Path) -> None:
    shell = {
        "code": "import subprocess\ndef add(a, b):\n    subprocess.run(f'echo {a}', shell=True)\n    return a + b\n",
        "tests": TESTS,
    }
    prompt = "Write add(a, b)."
    candidates = [{**c, "prompt": prompt} for c in (GOOD, WRONG, shell)]
    body = post(client, candidates, store=True, model="policy-7")
    with TrajectoryStore(f"sqlite:///{tmp_path / 'judge.db'}") as store:
        run = store.get_run(body["run_id"])
        nodes = store.list_nodes(run.id)
        assert (run.agent, run.model, run.status.value) == ("judge", "policy-7", "finished")
        assert [n.exec_result.status.value for n in nodes if n.exec_result] == ["passed", "failed", "passed"]
        assert {n.task_id for n in nodes} == {nodes[0].task_id}  # one prompt: one group of siblings
        marked = build_rows(store, "sft", [run.id], ExportOptions(filters=ExportFilter(security="mark")))
        dropped = build_rows(store, "sft", [run.id], ExportOptions(filters=ExportFilter(security="drop")))
    assert sorted(len(r["security"]) > 0 for r in marked) == [False, True]
    assert len(dropped) == 1 and "security" not in dropped[0]

    for mode, rows in (("drop", 1), ("mark", 2)):  # the same filter through the API
        info = client.post("/api/exports", json={"kind": "sft", "run_ids": [run.id], "security": mode}).json()
        for _ in range(200):
            if info["status"] != "running":
                break
            time.sleep(0.05)
            info = client.get(f"/api/exports/{info['id']}").json()
        assert (info["status"], info["rows"]) == ("finished", rows), info
    refused = client.post("/api/exports", json={"kind": "sft", "run_ids": [run.id], "security": "hide"})
    assert refused.status_code == 400 and "security" in refused.text


def test_a_client_that_disconnects_cancels_its_remaining_work(tmp_path: Path) -> None:
    settings = judge_settings(tmp_path, concurrency=1)
    app = create_app(settings, backend=ScriptedBackend())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        with JudgeClient(url) as judge:
            assert judge.judge([GOOD])[0]["status"] == "passed"  # the service and its sandbox are up
        service = app.state.judge
        slow = {"code": "import time\ntime.sleep(20)\n" + ADD, "tests": TESTS, "limits": {"wall_s": 20}}
        body = json.dumps({"candidates": [slow] * 4}).encode()
        head = "POST /api/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            deadline = time.monotonic() + 30
            while service.judge.in_flight == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert service.pending == 4 and service.judge.in_flight == 1  # one slot (concurrency 1) is busy
        deadline = time.monotonic() + 10  # the client has gone: its four candidates go too
        while (service.pending or service.judge.in_flight) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert service.pending == 0 and service.judge.in_flight == 0 and not service.accounts
        with JudgeClient(url) as judge:  # the killed sandbox was replaced: the next request is served
            assert [v["status"] for v in judge.judge([GOOD, WRONG])] == ["passed", "failed"]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_client_retries_429_then_gives_up_and_raises_4xx_at_once() -> None:
    calls: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if request.url.path == "/api/judge" and json.loads(request.content)["candidates"][0]["code"] == "bad":
            return httpx.Response(400, json={"error": {"message": "nope"}})
        if len(calls) < 3:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"error": {"message": "busy"}})
        return httpx.Response(200, json={"results": [{"index": 0, "reward": 1.0}]})

    client = JudgeClient("http://judge", transport=httpx.MockTransport(answer), backoff_s=0.01)
    assert client.judge([GOOD]) == [{"index": 0, "reward": 1.0}] and len(calls) == 3
    with pytest.raises(JudgeError, match="400: nope"):
        client.judge([{"code": "bad", "tests": TESTS}])
    calls.clear()
    stubborn = JudgeClient(
        "http://judge",
        retries=1,
        backoff_s=0.01,
        transport=httpx.MockTransport(lambda r: httpx.Response(503, text="down")),
    )
    with pytest.raises(JudgeError, match="gave up after 2 attempts"):
        stubborn.judge([GOOD])


def test_the_route_declares_its_answers_in_openapi(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/api/judge"]["post"]
    assert {"200", "202", "400", "413", "429"} <= set(operation["responses"])
    assert "Retry-After" in operation["responses"]["429"]["headers"]
    events = client.get("/openapi.json").json()["paths"]["/api/judge/jobs/{job_id}/events"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]


POLY_PROMPT = """import math


def poly(xs: list, x: float):
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))


def find_zero(xs: list):
    \"\"\"A zero of the polynomial with coefficients xs.\"\"\"
"""
POLY_TESTS = "def check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n\ncheck(find_zero)\n"
POLY_RIGHT = "\n    return -xs[0] / xs[1]\n"
POLY_REDEFINED = "\n    return 0.0\n\n\ndef poly(xs, x):\n    return 0.0\n"


def test_the_prompts_own_helpers_judge_an_inline_candidate(client: TestClient) -> None:
    """An external trainer sends the prompt with the candidate: the tests call the prompt's `poly`, so a wrong
    `find_zero` that redefines `poly` to return 0 is not rewarded (it passes when the prompt is left out)."""
    body = {"tests": POLY_TESTS, "entry_point": "find_zero", "prompt": POLY_PROMPT}
    hostile, honest = ({**body, "code": POLY_PROMPT + code} for code in (POLY_REDEFINED, POLY_RIGHT))
    without_prompt = {k: v for k, v in hostile.items() if k != "prompt"}
    results = post(client, [hostile, honest, without_prompt])["results"]
    assert [r["status"] for r in results] == ["failed", "passed", "passed"], results
