"""Dependencies shared by the service's routers: the running backend and the settings."""

from __future__ import annotations

from fastapi import Request
from starlette.exceptions import HTTPException

from veriloop.config import Settings
from veriloop.llm.base import Backend


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def backend_of(request: Request) -> Backend:
    """The backend the app built at startup (one per process, shared by all requests so it can batch them)."""
    backend: Backend | None = getattr(request.app.state, "backend", None)
    if backend is None:
        raise HTTPException(503, "the inference backend is not running")
    return backend
