"""Sandboxes shared by the sandbox tests: warm pools and the Docker container live for the whole session."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from veriloop.sandbox.bwrap import BwrapSandbox
from veriloop.sandbox.process import ProcessSandbox

BACKENDS = ["bwrap_cold", "bwrap_warm", "process", "docker"]


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed; scripts/setup-sandbox.sh installs it")
    if not Path("/sys/fs/cgroup").exists():
        pytest.skip("no cgroup file system")


@pytest.fixture(scope="session")
def bwrap_cold() -> Iterator[BwrapSandbox]:
    need_bwrap()
    sandbox = BwrapSandbox(warm_workers=0)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def bwrap_warm() -> Iterator[BwrapSandbox]:
    need_bwrap()
    sandbox = BwrapSandbox(warm_workers=2)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def process_sandbox() -> ProcessSandbox:
    return ProcessSandbox(allow_unsafe=True)


@pytest.fixture(scope="session")
def docker_sandbox() -> Iterator[object]:
    from veriloop.sandbox.docker import DockerSandbox, engine_available

    why = engine_available()
    if why is not None:
        pytest.skip(f"no Docker engine: {why}")
    from veriloop.config import load_settings

    # The settings' image (veriloop-sandbox:local unless VERILOOP_SANDBOX__DOCKER_IMAGE names another).
    sandbox = DockerSandbox(image=load_settings(None).sandbox.docker_image, warm_workers=1)
    try:
        asyncio.run(sandbox.prepare())
    except Exception as exc:
        sandbox.close()
        pytest.skip(f"docker sandbox unavailable: {exc}")
    yield sandbox
    sandbox.close()


@pytest.fixture
def sandbox(request: pytest.FixtureRequest) -> object:
    """The backend named by the test's `backend` parameter."""
    name = request.param
    fixture = {"bwrap_cold": "bwrap_cold", "bwrap_warm": "bwrap_warm", "process": "process_sandbox",
               "docker": "docker_sandbox"}[name]  # fmt: skip
    return request.getfixturevalue(fixture)
