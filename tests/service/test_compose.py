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
    """`docker-compose -f compose.yaml [-f OVERRIDE] ARGS`; a leading "-f FILE" pair adds an override file."""
    assert COMPOSE is not None
    files = ["-f", str(REPO / "compose.yaml")]
    while args[:1] == ("-f",):
        files += ["-f", str(REPO / args[1])]
        args = args[2:]
    result = subprocess.run(
        [COMPOSE, *files, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_compose_config_validates_and_wires_the_services() -> None:
    resolved: dict[str, Any] = yaml.safe_load(config("config"))
    services = resolved["services"]
    assert set(services) == {"postgres", "migrate", "api", "worker", "vllm"}
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
    assert services["postgres"]["image"] == "postgres:16"
    assert services["migrate"]["build"]["args"]["BASE_IMAGE"] == "python:3.11-slim-bookworm"
    assert (REPO / "docker" / "service.Dockerfile").is_file() and (REPO / "docker" / "sandbox.Dockerfile").is_file()


@pytest.mark.slow
def test_workers_sandbox_with_bubblewrap_and_no_docker_socket_by_default() -> None:
    worker = yaml.safe_load(config("config"))["services"]["worker"]
    assert worker["environment"]["VERILOOP_SANDBOX__BACKEND"] == "bwrap"
    assert not any("docker.sock" in volume for volume in worker.get("volumes", []))
    assert worker["cap_drop"] == ["ALL"] and "SYS_ADMIN" in worker["cap_add"]
    assert "SYS_PTRACE" not in worker["cap_add"] and "NET_ADMIN" in worker["cap_add"]  # bwrap's loopback
    assert any(opt.endswith("docker/worker-seccomp.json") for opt in worker["security_opt"])  # ours, not unconfined
    assert worker["environment"]["VERILOOP_SANDBOX__CGROUPS"] == "auto" and worker["pids_limit"] == 2048
    socket_mode = yaml.safe_load(config("-f", "compose.socket.yaml", "config"))["services"]
    assert socket_mode["worker"]["environment"]["VERILOOP_SANDBOX__BACKEND"] == "docker"
    assert "/var/run/docker.sock:/var/run/docker.sock:rw" in socket_mode["worker"]["volumes"]
    assert socket_mode["worker"]["depends_on"]["sandbox"]["condition"] == "service_completed_successfully"
    assert socket_mode["sandbox"]["build"]["dockerfile"] == "sandbox.Dockerfile"


@pytest.mark.slow
def test_the_local_override_builds_everything_from_local_bases() -> None:
    services = yaml.safe_load(config("-f", "compose.local.yaml", "config"))["services"]
    assert services["postgres"]["image"] == "veriloop-postgres:local"
    assert services["postgres"]["build"]["args"]["BASE_IMAGE"] == "veriloop-postgres-base:bookworm"
    assert services["postgres"]["healthcheck"]["test"] == ["CMD-SHELL", "pg_isready -U veriloop -d veriloop"]
    assert services["migrate"]["build"]["args"]["BASE_IMAGE"] == "veriloop-base:bookworm"
    chosen = yaml.safe_load(config("config", env={"VERILOOP_POSTGRES_IMAGE": "my/postgres:15"}))["services"]
    assert chosen["postgres"]["image"] == "my/postgres:15"


@pytest.mark.slow
def test_workers_scale_and_the_gpu_profile_points_them_at_vllm() -> None:
    resolved = yaml.safe_load(config("config", env={"VERILOOP_WORKERS": "5", "VERILOOP_LLM_BACKEND": "openai"}))
    worker = resolved["services"]["worker"]
    assert worker["deploy"]["replicas"] == 5
    assert worker["environment"]["VERILOOP_LLM__BACKEND"] == "openai"
    assert worker["environment"]["VERILOOP_LLM__BASE_URL"] == "http://vllm:8001/v1"
    assert "vllm" in config("--profile", "gpu", "config", "--services").split()


def test_the_build_context_leaves_out_everything_but_the_package() -> None:
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert ignored[ignored.index("*")] == "*"
    kept = {line[1:] for line in ignored if line.startswith("!")}
    assert kept == {"pyproject.toml", "README.md", "veriloop/", "docker/wheelhouse/", "docker/worker-entrypoint.sh"}
