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


# The OpenAI-compatible endpoints parse requests the way OpenAI's API does (lax types, unknown fields kept) and
# answer 400 for OpenAI features this server does not implement (tools, echo, suffix, token-id prompts): their
# schema describes what OpenAI clients send, not what this server accepts, so the two data-acceptance checks do not
# apply to them. Every other check does.
PARTS = {
    "api": ["--include-path-regex", "^/(api/|health)"],
    "openai": [
        "--include-path-regex",
        "^/v1/",
        "--exclude-checks",
        "positive_data_acceptance,negative_data_rejection",
    ],
}


@pytest.mark.slow
@needs_schemathesis
@pytest.mark.parametrize("part", sorted(PARTS))
def test_the_live_api_keeps_its_openapi_contract(tmp_path: Path, part: str) -> None:
    assert SCHEMATHESIS is not None
    env = {"VERILOOP_SERVICE__API_TOKEN": TOKEN}
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
                "5",
                "--seed",
                "20261201",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--workers",
                "1",
                "--request-timeout",
                "30",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
            check=False,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"},
        )
    report = result.stdout + result.stderr
    (tmp_path / "schemathesis.txt").write_text(report)
    assert result.returncode == 0, report[-6000:]
    assert "No issues found" in report or "passed" in report, report[-3000:]
