"""The service's FastAPI app: REST API (`/api`), dashboard (`/`), OpenAI-compatible endpoints (`/v1`), `/health`.

One backend per process, built at startup and closed at shutdown; one store, opened on first use.
Routers are mounted here and nowhere else; each group of endpoints lives in its own module. With
`service.api_token` (or `VERILOOP_API_TOKEN`) set, everything but `/health` and the login page
needs the token, as a bearer header or the dashboard's cookie. `workers` job loops (see
`service.worker`) run beside the API and execute queued runs with the configured executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request

import veriloop
from veriloop.config import Settings
from veriloop.llm.base import Backend, get_backend
from veriloop.service import api, dashboard, judge, openai_api, openrlhf, sandbox_fusion
from veriloop.service.auth import OPEN_PATHS, BearerTokenMiddleware
from veriloop.service.http_errors import install_error_handlers

TOKEN_ENV = "VERILOOP_API_TOKEN"
logger = logging.getLogger(__name__)


def api_token(settings: Settings) -> str | None:
    """The token the service requires: `service.api_token`, else `VERILOOP_API_TOKEN`, else none."""
    return settings.service.api_token or os.environ.get(TOKEN_ENV) or None


async def _job_loops(app: FastAPI, settings: Settings, count: int, stop: asyncio.Event) -> None:
    from veriloop.service.executor import get_executor
    from veriloop.service.worker import work, worker_name

    executor = get_executor(settings)
    try:
        loops = [
            work(settings, executor, backend=app.state.backend, name=f"{worker_name()}/api{index}", stop=stop)
            for index in range(count)
        ]
        for outcome in await asyncio.gather(*loops, return_exceptions=True):
            if isinstance(outcome, Exception):
                logger.error("a job loop of the API stopped: %s", outcome)
    finally:
        await executor.aclose()


def create_app(settings: Settings, backend: Backend | None = None, *, workers: int = 0) -> FastAPI:
    """The app for `settings`; pass `backend` to serve one built elsewhere (the app closes it at shutdown).

    `workers` job loops start with the app (`veriloop serve` passes `service.workers`); 0 leaves
    queued runs to `veriloop worker` processes.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.backend = backend if backend is not None else get_backend(settings)
        stop = asyncio.Event()
        loops = asyncio.create_task(_job_loops(app, settings, workers, stop)) if workers else None
        try:
            yield
        finally:
            stop.set()
            if loops is not None:
                loops.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loops
            await judge.close(app)
            running: Backend = app.state.backend
            app.state.backend = None
            await running.aclose()
            store = getattr(app.state, "store", None)
            if store is not None:
                store.close()
                app.state.store = None

    app = FastAPI(
        title="veriloop",
        version=veriloop.__version__,
        lifespan=lifespan,
        description="Runs, trees and trajectories of code-generation agents; an OpenAI-compatible endpoint.",
    )
    app.state.settings = settings
    app.state.backend = None
    app.state.store = None
    install_error_handlers(app)

    @app.get("/health", tags=["service"])
    async def health(request: Request) -> dict[str, Any]:
        """Liveness and readiness for probes: answers once the backend is up, never needs the token."""
        running: Backend | None = request.app.state.backend
        return {
            "status": "ok" if running is not None else "starting",
            "version": veriloop.__version__,
            "backend": running.name if running is not None else settings.llm.backend,
            "model": running.model_id if running is not None else settings.llm.model,
        }

    app.include_router(openai_api.router, prefix="/v1")
    app.include_router(api.router, prefix="/api")
    judge.install(app, settings)
    body_limit = int(settings.judge.max_body_mb * (1 << 20))
    sandbox_fusion.install(app, body_limit)  # verl / SandboxFusion's client: /api/sandbox-fusion/run_code, ...
    openrlhf.install(app, body_limit)  # OpenRLHF's remote reward: /api/openrlhf/get_reward
    app.include_router(dashboard.router)
    token = api_token(settings)
    if token:
        app.add_middleware(BearerTokenMiddleware, token=token, open_paths=OPEN_PATHS)
        sandbox_fusion.install_credentials(app, [sandbox_fusion.PREFIX, openrlhf.PREFIX])  # the token in the URL
    return app
