"""ReVISE's options and graph state: K trajectories per task, each a chain of attempts and decisions."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from pydantic import BaseModel, Field, field_validator

from veriloop.agents.checkpoint import CheckpointedOptions

Selection = Literal["confidence", "majority", "first"]


class ReviseOptions(CheckpointedOptions):
    """How ReVISE decodes one task."""

    samples: int = Field(4, ge=1, le=64, description="K trajectories sampled per task; the final answers vote.")
    temperature: float = Field(
        0.7, ge=0.0, le=2.0, description="Sampling temperature of attempts (K = 1 decodes greedily)."
    )
    max_refinements: int = Field(2, ge=0, le=8, description="Attempts after [refine] per trajectory at most.")
    selection: Selection = Field(
        "confidence",
        description="confidence: vote weighted by p([eos]) (ReVISE); majority: plain vote; first: trajectory 0.",
    )
    max_tokens: int = Field(320, ge=16, le=4096, description="New tokens per attempt at most.")
    seed: int = Field(0, description="Base seed; each task, trajectory and round derives its own.")
    structured: bool = Field(
        True,
        description="Constrain each attempt (first and refined) to one ```python block holding `def <entry_point>(` "
        "by token masks in the backend; the [eos]/[refine] decision is read from probabilities either way.",
    )
    # training: the two-stage curriculum on this run's trajectories (`curriculum.train_on_run`)
    train: bool = Field(False, description="Then train the curriculum (verify, then correct) on this run's attempts.")
    stage_steps: tuple[int, int] = Field(
        (20, 20),
        description="Optimiser steps of stage 1 and stage 2 (train).",
        json_schema_extra={"prefixItems": [{"type": "integer", "minimum": 1}] * 2},  # `_positive_steps`
    )
    lora: bool = Field(False, description="Train LoRA adapters (merged on save) instead of every weight (train).")

    @field_validator("stage_steps")
    @classmethod
    def _positive_steps(cls, steps: tuple[int, int]) -> tuple[int, int]:
        if min(steps) < 1:
            raise ValueError("each stage needs at least 1 step")
        return steps


class Trajectory(BaseModel):
    """One sampled chain: attempt, decision, (refined attempt, decision, ...)."""

    index: int
    transcript: str = Field("", description="The assistant turn so far: attempts and decision tokens.")
    attempt_ids: list[str] = Field(default_factory=list, description="Stored attempt nodes, in order.")
    verify_ids: list[str] = Field(default_factory=list, description="Stored decision nodes, in order.")
    codes: list[str] = Field(default_factory=list)
    passed: list[bool] = Field(default_factory=list, description="Tests' verdict on each attempt (never shown).")
    confidences: list[float] = Field(default_factory=list, description="p([eos]) among both decisions, per attempt.")
    decisions: list[str] = Field(default_factory=list, description="[eos] or [refine] after each attempt.")
    pending: str = Field("", description="Text of the attempt awaiting its decision.")
    done: bool = False
    tokens: int = 0

    @property
    def rounds(self) -> int:
        return len(self.attempt_ids)

    @property
    def confidence(self) -> float:
        """The final answer's confidence: p([eos]) at its decision."""
        return self.confidences[-1] if self.confidences else 0.0


class ReviseState(TypedDict, total=False):
    """The graph's state for one task."""

    prefix: str
    """The chat-templated prompt; every trajectory continues this text."""
    trajectories: list[dict[str, Any]]
    """The K trajectories as JSON (`Trajectory.model_dump()`): a node loads copies and returns them dumped."""
    selected: int
    """Index of the trajectory whose final attempt is the answer."""
    selected_node_id: str
