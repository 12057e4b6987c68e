"""Checks a server or worker makes before it starts, so bad configuration fails at once with one clear line.

A wrong database URL already fails that way when the store opens; these cover what would otherwise fail late or
quietly: an API reachable from other machines with no token, a model server that is not there, a sandbox image
that was never built.
"""

from __future__ import annotations

import importlib
import ipaddress
import socket
from typing import Any

import httpx

from veriloop.config import Settings
from veriloop.errors import ConfigError

TOKEN_ENV = "VERILOOP_API_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
        except OSError:
            return False
        return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def check_public_bind(host: str, port: int, token: str | None) -> None:
    """An API bound beyond loopback needs a token: anyone who reaches it can queue runs that execute code."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve on {host}:{port} without an API token: set {TOKEN_ENV} (or service.api_token), "
            "or bind 127.0.0.1"
        )


def check_llm_endpoint(settings: Settings, timeout_s: float = 5.0) -> None:
    """The openai backend's server answers `GET /models` (vLLM and any OpenAI-compatible server do)."""
    if settings.llm.backend != "openai":
        return
    url = settings.llm.base_url.rstrip("/")
    try:
        response = httpx.get(
            f"{url}/models", timeout=timeout_s, headers={"Authorization": f"Bearer {settings.llm.api_key}"}
        )
    except httpx.HTTPError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"cannot reach the model server at {url} (llm.base_url): {reason}; start it (with Compose: "
            "`docker-compose --profile gpu up -d vllm`) or set VERILOOP_LLM__BASE_URL"
        ) from None
    if response.status_code >= 400:
        raise ConfigError(
            f"the model server at {url} (llm.base_url) answered GET /models with HTTP {response.status_code}; "
            "check VERILOOP_LLM__BASE_URL and VERILOOP_LLM__API_KEY"
        )


def check_sandbox_image(settings: Settings) -> None:
    """The docker sandbox backend's image exists on the engine it will use."""
    if settings.sandbox.backend != "docker":
        return
    docker: Any = importlib.import_module("docker")  # the SDK is untyped
    errors = docker.errors
    image = settings.sandbox.docker_image
    try:
        url = settings.sandbox.docker_url
        client = docker.DockerClient(base_url=url) if url else docker.from_env()
    except errors.DockerException as exc:
        raise ConfigError(f"cannot reach the Docker engine for the docker sandbox backend: {exc}") from None
    try:
        client.images.get(image)
    except errors.ImageNotFound:
        raise ConfigError(
            f"sandbox image {image} (sandbox.docker_image) is missing: build it with scripts/setup-sandbox.sh "
            "or `docker-compose -f compose.yaml -f compose.socket.yaml build sandbox`"
        ) from None
    except errors.DockerException as exc:
        raise ConfigError(f"cannot check sandbox image {image}: {exc}") from None
    finally:
        client.close()


def check_worker(settings: Settings) -> None:
    """What a worker needs before it claims a run: its model server and its sandbox image."""
    check_llm_endpoint(settings)
    check_sandbox_image(settings)
