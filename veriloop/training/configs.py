"""Each trainer's knobs as one typed, documented model, registered by method name (as backends are).

`veriloop train --option KEY=VALUE` hands text; `TrainSpec.options` may come from code as numbers. Either way
`config_for(spec)` validates it against the method's model: a misspelt knob or a bad value is a ConfigError
naming it, and trainers read typed attributes (`DPOConfig.of(spec).gamma`) instead of `float(options.get(...))`.
The model also picks the function that trains it (`trainer()`), so adding a trainer is one config class
plus one registry line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from veriloop.errors import ConfigError
from veriloop.registry import Registry

if TYPE_CHECKING:
    from veriloop.config import Settings
    from veriloop.training.common import Progress, TrainResult, TrainSpec

Trainer = Callable[["TrainSpec", "Settings", "Progress | None"], "TrainResult"]
FusedCE = Literal["auto"] | bool


class TrainerConfig(BaseModel, ABC):
    """Base of every trainer's knobs: strict, so `--option gama=0.9` is an error and not a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary: ClassVar[str] = ""
    """One line for `veriloop train --help` and the error listing the methods."""

    @classmethod
    def of(cls, spec: TrainSpec) -> Self:
        """The spec's options validated as this trainer's config."""
        return parse(cls, spec.method, spec.options)

    @abstractmethod
    def trainer(self) -> Trainer:
        """The function that trains with this config (each trainer's config names its own)."""


TrainerConfigT = TypeVar("TrainerConfigT", bound=TrainerConfig)


def parse(config_type: type[TrainerConfigT], method: str, options: dict[str, Any]) -> TrainerConfigT:
    try:
        return config_type.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"bad options for training method {method!r}: {problems}") from None


class SFTConfig(TrainerConfig):
    summary: ClassVar[str] = (
        "supervised fine-tuning on prompt/completion rows (TRL SFTTrainer), optional label smoothing"
    )

    label_smoothing: float = Field(0.0, ge=0.0, lt=1.0, description="Smoothed cross-entropy factor (0 = off).")
    fused_ce: FusedCE = Field(
        "auto", description="Fused linear cross-entropy: auto (on with label smoothing) or a bool."
    )

    def trainer(self) -> Trainer:
        from veriloop.training.trl_trainers import train_sft

        return train_sft


class DPOConfig(TrainerConfig):
    summary: ClassVar[str] = (
        "preference optimisation; --loss sigmoid|ipo on TRL DPOTrainer, epa|ns_dpo on the plain loop"
    )

    loss: Literal["sigmoid", "ipo", "epa", "ns_dpo"] = Field("sigmoid", description="The DPO-family loss.")
    engine: Literal["trl", "loop"] | None = Field(
        None, description="trl (DPOTrainer) or loop (the plain loop); default: trl where the loss exists there."
    )
    beta: float = Field(0.1, gt=0.0, description="Preference temperature.")
    label_smoothing: float = Field(0.0, ge=0.0, le=0.5, description="cDPO: assumed rate of flipped pairs.")
    precompute_ref: bool = Field(True, description="TRL: compute the reference log-probs once, before training.")
    gamma: float = Field(0.95, gt=0.0, le=1.0, description="ns_dpo: discount per day of a pair's age.")
    fused_ce: FusedCE = Field("auto", description="Loop: fused linear cross-entropy for sequence log-probs.")
    reward_augmented: bool = Field(False, description="The rows are RA-DPO pairs (recorded; set by `train radpo`).")

    def trainer(self) -> Trainer:
        from veriloop.training import loops, trl_trainers

        if self.engine == "trl" and self.loss not in trl_trainers.TRL_DPO_LOSSES:
            raise ConfigError(f"loss {self.loss!r} runs on the plain loop only; drop --engine trl")
        if self.engine == "loop" or self.loss not in trl_trainers.TRL_DPO_LOSSES:
            return loops.train_preference_loop
        return trl_trainers.train_dpo


class _HeldOut(TrainerConfig):
    eval_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="Share of rows held out for evaluation.")


class RMConfig(_HeldOut):
    summary: ClassVar[str] = (
        "scalar reward model: Bradley-Terry + L2 on preference rows (--loss bt) or BCE on verifier rows (bce)"
    )

    loss: Literal["bt", "bce"] = Field("bt", description="bt on preference rows, bce on verifier rows.")
    l2: float = Field(1e-3, ge=0.0, description="L2 penalty on the rewards (keeps them centred).")

    def trainer(self) -> Trainer:
        from veriloop.training.loops import train_reward_model

        return train_reward_model


class PRMConfig(_HeldOut):
    summary: ClassVar[str] = "process reward model on stepwise rows (prompt/completions/labels)"

    def trainer(self) -> Trainer:
        from veriloop.training.loops import train_prm

        return train_prm


class QRMConfig(_HeldOut):
    summary: ClassVar[str] = "Q-RM token-level reward model from preference pairs"

    beta: float = Field(0.2, gt=0.0, description="Scale of the mean token-score gap: -log sigma(beta * gap - gamma).")
    gamma: float = Field(2.0, ge=0.0, description="Margin the chosen score must clear over the rejected one.")

    def trainer(self) -> Trainer:
        from veriloop.training.loops import train_qrm

        return train_qrm


class ReinforceConfig(TrainerConfig):
    summary: ClassVar[str] = "REINFORCE with Q-RM token rewards (--option qrm=checkpoint:ID) on prompts of any export"

    qrm: str | None = Field(None, description="The Q-RM: checkpoint:ID or a folder (required).")
    gen_tokens: int = Field(48, ge=1, description="New tokens per sampled completion.")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature of the policy.")

    def trainer(self) -> Trainer:
        from veriloop.training.loops import train_reinforce

        return train_reinforce


class GRPOConfig(TrainerConfig):
    summary: ClassVar[str] = "GRPO (TRL GRPOTrainer) rewarded by veriloop's judge, on task rows or a suite's tasks"

    judge_url: str | None = Field(None, description="A remote judge (veriloop serve); default: one in this process.")
    judge_token: str | None = Field(None, description="Bearer token of the remote judge.")
    num_generations: int = Field(4, ge=2, description="Completions per prompt (advantages are relative to them).")
    reward: Literal["all_pass", "pass_rate"] = Field("all_pass", description="1 when all tests pass, or the pass rate.")
    partial_credit: bool = Field(False, description="Credit verified-but-incomplete programs.")
    security_weight: float = Field(0.0, ge=0.0, description="Weight of the judge's security findings (penalty).")
    max_completion_length: int = Field(64, ge=1, description="New tokens per completion.")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature of the completions.")
    beta: float = Field(0.0, ge=0.0, description="KL weight against the reference model (0 = no reference).")

    def trainer(self) -> Trainer:
        from veriloop.training.grpo import train_grpo

        return train_grpo


class ReviseStageConfig(TrainerConfig):
    summary: ClassVar[str] = "ReVISE curriculum stage: SFT on the chosen text + weighted DPO (agents/revise)"

    beta: float = Field(0.1, gt=0.0, description="Preference temperature of the DPO term.")
    dpo_weight: float = Field(0.1, ge=0.0, description="lambda: weight of the DPO term beside the SFT loss.")
    train_tokens: list[str] = Field(default_factory=list, description="Special tokens whose embeddings also train.")
    decision_tokens: list[str] = Field(
        default_factory=list,
        description="Tokens read as a choice among themselves, never generated ([eos]/[refine]): where one is "
        "a label, its log-prob is taken among them only, so training never lifts them into generated text.",
    )
    anchor_weight: float = Field(
        0.0,
        ge=0.0,
        description="Weight of an SFT term on the code of right attempts (rows with `passed` and `attempt`): "
        "it holds the model's code writing in place while LoRA learns what follows an attempt.",
    )
    run_id: str | None = Field(None, description="The run whose trajectories made the rows (recorded).")

    def trainer(self) -> Trainer:
        from veriloop.training.revise import train_sft_dpo

        return train_sft_dpo


TRAINERS: Registry[type[TrainerConfig]] = Registry(
    "training method",
    {
        "sft": "veriloop.training.configs:SFTConfig",
        "dpo": "veriloop.training.configs:DPOConfig",
        "rm": "veriloop.training.configs:RMConfig",
        "prm": "veriloop.training.configs:PRMConfig",
        "qrm": "veriloop.training.configs:QRMConfig",
        "reinforce": "veriloop.training.configs:ReinforceConfig",
        "grpo": "veriloop.training.configs:GRPOConfig",
    },
)
"""The methods `veriloop train` offers; ReVISE's stages (`revise-stage1/2`) validate with `ReviseStageConfig`."""


def config_for(spec: TrainSpec) -> TrainerConfig:
    """The spec's options validated by its method's config (an unknown method lists the known ones)."""
    return TRAINERS.load(spec.method).of(spec)
