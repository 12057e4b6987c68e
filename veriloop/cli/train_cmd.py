"""`veriloop train METHOD --data PATH`: train on an export, register the checkpoint, serve it as `checkpoint:ID`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.errors import ConfigError

METHOD_NAMES = ("sft", "dpo", "rm", "prm", "qrm", "reinforce", "grpo")
DPO_VARIANTS = {"ipo": "ipo", "epa": "epa", "nsdpo": "ns_dpo", "radpo": None}
"""Names for DPO with a given loss (`dpo --loss ...`); `radpo` is DPO on reward-augmented pairs."""


def _reward_augmented(data: Path, folder: Path) -> Path:
    """The export's pairs reward-augmented (RA-DPO), written beside the checkpoint; an augmented export as is."""
    from veriloop.store.exports import load_rows, write_rows
    from veriloop.training.data import reward_augment

    rows = load_rows(data)
    if rows and "augmented" in rows[0]:
        return data  # `veriloop export preference --reward-augment` did it already
    missing = [column for column in ("chosen_score", "rejected_score") if rows and column not in rows[0]]
    if not rows or missing:
        raise ConfigError(f"radpo needs a preference export with chosen_score and rejected_score; {data} lacks them")
    return write_rows(reward_augment(rows), folder / "reward-augmented.jsonl", "jsonl")


def _suite_rows(settings: Any, data: Path) -> Path:
    """grpo: `--data SUITE` (a registered suite name) becomes the suite's tasks as rows under home."""
    from veriloop.store.exports import write_rows
    from veriloop.tasks import SUITES, load_suite
    from veriloop.training.grpo import task_rows

    if data.exists() or str(data) not in SUITES:
        return data
    rows = task_rows(load_suite(str(data), settings).tasks)
    if not rows:
        raise ConfigError(f"suite {data} has no tasks with tests to reward")
    return write_rows(rows, settings.paths.home / "grpo-data" / f"{data}.jsonl", "jsonl")


def _options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {pair!r} is not KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


@app.command("train")
def train_cmd(
    ctx: typer.Context,
    method: Annotated[
        str,
        typer.Argument(help=f"Training method: {', '.join(METHOD_NAMES)}; DPO variants: {', '.join(DPO_VARIANTS)}."),
    ],
    data: Annotated[
        Path, typer.Option("--data", help="An export: .jsonl, .parquet or a datasets folder (grpo: or a suite name).")
    ],
    model: Annotated[
        str | None, typer.Option("--model", help="Base model: the embedded default, a folder or checkpoint:ID.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Working folder; rerunning with it resumes (default under home).")
    ] = None,
    lora: Annotated[bool, typer.Option("--lora", help="Train LoRA adapters (merged into the saved weights).")] = False,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimiser steps.")] = 10,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Rows per step.")] = 2,
    max_length: Annotated[int, typer.Option("--max-length", min=16, help="Tokens per sequence at most.")] = 256,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate (a per-method default otherwise).")] = None,
    loss: Annotated[str | None, typer.Option("--loss", help="dpo: sigmoid, ipo, epa, ns_dpo; rm: bt, bce.")] = None,
    beta: Annotated[float | None, typer.Option("--beta", help="Preference temperature (dpo 0.1, qrm 0.2).")] = None,
    label_smoothing: Annotated[
        float | None, typer.Option("--label-smoothing", help="sft: smoothed CE factor; dpo: cDPO flip rate.")
    ] = None,
    save_every: Annotated[int, typer.Option("--save-every", min=1, help="Steps between resumable saves.")] = 5,
    bf16: Annotated[bool, typer.Option("--bf16", help="bf16 autocast (fast on CPUs with avx512_bf16/AMX).")] = False,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="Method knob KEY=VALUE (gamma, l2, qrm, engine, ...).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for shuffling, sampling and head init.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Train a model on an exported dataset and register the checkpoint in the store.

    `ipo`, `epa` and `nsdpo` are `dpo --loss ipo|epa|ns_dpo`; `radpo` is DPO on the preference export's
    pairs reward-augmented (each pair twice, conditioned on the chosen and on the rejected score).
    """
    from veriloop.training import METHODS, default_out, train
    from veriloop.training.common import TrainSpec, stderr_progress

    variant = method if method in DPO_VARIANTS else None
    if variant is not None:
        implied = DPO_VARIANTS[variant]
        if loss is not None and implied is not None and loss != implied:
            raise ConfigError(f"{variant} is dpo --loss {implied}; drop --loss {loss}")
        method, loss = "dpo", loss or implied
    if method not in METHODS:
        names = [*METHODS, *DPO_VARIANTS]
        raise ConfigError(f"unknown training method {method!r}; choose one of: {', '.join(names)}")
    options = _options(option or [])
    for key, value in (("loss", loss), ("beta", beta), ("label_smoothing", label_smoothing)):
        if value is not None:
            options[key] = value
    if variant == "radpo":
        options["reward_augmented"] = True
    settings = state(ctx).settings()
    if method == "grpo":
        data = _suite_rows(settings, data)
    spec = TrainSpec(
        method=method,
        data=data,
        out=out or Path(),
        model=model,
        lora=lora,
        steps=steps,
        batch_size=batch_size,
        learning_rate=lr,
        max_length=max_length,
        seed=seed,
        save_every=save_every,
        bf16=bf16,
        options=options,
    )
    if out is None:
        if not data.exists():
            raise ConfigError(f"dataset {data} does not exist")
        spec.out = default_out(settings, spec)
    if variant == "radpo":
        spec.data = _reward_augmented(data, spec.out)
    from veriloop.llm.embedded import set_torch_threads

    set_torch_threads(settings.llm.torch_threads)
    result = train(spec, settings, stderr_progress)
    report = dataclasses.asdict(result)
    report["serve"] = f"checkpoint:{result.model_id}" if result.model_id else None

    def render(_: object) -> None:
        typer.echo(f"trained {method} for {result.steps} steps; weights in {result.path}")
        for key in ("loss_first", "loss_last", "heldout_accuracy", "reward_accuracy_last"):
            if key in result.metrics and result.metrics[key] is not None:
                typer.echo(f"  {key}: {result.metrics[key]:.4g}")
        if result.model_id:
            typer.echo(f"registered: checkpoint:{result.model_id}")

    emit(report, as_json, render)
