"""Sandboxes shared by the sandbox tests: warm pools and the Docker container live for the whole session.

Tests using these fixtures carry the `bwrap` / `docker` markers (tests/conftest.py), which skip them where the part is
missing; a Docker engine that answers but cannot prepare the image still skips here, with the reason."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from veriloop.sandbox.bwrap import BwrapSandbox
from veriloop.sandbox.process import ProcessSandbox

BACKENDS = ["bwrap_cold", "bwrap_warm", "process", "docker"]


@pytest.fixture(scope="session")
def bwrap_cold() -> Iterator[BwrapSandbox]:
    sandbox = BwrapSandbox(warm_workers=0)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def bwrap_warm() -> Iterator[BwrapSandbox]:
    sandbox = BwrapSandbox(warm_workers=2)
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def process_sandbox() -> ProcessSandbox:
    return ProcessSandbox(allow_unsafe=True)


@pytest.fixture(scope="session")
def docker_sandbox() -> Iterator[object]:
    from veriloop.config import load_settings
    from veriloop.sandbox.docker import DockerSandbox

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
    fixture = {
        "bwrap_cold": "bwrap_cold",
        "bwrap_warm": "bwrap_warm",
        "process": "process_sandbox",
        "docker": "docker_sandbox",
    }[name]
    return request.getfixturevalue(fixture)
