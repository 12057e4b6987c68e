"""What every agent gets from its caller: backend, sandbox, store, settings and the run it belongs to."""

from __future__ import annotations

from dataclasses import dataclass

from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Run
from veriloop.sandbox import Sandbox
from veriloop.store import TrajectoryStore


@dataclass
class AgentContext:
    """Dependencies of one run; agents take everything from here and hold no globals."""

    settings: Settings
    backend: Backend
    sandbox: Sandbox
    store: TrajectoryStore
    run: Run
