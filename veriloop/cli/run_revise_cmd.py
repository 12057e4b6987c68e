"""`veriloop run revise`: ReVISE self-verification with confidence-aware decoding over K samples, or (`--train`)
its two-stage curriculum on the trajectories of that run."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, state
from veriloop.cli.run_cmd import (
    ConcurrencyOption,
    ExecutorOption,
    LimitOption,
    TaskIdsOption,
    run_agent,
    run_app,
)


@run_app.command("revise")
def run_revise(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Task suite name.")] = "humaneval",
    samples: Annotated[int, typer.Option("--samples", min=1, max=64, help="K trajectories per task.")] = 4,
    refinements: Annotated[
        int, typer.Option("--refinements", min=0, max=8, help="Attempts after \\[refine] per trajectory at most.")
    ] = 2,
    selection: Annotated[
        str, typer.Option("--selection", help="confidence (ReVISE), majority, or first.")
    ] = "confidence",
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, max=2.0, help="Sampling temperature.")] = 0.7,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per attempt at most.")] = 320,
    seed: Annotated[int, typer.Option("--seed", help="Seed of sampling.")] = 0,
    train: Annotated[
        bool, typer.Option("--train", help="Then train the curriculum (verify, then correct) on this run's attempts.")
    ] = False,
    stage_steps: Annotated[
        tuple[int, int], typer.Option("--stage-steps", min=1, help="Optimiser steps of stage 1 and stage 2 (--train).")
    ] = (20, 20),
    lora: Annotated[bool, typer.Option("--lora/--full", help="Train LoRA adapters, or every weight (--train).")] = True,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Answer, self-verify with \\[eos] or \\[refine], refine on \\[refine], pick by the model's own confidence.

    The embedded model gets the decision tokens added (embeddings resized) the first time; a curriculum-trained
    checkpoint (`--model checkpoint:ID`) already has them. With --train (use a train split, e.g.
    --suite humaneval-train), the run's stored trajectories then become the curriculum's preference rows:
    stage 1 teaches \\[eos] after right answers and \\[refine] after wrong ones, stage 2 prefers refinements
    that fix the answer. Both checkpoints are registered; a rerun resumes an interrupted stage.
    """
    from veriloop.agents.runner import settings_for_run

    options = {
        "samples": samples,
        "max_refinements": refinements,
        "selection": selection,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "seed": seed,
        "concurrency": concurrency,
    }
    run, _ = run_agent(ctx, "revise", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
    if train:
        _train_curriculum(settings_for_run(state(ctx).settings(), run), run.id, stage_steps, lora)


def _train_curriculum(settings: Any, run_id: str, stage_steps: tuple[int, int], lora: bool) -> None:
    """Stage 1 and stage 2 on the run's stored attempts; the checkpoints' ids go to stderr."""
    from veriloop.agents.revise.curriculum import CurriculumSpec, run_curriculum
    from veriloop.agents.runner import suite_of
    from veriloop.store import TrajectoryStore
    from veriloop.training.common import stderr_progress

    with TrajectoryStore.from_settings(settings) as store:
        run = store.get_run(run_id)
        tasks = {task.id: task for task in suite_of(run, settings).tasks}
        spec = CurriculumSpec(
            base=settings.llm.model,
            out=settings.paths.home / "checkpoints" / f"revise-{run_id[:12]}",
            steps=stage_steps,
            lora=lora,
            options={"run_id": run_id},
        )
        try:
            report = run_curriculum(settings, store, [run_id], tasks, spec, stderr_progress)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--train") from error
    for stage in ("stage1", "stage2"):
        entry = report[stage]
        print(f"{stage}: {entry['rows']} rows {entry['kinds']} -> checkpoint:{entry['model_id']}", file=sys.stderr)
    print(f"use it with: veriloop --model checkpoint:{report['stage2']['model_id']} run revise ...", file=sys.stderr)
