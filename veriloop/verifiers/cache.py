"""The verification cache: a result is stored under a hash of everything that decides it.

The key covers the verifier's name, the tool's version, its options (time limits, whether the guard ran),
the candidate and the task's spec and tests, so a new tool version or a changed spec never reads a stale
verdict. Entries live in the store (table `verification_cache`), so every process sharing a database
shares them; a hit comes back marked `cache_hit=True`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.store import TrajectoryStore
from veriloop.verifiers.base import Verifier

UNCACHED = frozenset({VerifyStatus.INFRA_ERROR})
"""Infrastructure failures say nothing about the candidate: never stored."""


def cache_key(name: str, version: str, options: dict[str, Any], candidate: Candidate, task: Task) -> str:
    payload = {
        "verifier": name,
        "version": version,
        "options": options,
        "language": candidate.language,
        "code": candidate.code,
        "spec": task.spec,
        "tests": task.tests,
        "entry_point": task.entry_point,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class CachedVerifier:
    """Wraps a verifier: a stored result for the same key is returned without running the tool."""

    def __init__(self, inner: Verifier, store: TrajectoryStore) -> None:
        self.inner = inner
        self.store = store
        self.name = inner.name

    async def version(self) -> str:
        return await self.inner.version()

    def options(self) -> dict[str, Any]:
        return self.inner.options()

    async def key(self, candidate: Candidate, task: Task) -> str:
        return cache_key(self.name, await self.version(), self.options(), candidate, task)

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        started = time.perf_counter()
        key = await self.key(candidate, task)
        stored = await asyncio.to_thread(self.store.cache_get, key)
        if stored is not None:
            return stored.model_copy(update={"cache_hit": True, "duration_s": time.perf_counter() - started})
        result = await self.inner.verify(candidate, task)
        if result.status not in UNCACHED:
            await asyncio.to_thread(self.store.cache_put, key, result)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()
