"""compose.yaml is valid for Debian's docker-compose 1.29 (`docker-compose config`, no images pulled) and wires
the services the way the service needs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]
COMPOSE = shutil.which("docker-compose")

pytestmark = pytest.mark.skipif(
    COMPOSE is None, reason="no docker-compose on PATH: run scripts/setup-browser.sh (Debian docker-compose)"
)


def config(*args: str, env: dict[str, str] | None = None) -> str:
    assert COMPOSE is not None
    result = subprocess.run(
        [COMPOSE, "-f", str(REPO / "compose.yaml"), *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **(env or {})}, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_compose_config_validates_and_wires_the_services() -> None:
    resolved: dict[str, Any] = yaml.safe_load(config("config"))
    services = resolved["services"]
    assert set(services) == {"postgres", "migrate", "api", "worker", "sandbox", "vllm"}
    assert services["vllm"]["profiles"] == ["gpu"]
    [gpu] = services["vllm"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["capabilities"] == ["gpu"] and gpu["driver"] == "nvidia"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"] == ["veriloop", "worker"]
    assert services["api"]["command"][:2] == ["veriloop", "serve"] and "--workers" in services["api"]["command"]
    assert services["api"]["ports"] == ["127.0.0.1:8000:8000/tcp"]
    store = services["worker"]["environment"]["VERILOOP_STORE__URL"]
    assert store.startswith("postgresql+psycopg://") and store == services["api"]["environment"]["VERILOOP_STORE__URL"]
    assert services["worker"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["sandbox"]["build"]["dockerfile"] == "sandbox.Dockerfile"
    assert (REPO / "docker" / "service.Dockerfile").is_file() and (REPO / "docker" / "sandbox.Dockerfile").is_file()


def test_workers_scale_and_the_gpu_profile_points_them_at_vllm() -> None:
    resolved = yaml.safe_load(config("config", env={"VERILOOP_WORKERS": "5", "VERILOOP_LLM_BACKEND": "openai"}))
    worker = resolved["services"]["worker"]
    assert worker["deploy"]["replicas"] == 5
    assert worker["environment"]["VERILOOP_LLM__BACKEND"] == "openai"
    assert worker["environment"]["VERILOOP_LLM__BASE_URL"] == "http://vllm:8001/v1"
    assert "vllm" in config("--profile", "gpu", "config", "--services").split()
