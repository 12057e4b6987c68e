"""What every agent gets from its caller: backend, sandbox, store, settings and the run it belongs to."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Run
from veriloop.sandbox import Sandbox
from veriloop.store import TrajectoryStore
from veriloop.verifiers import Verifier


@dataclass
class AgentContext:
    """Dependencies of one run; agents take everything from here and hold no globals."""

    settings: Settings
    backend: Backend
    sandbox: Sandbox
    store: TrajectoryStore
    run: Run
    verifiers: dict[str, Verifier] = field(default_factory=dict)
    """The formal verifiers `common.check` opened for the run's tasks, by name: one each (a Nagini worker is
    warm once), closed with the context."""

    async def aclose(self) -> None:
        """Close the verifiers the run opened; the backend and the sandbox belong to whoever made them."""
        opened, self.verifiers = list(self.verifiers.values()), {}
        await asyncio.gather(*(verifier.aclose() for verifier in opened), return_exceptions=True)
