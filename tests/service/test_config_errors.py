"""Bad configuration of a server or worker fails at start with one clear line on stderr, no traceback.

Each case runs the real command (`veriloop serve`, `veriloop worker`) as a user would: a wrong database URL, a
public bind without a token, an unreachable model server, a missing sandbox image (against the real engine).
The passing side of each check runs against the real part too: a served OpenAI-compatible endpoint, a loopback
bind, an image that exists.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from veriloop.config import load_settings
from veriloop.errors import ConfigError
from veriloop.service.preflight import check_llm_endpoint, check_public_bind, check_sandbox_image, is_loopback
from veriloop.testing import CLI, free_port, served

pytestmark = pytest.mark.slow  # each case starts the real CLI (a few seconds of imports)


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str]:
    keep = ("VERILOOP_PATHS__DATA_DIR",)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("VERILOOP_") or k in keep}
    child_env.update(env or {})
    result = subprocess.run(
        [*CLI, "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
        check=False,
        cwd=home,
    )
    return result.returncode, result.stderr.strip()


def one_line_error(rc: int, stderr: str) -> str:
    assert rc != 0, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg://veriloop:secret@127.0.0.1:{port}/veriloop", "Connection refused"),
        ("postgresql+psycopg://veriloop:secret@no-such-host.invalid/veriloop", "failed to resolve host"),
        ("mysql://veriloop@db/veriloop", "unsupported database 'mysql'"),
    ],
)
def test_a_wrong_database_url_is_one_line(tmp_path: Path, url: str, says: str) -> None:
    url = url.format(port=free_port())
    line = one_line_error(*run_cli(tmp_path, "worker", "--once", env={"VERILOOP_STORE__URL": url}))
    assert "cannot open database" in line or "unsupported database" in line
    assert says in line
    assert "secret" not in line  # the password is masked


def test_a_public_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    port = str(free_port())
    line = one_line_error(*run_cli(tmp_path, "serve", "--host", "0.0.0.0", "--port", port, "--workers", "0"))
    assert line == (
        f"error: refusing to serve on 0.0.0.0:{port} without an API token: set VERILOOP_API_TOKEN (or "
        "service.api_token), or bind 127.0.0.1"
    )
    with pytest.raises(ConfigError, match="without an API token"):
        check_public_bind("::", 8000, None)
    check_public_bind("0.0.0.0", 8000, "a-token")  # a token makes a public bind fine
    check_public_bind("127.0.0.1", 8000, None)
    assert is_loopback("localhost") and is_loopback("::1") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.7")


def test_an_unreachable_model_server_is_one_line(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    env = {"VERILOOP_LLM__BACKEND": "openai", "VERILOOP_LLM__BASE_URL": base}
    line = one_line_error(*run_cli(tmp_path, "worker", "--once", env=env))
    assert line.startswith(f"error: cannot reach the model server at {base} (llm.base_url): ")
    assert "VERILOOP_LLM__BASE_URL" in line


def test_a_served_model_endpoint_passes_and_a_wrong_key_is_named(tmp_path: Path) -> None:
    env = {"VERILOOP_SERVICE__API_TOKEN": "right"}
    with served("--backend", "scripted", home=tmp_path, env=env, serve_args=["--workers", "0"]) as server:
        good = load_settings(llm={"backend": "openai", "base_url": server.base_url, "api_key": "right"})
        check_llm_endpoint(good)
        wrong = load_settings(llm={"backend": "openai", "base_url": server.base_url, "api_key": "wrong"})
        with pytest.raises(ConfigError, match="answered GET /models with HTTP 401"):
            check_llm_endpoint(wrong)


@pytest.mark.docker
def test_a_missing_sandbox_image_is_one_line(tmp_path: Path) -> None:
    env = {"VERILOOP_SANDBOX__BACKEND": "docker", "VERILOOP_SANDBOX__DOCKER_IMAGE": "veriloop-no-such-image:none"}
    line = one_line_error(*run_cli(tmp_path, "worker", "--once", env=env))
    assert line.startswith("error: sandbox image veriloop-no-such-image:none (sandbox.docker_image) is missing")
    present = subprocess.run(
        ["docker", "images", "-q", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, check=True
    ).stdout.split()
    present = [name for name in present if "<none>" not in name]  # dangling build layers have no name to check
    if present:  # an image the engine has passes the same check
        check_sandbox_image(load_settings(sandbox={"backend": "docker", "docker_image": present[0]}))
