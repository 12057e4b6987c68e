"""Self-improvement pools in the store's Exemplar table: solved pairs, error triplets and critic pairs.

Each round adds what survived its filters (with the round number); a round reads what earlier rounds of
the run (and every earlier run with the same target) produced, so exemplars seed the next prompts.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from veriloop.records import Exemplar
from veriloop.store import TrajectoryStore

SOLVED = "alphaverus.solved"
ERRORS = "alphaverus.error"
CRITIC = "alphaverus.critic"


def content_order(code: str) -> tuple[int, int, int]:
    """Fewest asserts, then fewest lines, then fewest characters (the original's intent, on contents)."""
    return code.count("assert"), code.count("\n"), len(code)


def sample_size(available: int, cap: int) -> int:
    """`min(cap, 3*len//4)` as the original samples; at least one once the pool has any."""
    return min(cap, max(1 if available else 0, 3 * available // 4))


class Pools:
    """The three pools of one target language as seen from round `iteration` of run `run_id`."""

    def __init__(self, store: TrajectoryStore, target: str, run_id: str) -> None:
        self.store = store
        self.target = target
        self.run_id = run_id

    def items(self, kind: str, iteration: int, exclude_task: str | None = None) -> list[dict[str, Any]]:
        """Payloads usable in round `iteration` (earlier rounds of this run, any round of other runs)."""
        usable = [
            exemplar.payload
            for exemplar in self.store.list_exemplars(kind=kind, language=self.target)
            if (exemplar.run_id != self.run_id or exemplar.iteration < iteration) and exemplar.task_id != exclude_task
        ]
        return usable

    def sample(
        self,
        kind: str,
        iteration: int,
        cap: int,
        rng: random.Random,
        exclude_task: str | None = None,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to `cap` random payloads (the original's `min(cap, 3*len//4)`), of those `keep` accepts."""
        pool = [item for item in self.items(kind, iteration, exclude_task) if keep is None or keep(item)]
        return rng.sample(pool, k=sample_size(len(pool), cap)) if cap else []

    def add(self, kind: str, iteration: int, task_id: str, payloads: Sequence[dict[str, Any]]) -> int:
        return self.store.add_exemplars(
            [
                Exemplar(
                    kind=kind,
                    language=self.target,
                    payload=dict(payload),
                    iteration=iteration,
                    run_id=self.run_id,
                    task_id=task_id,
                )
                for payload in payloads
            ]
        )
