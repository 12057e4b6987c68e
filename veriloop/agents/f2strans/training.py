"""One F2STrans training round: functional SFT first, then style DPO on top of it (the paper's order).

Joint training is reported worse than "functionality first, style second", so the DPO stage starts
from the SFT checkpoint (`checkpoint:ID`) and its reference model is that checkpoint too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veriloop.agents.f2strans.state import F2STransOptions
from veriloop.config import Settings
from veriloop.records import Run, Task
from veriloop.store import TrajectoryStore
from veriloop.store.exports import Row, write_rows
from veriloop.training import train
from veriloop.training.common import Progress, TrainSpec


@dataclass
class RoundSpec:
    """Sizes of the round; LoRA and short runs keep it CPU-sized."""

    sft_steps: int = 30
    dpo_steps: int = 20
    batch_size: int = 4
    max_length: int = 384
    lora: bool = True
    lora_rank: int = 16
    sft_learning_rate: float | None = None
    dpo_learning_rate: float | None = None
    beta: float = 0.1
    seed: int = 0
    max_preference_rows: int | None = None
    """Keep only this many style pairs (the DPO steps see `dpo_steps * batch_size // 2` rows; TRL precomputes
    the reference log-probs of every row, so trimming cuts that cost). None keeps all."""


def train_round(
    settings: Settings,
    sft_rows: list[Row],
    preference_rows: list[Row],
    folder: Path,
    spec: RoundSpec | None = None,
    *,
    base: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """SFT on the functional rows, then DPO on the style pairs; returns the final model spec and metrics."""
    spec = spec or RoundSpec()
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"sft_rows": len(sft_rows), "preference_rows": len(preference_rows)}
    model = base
    if sft_rows:
        data = write_rows(sft_rows, folder / "functional.jsonl", "jsonl")
        done = train(
            TrainSpec(
                method="sft",
                data=data,
                out=folder / "sft",
                model=model,
                lora=spec.lora,
                lora_rank=spec.lora_rank,
                steps=spec.sft_steps,
                batch_size=spec.batch_size,
                learning_rate=spec.sft_learning_rate,
                max_length=spec.max_length,
                seed=spec.seed,
                save_every=max(spec.sft_steps, 1),
            ),
            settings,
            progress,
        )
        model = f"checkpoint:{done.model_id}"
        report["sft"] = {"model": model, "steps": done.steps, **_losses(done.metrics)}
    if spec.max_preference_rows is not None:
        preference_rows = preference_rows[: spec.max_preference_rows]
    if preference_rows:
        data = write_rows(preference_rows, folder / "style.jsonl", "jsonl")
        done = train(
            TrainSpec(
                method="dpo",
                data=data,
                out=folder / "dpo",
                model=model,
                lora=spec.lora,
                lora_rank=spec.lora_rank,
                steps=spec.dpo_steps,
                batch_size=max(1, spec.batch_size // 2),
                learning_rate=spec.dpo_learning_rate,
                max_length=spec.max_length,
                seed=spec.seed,
                save_every=max(spec.dpo_steps, 1),
                options={"beta": spec.beta},
            ),
            settings,
            progress,
        )
        model = f"checkpoint:{done.model_id}"
        report["dpo"] = {"model": model, "steps": done.steps, **_losses(done.metrics)}
    report["model"] = model
    return report


def _losses(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("loss_first", "loss_last", "reward_accuracy_last", "reward_margin_last")
    return {key: metrics[key] for key in keys if key in metrics}


def train_on_run(
    settings: Settings, store: TrajectoryStore, run: Run, tasks: Sequence[Task], options: F2STransOptions
) -> dict[str, Any]:
    """One round on a finished run's stored translations (what `train=True` does after solving).

    The checkpoints are registered; their ids and the next command go to stderr (a worker's log).
    """
    from veriloop.agents.f2strans.data import functional_rows, nodes_of_runs, style_rows
    from veriloop.training.common import stderr_progress

    nodes = nodes_of_runs(store, [run.id])
    sft = functional_rows(tasks, options.source, options.target, nodes)
    pairs = style_rows(tasks, options.source, options.target, nodes, linter=options.linter)
    print(f"training: {len(sft)} functional rows, {len(pairs)} style pairs", file=sys.stderr)
    folder = settings.paths.home / "checkpoints" / f"f2strans-{run.id[:12]}"
    spec = RoundSpec(sft_steps=options.sft_steps, dpo_steps=options.dpo_steps, lora=options.lora, seed=options.seed)
    report = train_round(settings, sft, pairs, folder, spec, progress=stderr_progress)
    for stage in ("sft", "dpo"):
        if stage in report:
            print(f"{stage}: {report[stage]['model']}", file=sys.stderr)
    if not pairs:
        print(
            "dpo: skipped (no style pairs: sample more candidates, e.g. --samples 4 --temperature 0.8)", file=sys.stderr
        )
    print(f"use it with: veriloop --model {report['model']} run f2strans ...", file=sys.stderr)
    return report
