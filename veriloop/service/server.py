"""Running the app under uvicorn: bind first, build the backend, serve (API, dashboard, job loops) until a signal."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from types import FrameType

import uvicorn

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.llm.base import get_backend
from veriloop.service.app import api_token, create_app
from veriloop.service.preflight import check_public_bind, check_worker


class _Server(uvicorn.Server):
    """uvicorn's server, except that a stop signal ends `serve` quietly instead of being re-raised after it."""

    stop_signal: int | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stop_signal = sig
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def listen(host: str, port: int) -> socket.socket:
    """Bind before the model loads, so a busy port fails fast with one line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _announce(server: _Server, info: dict[str, str], as_json: bool) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    if as_json:
        sys.stdout.write(json.dumps(info) + "\n")
    else:
        sys.stdout.write(
            f"veriloop serving on {info['url']}: dashboard {info['dashboard_url']}, REST API {info['api_url']}, "
            f"OpenAI-compatible API {info['openai_base_url']} (backend {info['backend']}, model {info['model']}, "
            f"{info['workers']} job loops); Ctrl-C stops\n"
        )
    sys.stdout.flush()


async def serve(settings: Settings, *, as_json: bool = False) -> int | None:
    """Serve until stopped; returns the signal that stopped the server (None if it stopped by itself)."""
    host, port = settings.service.host, settings.service.port
    check_public_bind(host, port, api_token(settings))
    if settings.service.workers:
        check_worker(settings)
    sock = listen(host, port)
    try:
        backend = get_backend(settings)
    except BaseException:
        sock.close()
        raise
    # The app's lifespan closes the backend at shutdown and runs `service.workers` job loops beside the API.
    app = create_app(settings, backend=backend, workers=settings.service.workers)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=10)
    server = _Server(config)
    url = base_url(host, port)
    info = {
        "url": url,
        "dashboard_url": f"{url}/",
        "api_url": f"{url}/api",
        "openai_base_url": f"{url}/v1",
        "backend": backend.name,
        "model": backend.model_id,
        "workers": str(settings.service.workers),
    }
    announcer = asyncio.create_task(_announce(server, info, as_json))
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()
        sock.close()
    return server.stop_signal
