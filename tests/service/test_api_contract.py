"""The OpenAPI contract, checked by schemathesis (`--checks all`) against a live `veriloop serve` with a token.

Every operation gets generated requests (bounded examples, fixed seed) and every built-in check: no server error,
no status code or content type the schema does not declare, responses matching their schemas, invalid data
rejected, the token enforced (`ignored_auth`), unsupported methods answered 405. The model is scripted: the
contract is the app's, not the model's; the store is a real SQLite database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from veriloop.config import load_settings
from veriloop.service.app import create_app
from veriloop.testing import ScriptedBackend, served

TOKEN = "contract-token"
REQUEST_TIMEOUT_S = 180
CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")

needs_schemathesis = pytest.mark.skipif(SCHEMATHESIS is None, reason="schemathesis is not installed (dev extra)")


def test_every_operation_declares_its_errors_and_content_types(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted", "model": "scripted"})
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        schema = client.get("/openapi.json").json()
        operations = [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]
        assert len(operations) >= 25
        for path, method, operation in operations:
            responses = operation["responses"]
            assert "422" not in responses, (method, path)  # validation errors are 400 here
            assert "500" in responses, (method, path)
            assert ("401" in responses) == (path != "/health"), (method, path)
            if "{" in path or operation.get("requestBody") or operation.get("parameters"):
                assert "400" in responses, (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorResponse"
                    }
        assert "HTTPValidationError" not in schema["components"]["schemas"]
        events = schema["paths"]["/api/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
        assert list(events) == ["text/event-stream"]
        assert events["text/event-stream"]["schema"]["properties"]["event"]["enum"] == ["progress", "end"]
        for path in ("/v1/chat/completions", "/v1/completions"):
            assert "text/event-stream" in schema["paths"][path]["post"]["responses"]["200"]["content"]
        download = schema["paths"]["/api/exports/{export_id}/download"]["get"]["responses"]
        assert set(download["200"]["content"]) == {
            "application/jsonl",
            "application/vnd.apache.parquet",
            "application/zip",
        }
        assert "409" in download
        for path in ("/api/runs/{run_id}/cancel", "/api/runs/{run_id}/resume"):
            assert "409" in schema["paths"][path]["post"]["responses"]

        # A method the path does not serve: 405 with every method it does serve in Allow.
        wrong = client.delete("/api/runs")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
        assert wrong.json()["error"]["type"] == "invalid_request_error"


MESSAGES = [{"role": "user", "content": "x"}]
AGREE = [  # (path, body): each refused by the schema exactly when the server answers 400
    ("/api/runs", {"agent": "f2strans", "options": {"source": "java", "target": "java"}}),
    ("/api/runs", {"agent": "f2strans", "options": {"target": "cpp"}}),  # the default source is cpp
    ("/api/runs", {"agent": "f2strans", "options": {"source": "java"}}),
    ("/api/runs", {"agent": "mucode", "options": {"selection": "lv"}}),  # a learned verifier needs its model
    ("/api/runs", {"agent": "mucode", "options": {"select": "pt+lv", "verifier_model": "checkpoint:x"}}),
    ("/api/runs", {"agent": "mucode", "options": {"n": 2}}),  # the old name of samples
    ("/api/runs", {"agent": "mucode", "options": {"n": 2, "samples": 2}}),
    ("/api/runs", {"agent": "direct", "options": {"turns": 2}}),  # mucode's option, not direct's
    ("/api/runs", {"agent": "revise", "options": {"stage_steps": [0, 5]}}),
    ("/api/runs", {"agent": "alphaverus", "options": {"target": "coq"}}),
    ("/api/runs", {"agent": "direct", "limit": "3"}),
    ("/api/runs", {"agent": "direct", "limit": 3.0}),  # an integer, as JSON Schema counts them
    ("/api/runs", {"agent": "direct", "suite": "os:system"}),  # not imported: no such suite, 404
    ("/api/runs", {"agent": "nosuch"}),
    ("/api/judge", {"candidates": [{"code": "x", "tests": "assert True", "spec": "s", "verifier": "dafny"}]}),
    ("/api/judge", {"candidates": [{"code": "x", "spec": "s"}]}),
    ("/api/judge", {"candidates": [{"code": "x", "tests": []}]}),
    ("/api/judge", {"candidates": [{"code": "x", "task_id": "HumanEval/0", "suite": "os:system"}]}),
    ("/api/judge", {"candidates": [{"code": "x", "tests": "assert True", "limits": {"memory_mb": "64"}}]}),
    ("/api/judge", {"candidates": [{"code": "x", "tests": "assert True"}], "store": 1}),
    ("/v1/chat/completions", {"messages": MESSAGES, "response_format": {"type": "json_object"}, "guided_regex": "a"}),
    ("/v1/chat/completions", {"messages": MESSAGES, "structured_outputs": {"regex": "a", "grammar": 'start: "a"'}}),
    ("/v1/chat/completions", {"messages": MESSAGES, "response_format": {"type": "text"}, "guided_regex": "a+"}),
    ("/v1/chat/completions", {"messages": MESSAGES, "structured_outputs": {"choice": ["a"]}}),
    ("/v1/chat/completions", {"messages": MESSAGES, "tools": [{"type": "function"}]}),
    ("/v1/chat/completions", {"messages": MESSAGES, "tools": []}),
    ("/v1/chat/completions", {"messages": MESSAGES, "top_logprobs": False}),
    ("/v1/chat/completions", {"messages": MESSAGES, "n": 2.0, "stop": ["x"]}),
    ("/v1/chat/completions", {"messages": MESSAGES, "stop": [""]}),
    ("/v1/completions", {"prompt": "x", "echo": 0}),
    ("/v1/completions", {"prompt": "x", "echo": False, "suffix": ""}),
    ("/v1/completions", {"prompt": [1, 2]}),
    ("/v1/completions", {"prompt": "x", "vendor_extra": {"any": "thing"}}),  # unknown fields: open, and ignored
]


def test_the_schema_refuses_exactly_what_the_server_refuses(tmp_path: Path) -> None:
    """Hand-picked bodies at the edges the models' validators draw (cross-field rules, strict types, the features
    this server does not implement): the OpenAPI schema and the server agree on each."""
    from jsonschema import Draft202012Validator

    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted", "model": "scripted"})
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        schema = client.get("/openapi.json").json()
        for path, body in AGREE:
            ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
            validator = Draft202012Validator({**ref, "components": schema["components"]})
            response = client.post(path, json=body)
            assert response.status_code != 422 and response.status_code < 500, (path, body, response.text)
            assert validator.is_valid(body) == (response.status_code != 400), (path, body, response.text)


# Every route, every check: what the schema admits the server accepts, what it refuses the server refuses.
PARTS = {
    "api": ["--include-path-regex", "^/(api/|health)"],
    "openai": ["--include-path-regex", "^/v1/"],
}
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
MAX_EXAMPLES = 10
"""Fuzzing examples per operation. The coverage phase (boundary and type-mismatch values of every field, whatever
this number) is what finds a validator looser or stricter than its schema; fuzzing finds the rest (a stream's
event shape, a body over the size limit). At 10 both parts take about 6 minutes on a 2-core runner."""


@pytest.mark.slow
@needs_schemathesis
@pytest.mark.parametrize("part", sorted(PARTS))
def test_the_live_api_keeps_its_openapi_contract(tmp_path: Path, part: str) -> None:
    assert SCHEMATHESIS is not None
    # A generated candidate may name a verifier: the first one boots Nagini's JVM worker, tens of seconds on a
    # loaded 2-core runner before its verify timeout (bounded here) starts. Only a request that hangs past both
    # fails; the request timeout below matches schemathesis.toml's max_response_time.
    env = {"VERILOOP_SERVICE__API_TOKEN": TOKEN, "VERILOOP_VERIFIERS__TIMEOUT_S": "20"}
    with served("--backend", "scripted", home=tmp_path / "home", env=env, serve_args=["--workers", "0"]) as server:
        result = subprocess.run(
            [
                SCHEMATHESIS,
                "--config-file",
                str(CONFIG),
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "all",
                *PARTS[part],
                "--max-examples",
                str(MAX_EXAMPLES),
                "--seed",
                "20261201",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--workers",
                "1",
                "--request-timeout",
                str(REQUEST_TIMEOUT_S),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
            check=False,
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "NO_COLOR": "1"},
        )
    report = result.stdout + result.stderr
    (tmp_path / "schemathesis.txt").write_text(report)
    assert result.returncode == 0, report[-6000:]
    assert "No issues found" in report or "passed" in report, report[-3000:]
