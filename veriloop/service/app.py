"""The service's FastAPI app: one backend per process, built at startup and closed at shutdown.

Routers are mounted here and nowhere else; each group of endpoints lives in its own module
(`openai_api` today). With `service.api_token` set, everything but `/health` needs the bearer token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request

import veriloop
from veriloop.config import Settings
from veriloop.llm.base import Backend, get_backend
from veriloop.service import openai_api
from veriloop.service.auth import BearerTokenMiddleware
from veriloop.service.http_errors import install_error_handlers


def create_app(settings: Settings, backend: Backend | None = None) -> FastAPI:
    """The app for `settings`; pass `backend` to serve one built elsewhere (the app closes it at shutdown)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.backend = backend if backend is not None else get_backend(settings)
        try:
            yield
        finally:
            running: Backend = app.state.backend
            app.state.backend = None
            await running.aclose()

    app = FastAPI(title="veriloop", version=veriloop.__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.backend = None
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
    if settings.service.api_token:
        app.add_middleware(BearerTokenMiddleware, token=settings.service.api_token, open_paths=["/health"])
    return app
