"""Dependencies shared by the service's routers: the running backend, the settings and the store."""

from __future__ import annotations

import threading

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException

from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.store import TrajectoryStore

_STORE_LOCK = threading.Lock()


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def backend_of(request: Request) -> Backend:
    """The backend the app built at startup (one per process, shared by all requests so it can batch them)."""
    backend: Backend | None = getattr(request.app.state, "backend", None)
    if backend is None:
        raise HTTPException(503, "the inference backend is not running")
    return backend


def app_store(app: FastAPI) -> TrajectoryStore:
    """The app's store, opened on first use (so /v1 and /health work even before the database is migrated)."""
    store: TrajectoryStore | None = getattr(app.state, "store", None)
    if store is None:
        with _STORE_LOCK:
            store = getattr(app.state, "store", None)
            if store is None:
                store = TrajectoryStore.from_settings(app.state.settings)
                app.state.store = store
    return store


def store_of(request: Request) -> TrajectoryStore:
    return app_store(request.app)
