"""`veriloop bench grpo`: does GRPO with the judge's reward raise the reward on held-out prompts?

The harness is `bench._held_out` (before, train, after on HumanEval's two halves); the training here is
`veriloop train grpo` on `humaneval-train`: `--steps` steps, LoRA, `--num-generations` completions per prompt,
rewarded by the judge as the held-out samples are. GRPO's own per-step training reward is reported too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veriloop.bench import _held_out as held_out
from veriloop.config import Settings
from veriloop.records import Task
from veriloop.training.rewards import JudgeReward


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="veriloop bench grpo",
        description=f"{__doc__}\n{held_out.HARNESS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    held_out.add_arguments(parser)
    parser.add_argument("--steps", type=int, default=30, help="GRPO optimiser steps.")
    parser.add_argument("--batch-size", type=int, default=2, help="Prompts per GRPO step.")
    parser.add_argument("--num-generations", type=int, default=4, help="Completions per prompt in a GRPO group.")
    parser.add_argument("--learning-rate", type=float, default=1e-5, help="GRPO learning rate (LoRA).")
    args = parser.parse_args(list(argv))
    if min(args.train_tasks, args.eval_tasks, args.samples, args.steps) < 1 or args.num_generations < 2:
        parser.error("task counts, --samples and --steps must be at least 1, --num-generations at least 2")
    return args


def train(
    settings: Settings, tasks: Sequence[Task], args: argparse.Namespace, folder: Path, reward: JudgeReward
) -> dict[str, Any]:
    from veriloop.store.exports import write_rows
    from veriloop.training import default_out
    from veriloop.training import train as run_training
    from veriloop.training.common import TrainSpec, stderr_progress
    from veriloop.training.grpo import task_rows

    rows = write_rows(task_rows(tasks), folder / "train-rows.jsonl", "jsonl")
    spec = TrainSpec(
        method="grpo",
        data=rows,
        out=Path(),
        lora=True,
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        save_every=max(args.steps, 1),
        options={
            "num_generations": args.num_generations,
            "max_completion_length": args.max_tokens,
            "temperature": args.temperature,
            "reward": args.reward,
        },
    )
    spec.out = default_out(settings, spec)
    started = time.perf_counter()
    result = run_training(spec, settings, stderr_progress)
    rewards = [float(value) for value in result.metrics.get("rewards", [])]
    quarter = max(1, len(rewards) // 4)
    return {
        "model_id": result.model_id,
        "steps": result.steps,
        "wall_s": round(time.perf_counter() - started, 1),
        "train_rewards": rewards,
        "train_reward_first_quarter": round(statistics.fmean(rewards[:quarter]), 4) if rewards else None,
        "train_reward_last_quarter": round(statistics.fmean(rewards[-quarter:]), 4) if rewards else None,
        "losses": result.metrics.get("losses", []),
        "reward_calls": result.metrics.get("reward_calls"),
    }


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    return held_out.before_after(settings, parse(argv), "grpo", train)
