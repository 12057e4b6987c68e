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


def _methods() -> dict[str, str]:
    from veriloop.training.configs import TRAINERS

    return {name: TRAINERS.load(name).summary for name in TRAINERS}


METHODS: dict[str, str] = _methods()
"""`veriloop train`'s methods and their one-line summaries (from `configs.TRAINERS`)."""


def trainer_for(
    method: str, loss: str | None, engine: str | None
) -> Callable[[TrainSpec, Settings, Progress | None], TrainResult]:
    """The function that trains `method` (with `loss`, on `engine`: trl or loop, where both exist)."""
    from veriloop.training.configs import TRAINERS, parse

    config_type = TRAINERS.load(method)
    options = {key: value for key, value in (("loss", loss), ("engine", engine)) if value is not None}
    return parse(config_type, method, options).trainer()


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
    from veriloop.training.configs import config_for

    run = config_for(spec).trainer()  # bad or misspelt options fail here, before any model is loaded
    from veriloop.training.common import spec_threads

    with spec_threads(spec) as threads:
        result = run(spec, settings, progress)
    result.metrics["torch_threads"] = threads  # a step's time means little without it
    return result
