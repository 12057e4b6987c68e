"""Verifiers (tests, Dafny, Nagini, Verus), their target descriptors, the spec guard and the verification cache.

`get_verifier(settings, name, store=...)` returns the verifier wrapped as configured: the spec guard around
the tool (formal verifiers only), the store-backed cache around both.
"""

from __future__ import annotations

from veriloop.config import Settings
from veriloop.store import TrajectoryStore
from veriloop.verifiers.base import (
    VERIFIERS,
    FormalVerifier,
    ReadingVerifier,
    RegisteredVerifier,
    ToolRun,
    Verifier,
    load_verifier,
    node_score,
    run_tool,
)
from veriloop.verifiers.cache import CachedVerifier, cache_key
from veriloop.verifiers.guard import GuardedVerifier, guarded
from veriloop.verifiers.target import VerifierTarget, verifier_target


def get_verifier(
    settings: Settings,
    name: str,
    *,
    store: TrajectoryStore | None = None,
    guard: bool | None = None,
    cache: bool | None = None,
) -> Verifier:
    """The verifier `name`, with the guard and the cache as the settings (or the arguments) say."""
    loaded = load_verifier(name, settings)
    verifier = guarded(loaded) if (settings.verifiers.guard if guard is None else guard) else loaded
    if store is not None and (settings.verifiers.cache if cache is None else cache):
        verifier = CachedVerifier(verifier, store)
    return verifier


__all__ = [
    "VERIFIERS",
    "CachedVerifier",
    "FormalVerifier",
    "GuardedVerifier",
    "ReadingVerifier",
    "RegisteredVerifier",
    "ToolRun",
    "Verifier",
    "VerifierTarget",
    "cache_key",
    "get_verifier",
    "load_verifier",
    "node_score",
    "run_tool",
    "verifier_target",
]
