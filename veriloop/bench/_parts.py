"""The store, sandbox and backend a method benchmark runs on, opened together and always closed together."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veriloop.config import Settings
    from veriloop.llm.base import Backend
    from veriloop.sandbox import Sandbox
    from veriloop.store import TrajectoryStore


@dataclass
class Parts:
    store: TrajectoryStore
    sandbox: Sandbox
    backend: Backend


@contextlib.asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[Parts]:
    """Open the three from `settings`; on the way out close whichever opened (backend, sandbox, store), even when a
    later one failed to open or the benchmark raised, so no model, warm sandbox or database handle outlives it."""
    from veriloop.llm import get_backend
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore

    async with contextlib.AsyncExitStack() as stack:
        store = TrajectoryStore.from_settings(settings)
        stack.callback(store.close)
        sandbox = get_sandbox(settings)
        stack.push_async_callback(sandbox.aclose)
        backend = get_backend(settings)
        stack.push_async_callback(backend.aclose)
        yield Parts(store, sandbox, backend)
