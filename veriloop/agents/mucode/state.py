"""μCode's options and the state its graph passes between nodes.

One episode (one task) is a multi-turn environment: at each turn N replies are sampled from the
history, their public tests run, one is selected (`pt`, `lv`, `pt+lv` = 100 x public pass +
verifier score, or `random`), and the episode ends when it passes the public tests or after
`turns` turns; the private (full) tests then decide the attempt.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Self, TypedDict

from pydantic import AliasChoices, ConfigDict, Field, model_validator

from veriloop.agents.base import AgentOptions
from veriloop.agents.common import Check
from veriloop.agents.mucode.prompts import Exchange
from veriloop.records import Completion, Message, Task

Selection = Literal["pt", "lv", "pt+lv", "random"]
History = Literal["full", "latest"]


LEARNED: tuple[Selection, ...] = ("lv", "pt+lv")
"""Selections that need a learned verifier."""


def _schema(schema: dict[str, Any]) -> None:
    """The JSON schema says what validation does: the old names `n` and `select` (one spelling per option), and a
    learned selection only with a verifier model or `train` (`_verifier_for_lv`)."""
    properties = schema["properties"]
    for old, new in (("n", "samples"), ("select", "selection")):
        properties[old] = {
            **properties[new],
            "title": old,
            "description": f"The old name of `{new}`.",
            "deprecated": True,
        }
    learned = {"enum": list(LEARNED)}
    schema["not"] = {
        "anyOf": [
            {"required": ["samples", "n"]},
            {"required": ["selection", "select"]},
            {
                "allOf": [
                    {
                        "anyOf": [
                            {"required": [name], "properties": {name: learned}} for name in ("selection", "select")
                        ]
                    },
                    {
                        "not": {
                            "required": ["verifier_model"],
                            "properties": {"verifier_model": {"type": "string", "minLength": 1}},
                        }
                    },
                    {"not": {"required": ["train"], "properties": {"train": {"const": True}}}},
                ]
            },
        ]
    }


class MuCodeOptions(AgentOptions):
    """Inference (multi-turn best-of-N) and training (expert iteration) knobs, as `veriloop run mucode` takes them."""

    model_config = ConfigDict(json_schema_extra=_schema)

    turns: int = Field(3, ge=1, le=10, description="Turns per episode at most (the paper uses 3).")
    samples: int = Field(
        1,
        ge=1,
        le=64,
        validation_alias=AliasChoices("samples", "n"),
        description="Candidates sampled per turn (multi-turn best-of-N).",
    )
    selection: Selection = Field(
        "pt",
        validation_alias=AliasChoices("selection", "select"),
        description="How a turn's candidate is chosen: public tests, learned verifier, both, or at random.",
    )
    verifier_model: str | None = Field(None, description="Learned verifier for lv/pt+lv: checkpoint:ID or a folder.")
    temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="First-turn sampling temperature; None: greedy for n=1, else 0.7."
    )
    repair_temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="Temperature of turns after the first; None: the first turn's."
    )
    history: History = Field("full", description="full: the whole conversation; latest: the last code only.")
    max_tokens: int = Field(384, ge=16, le=4096, description="New tokens per reply at most.")
    structured: bool = Field(
        True,
        description="Constrain each reply to one fenced code block (holding the task's function) by token masks "
        "in the backend; turn off for an OpenAI-compatible server that takes no regex constraint.",
    )
    seed: int = Field(0, description="Seeds sampling and random selection, so runs repeat.")
    # training (Algorithm 1)
    train: bool = Field(False, description="Run μCode's expert iteration on the suite instead of solving it.")
    iterations: int = Field(1, ge=1, le=20, description="Expert-iteration rounds M.")
    rollouts: int = Field(4, ge=1, le=64, description="Rollouts of the generator per training task and round.")
    rollout_temperature: float = Field(0.7, ge=0.0, le=2.0, description="Sampling temperature of the rollouts.")
    pairs_per_task: int = Field(32, ge=1, description="Bradley-Terry pairs drawn per problem with both labels.")
    relabel: int = Field(3, ge=0, description="Failed rollouts per problem relabelled with the expert's code.")
    expert_must_pass: bool = Field(
        True, description="Relabel only towards experts that pass the tests (off: the paper's argmax even if failing)."
    )
    verifier_steps: int = Field(40, ge=1, description="Optimiser steps of each round's verifier.")
    sft_steps: int = Field(40, ge=1, description="Optimiser steps of each round's generator fine-tuning.")
    sft_learning_rate: float = Field(2e-5, gt=0, description="Generator fine-tuning learning rate (full weights).")
    lora: bool = Field(
        False,
        description="Train LoRA adapters (merged into the saved checkpoints) for the verifier and the generator "
        "instead of every weight: full fine-tuning of a 0.5B model holds about 10 GB of optimiser state.",
    )
    lora_learning_rate: float = Field(1e-4, gt=0, description="Generator fine-tuning learning rate with --lora.")
    train_max_length: int = Field(512, ge=64, description="Tokens per training row at most.")
    train_bf16: bool = Field(
        False,
        description="bf16 autocast while the verifier and the generator train: about 1.7x faster on CPUs with "
        "avx512_bf16 or AMX, slower on others. Part of the loop's key when on (it rounds what is learned).",
    )
    train_threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Torch threads while the verifier and the generator train (nothing else runs then); "
        "None: llm.torch_threads. Not part of the loop's key: it changes the speed, not what is learned.",
    )

    @model_validator(mode="after")
    def _verifier_for_lv(self) -> Self:
        if self.selection in LEARNED and not self.verifier_model and not self.train:
            raise ValueError(f"--selection {self.selection} needs --verifier-model checkpoint:ID (a trained verifier)")
        return self

    @property
    def n(self) -> int:
        """The old name of `samples` (stored runs and API clients may still send `n`)."""
        return self.samples

    @property
    def select(self) -> Selection:
        """The old name of `selection` (stored runs and API clients may still send `select`)."""
        return self.selection

    def first_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 0.7

    def later_temperature(self) -> float:
        return self.repair_temperature if self.repair_temperature is not None else self.first_temperature()


@dataclass
class Sample:
    """One candidate of one turn: the reply, its code, the public tests' verdict and its scores."""

    node_id: str
    messages: list[Message]
    completion: Completion
    code: str
    public: Check | None = None
    verifier: float | None = None
    score: float = 0.0

    @property
    def public_passed(self) -> bool:
        return self.public is not None and self.public.passed


@dataclass
class Played:
    """A turn that was played: the selected sample and the feedback the next turn sees."""

    sample: Sample
    exchange: Exchange
    candidates: int = field(default=1)


class MuCodeState(TypedDict, total=False):
    """The graph's state for one episode."""

    task: Task
    rollout: int
    turn: int
    parent_id: str | None
    samples: list[Sample]
    chosen: Sample | None
    played: Annotated[list[Played], operator.add]
    tokens: Annotated[int, operator.add]
    final: Check | None
    final_node_id: str | None
