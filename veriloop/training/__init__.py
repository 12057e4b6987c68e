"""Training on stored trajectories: datasets, DPO-family losses, SFT, reward models, PRM, Q-RM.

`train(spec, settings)` runs one method and registers the result as a checkpoint in the store; the
embedded backend then serves it as `checkpoint:ID`. Heavy imports (torch, transformers, TRL) happen
inside the trainers, so importing this package stays cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from veriloop.config import Settings
from veriloop.errors import ConfigError

if TYPE_CHECKING:
    from veriloop.training.common import Progress, TrainResult, TrainSpec

METHODS: dict[str, str] = {
    "sft": "supervised fine-tuning on prompt/completion rows (TRL SFTTrainer), optional label smoothing",
    "dpo": "preference optimisation; --loss sigmoid|ipo on TRL DPOTrainer, epa|ns_dpo on the plain loop",
    "rm": "scalar reward model: Bradley-Terry + L2 on preference rows (--loss bt) or BCE on verifier rows (bce)",
    "prm": "process reward model on stepwise rows (prompt/completions/labels)",
    "qrm": "Q-RM token-level reward model from preference pairs",
    "reinforce": "REINFORCE with Q-RM token rewards (--option qrm=checkpoint:ID) on prompts of any export",
    "grpo": "GRPO (TRL GRPOTrainer) rewarded by veriloop's judge, on task rows or a suite's tasks",
}


def trainer_for(
    method: str, loss: str | None, engine: str | None
) -> Callable[[TrainSpec, Settings, Progress | None], TrainResult]:
    """The function that trains `method` (with `loss`, on `engine`: trl or loop, where both exist)."""
    from veriloop.training import loops, trl_trainers

    if method == "sft":
        return trl_trainers.train_sft
    if method == "dpo":
        chosen_loss = loss or "sigmoid"
        if engine == "trl" and chosen_loss not in trl_trainers.TRL_DPO_LOSSES:
            raise ConfigError(f"loss {chosen_loss!r} runs on the plain loop only; drop --engine trl")
        if engine == "loop" or chosen_loss not in trl_trainers.TRL_DPO_LOSSES:
            return loops.train_preference_loop
        return trl_trainers.train_dpo
    if method == "rm":
        return loops.train_reward_model
    if method == "prm":
        return loops.train_prm
    if method == "qrm":
        return loops.train_qrm
    if method == "reinforce":
        return loops.train_reinforce
    if method == "grpo":
        from veriloop.training.grpo import train_grpo

        return train_grpo
    raise ConfigError(f"unknown training method {method!r}; choose one of: {', '.join(METHODS)}")


def default_out(settings: Settings, spec: TrainSpec) -> Path:
    """A folder named after what is trained (method, data, base, options, not steps): rerunning resumes."""
    data = spec.data
    if data.is_file():
        stamp = hashlib.sha256(data.read_bytes()).hexdigest()
    else:
        stamp = json.dumps(sorted((str(p.relative_to(data)), p.stat().st_size) for p in data.rglob("*") if p.is_file()))
    key = json.dumps(
        [spec.method, str(data.resolve()), stamp, spec.model, spec.lora, spec.lora_rank, spec.max_length, spec.options],
        sort_keys=True,
        default=str,
    )
    return settings.paths.home / "checkpoints" / f"{spec.method}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def train(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """Run one training and register its checkpoint."""
    if spec.steps < 1:
        raise ConfigError("--steps must be at least 1")
    if not spec.data.exists():
        raise ConfigError(f"dataset {spec.data} does not exist")
    loss = spec.options.get("loss")
    engine = spec.options.get("engine")
    run = trainer_for(spec.method, str(loss) if loss else None, str(engine) if engine else None)
    return run(spec, settings, progress)
