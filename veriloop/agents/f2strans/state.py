"""F2STrans's options and graph state (plain JSON values, so LangGraph's savers checkpoint it as is)."""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, model_validator

from veriloop.agents.checkpoint import CheckpointedOptions
from veriloop.errors import ConfigError
from veriloop.tasks.transcoder import EXTENSIONS


def _directions(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The JSON schema of `_direction`: source and target differ, counting an omitted one as its default."""
    source, target = (model.model_fields[name].default for name in ("source", "target"))
    schema["not"] = {
        "anyOf": [
            *(
                {"required": ["source", "target"], "properties": {"source": {"const": x}, "target": {"const": x}}}
                for x in EXTENSIONS
            ),
            {"required": ["source"], "not": {"required": ["target"]}, "properties": {"source": {"const": target}}},
            {"required": ["target"], "not": {"required": ["source"]}, "properties": {"target": {"const": source}}},
        ]
    }


class F2STransOptions(CheckpointedOptions):
    """One direction of translation, the repair budget and the sampling of the first turn."""

    model_config = ConfigDict(json_schema_extra=_directions)

    source: str = Field(
        "cpp",
        description="Language translated from: cpp, java, python, c, go, rust.",
        json_schema_extra={"enum": list(EXTENSIONS)},
    )
    target: str = Field(
        "python",
        description="Language translated to; its test program judges.",
        json_schema_extra={"enum": list(EXTENSIONS)},
    )
    turns: int = Field(3, ge=1, le=10, description="k: translate once, then repair with test feedback up to k-1 times.")
    samples: int = Field(1, ge=1, le=16, description="Candidates drawn in the first turn; repairs continue the best.")
    temperature: float = Field(
        0.0, ge=0.0, le=2.0, description="First-turn temperature (0.8 is used when 0 and samples>1)."
    )
    max_tokens: int = Field(384, ge=16, le=4096, description="New tokens per reply at most.")
    seed: int = Field(0, description="Sampling seed of the first turn.")
    structured: bool = Field(
        True,
        description="Constrain each reply to one block fenced in the target language (holding `def <name>(` for "
        "Python, the name the prompt asks to keep) by token masks in the backend; turn off for an "
        "OpenAI-compatible server that takes no regex constraint.",
    )
    linter: bool = Field(True, description="Lint every candidate for its style score (ruff, gcc, javac).")
    # training: one F2STrans round on this run's translations (`training.train_on_run`)
    train: bool = Field(
        False, description="Then train one round on this run: functional SFT, then style DPO (sample several)."
    )
    sft_steps: int = Field(30, ge=1, description="Functional SFT steps (train).")
    dpo_steps: int = Field(20, ge=1, description="Style DPO steps (train).")
    lora: bool = Field(False, description="Train LoRA adapters (merged on save) instead of every weight (train).")

    @model_validator(mode="after")
    def _direction(self) -> F2STransOptions:
        for side in (self.source, self.target):
            if side not in EXTENSIONS:
                raise ConfigError(f"unknown language {side!r}; choose one of: {', '.join(EXTENSIONS)}")
        if self.source == self.target:
            raise ConfigError("source and target languages must differ")
        return self


class TranslationState(TypedDict, total=False):
    """One task's episode: the conversation so far, the replies waiting for tests, the nodes stored."""

    task_id: str
    turn: int
    """Turns finished (a turn = one translate/repair request and the tests of its replies)."""
    messages: list[dict[str, str]]
    """The request of the coming turn (the first-turn prompt, then the repair conversation)."""
    pending: list[dict[str, Any]]
    """Completions of the current turn, as JSON, until `check` has tested and stored them."""
    parent_id: str | None
    node_ids: list[str]
    best_node_id: str | None
    passed: bool
    tokens: int
