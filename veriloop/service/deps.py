"""Dependencies shared by the service's routers: the backend, the settings, and token auth."""

from __future__ import annotations

import secrets

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


def require_token(request: Request) -> None:
    """When `service.api_token` is set, the request must carry `Authorization: Bearer <token>`."""
    expected = settings_of(request).service.api_token
    if not expected:
        return
    scheme, _, supplied = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(supplied.strip().encode(), expected.encode()):
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
