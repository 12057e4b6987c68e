"""Several continuous batchers over one model, one per core: data parallelism inside one process.

On a CPU, one batcher decodes its rows on one core: its step is hundreds of small operations, and
splitting each across cores (`llm.torch_threads` > 1) makes every operation wait for the slowest
thread, which on shared cores is the one another process holds. Replicas split the rows instead:
each replica is a `ContinuousBatcher` with its own worker thread, slots, KV cache and prefix cache,
and all of them read the same weights (one `PackedDecoder`, whose fp16 copies are read-only). Torch
releases the GIL inside its kernels, so the replicas' steps run on separate cores at once; a busy
core slows its own replica only.

A prompt goes whole (all its samples) to the replica with the fewest samples in hand, the first one
on a tie, so one request at a time always runs on replica 0, exactly as a single batcher would.
Greedy outputs do not depend on the replica: each row's arithmetic is the same at every batch size.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Sequence
from dataclasses import fields

from veriloop.llm.batcher import ContinuousBatcher, RowOutput, SampleSpec, StepStats, TextListener
from veriloop.llm.packed import PackedDecoder

MIN_SLOTS_PER_REPLICA = 4
"""Fewer slots than this per replica would trade batching (cheap rows) for parallelism (a core each)."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def replica_count(requested: int, max_batch_size: int, *, threads: int = 1, cores: int | None = None) -> int:
    """`requested` replicas, or for 0 one per `threads` usable cores, each keeping `MIN_SLOTS_PER_REPLICA` slots."""
    if requested < 0:
        raise ValueError("replicas must be 0 (one per core) or more")
    if requested:
        return min(requested, max_batch_size)
    available = usable_cores() if cores is None else cores
    return max(1, min(available // max(threads, 1), max_batch_size // MIN_SLOTS_PER_REPLICA))


def split_slots(max_batch_size: int, replicas: int) -> list[int]:
    """`max_batch_size` slots over `replicas` batchers, as evenly as possible, the first ones larger."""
    base, extra = divmod(max_batch_size, replicas)
    return [base + (index < extra) for index in range(replicas)]


class BatcherReplicas:
    """Continuous batchers sharing one model; `submit` routes each prompt to the least-loaded one."""

    def __init__(self, replicas: Sequence[ContinuousBatcher]) -> None:
        if not replicas:
            raise ValueError("at least one batcher")
        self.replicas = list(replicas)
        self._lock = threading.Lock()
        self._unfinished: list[list[concurrent.futures.Future[RowOutput]]] = [[] for _ in self.replicas]

    def submit(
        self,
        prompt_ids: Sequence[int],
        samples: Sequence[SampleSpec],
        listeners: Sequence[TextListener | None] | None = None,
    ) -> list[concurrent.futures.Future[RowOutput]]:
        """`ContinuousBatcher.submit` on the replica with the fewest unfinished samples.

        A sample counts until its future is done, which it is before any caller waiting on it
        wakes: a caller that submits again after its answer sees the replica free.
        """
        with self._lock:
            for index, futures in enumerate(self._unfinished):
                self._unfinished[index] = [future for future in futures if not future.done()]
            chosen = min(range(len(self.replicas)), key=lambda index: len(self._unfinished[index]))
            futures = self.replicas[chosen].submit(prompt_ids, samples, listeners)
            self._unfinished[chosen].extend(futures)
        return futures

    def close(self, timeout: float | None = None) -> None:
        """Stop every replica; rows still queued or running fail with BackendError."""
        for replica in self.replicas:
            replica.close(timeout)

    @property
    def decoder(self) -> PackedDecoder:
        return self.replicas[0].decoder

    @property
    def max_batch_size(self) -> int:
        return sum(replica.max_batch_size for replica in self.replicas)

    @property
    def closed(self) -> bool:
        return all(replica.closed for replica in self.replicas)

    @property
    def active_rows(self) -> int:
        return sum(replica.active_rows for replica in self.replicas)

    @property
    def steps(self) -> int:
        """Forward steps of all replicas together (they run at the same time: not a wall-clock count)."""
        return sum(replica.steps for replica in self.replicas)

    @property
    def stats(self) -> StepStats:
        """Every replica's `StepStats` summed (its seconds are worker time, summed over the replicas)."""
        total = StepStats()
        for replica in self.replicas:
            for field in fields(StepStats):
                setattr(total, field.name, getattr(total, field.name) + getattr(replica.stats, field.name))
        return total

    @property
    def prefix_hits(self) -> int:
        return sum(replica.prefix_hits for replica in self.replicas)

    @property
    def speculative_prefills(self) -> int:
        return sum(replica.speculative_prefills for replica in self.replicas)

    @property
    def peak_rows(self) -> int:
        """The replicas' peaks summed: an upper bound on the most rows held at once."""
        return sum(replica.peak_rows for replica in self.replicas)

    def kv_bytes_per_token(self) -> float:
        return self.replicas[0].kv_bytes_per_token()
