"""What a search may spend and what it spent: LLM calls, tokens, verifier calls, verifier seconds, wall time.

An LLM call is one sampled completion (a request for n samples counts n), so searches that batch their
samples differently still compare at equal budgets. Spend is kept per node (in `Node.metadata`) so a
resumed search recomputes it from what is stored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class Spend:
    """Running totals of one search."""

    llm_calls: int = 0
    tokens: int = 0
    verifier_calls: int = 0
    verifier_s: float = 0.0
    wall_s: float = 0.0

    def add(self, other: Spend) -> None:
        for item in fields(self):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))

    def as_dict(self) -> dict[str, float]:
        return {key: round(value, 4) if isinstance(value, float) else value for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Spend:
        names = {item.name for item in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})


@dataclass(frozen=True)
class Budget:
    """Limits of one search; None means no limit on that resource."""

    llm_calls: int | None = None
    tokens: int | None = None
    verifier_calls: int | None = None
    verifier_s: float | None = None
    wall_s: float | None = None

    def exhausted(self, spent: Spend) -> str | None:
        """The first resource spent up to its limit, or None while there is room."""
        for item in fields(self):
            limit = getattr(self, item.name)
            if limit is not None and getattr(spent, item.name) >= limit:
                return item.name
        return None

    def calls_left(self, spent: Spend) -> int | None:
        return None if self.llm_calls is None else max(0, self.llm_calls - spent.llm_calls)
