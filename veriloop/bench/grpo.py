"""`veriloop bench grpo`: does GRPO with the judge's reward raise the reward on held-out prompts?

    before   the base model samples `--samples` completions of each held-out prompt (`humaneval-test`, the first
             `--eval-tasks`), the judge scores them (the reward GRPO trains on)
    train    `veriloop train grpo` on `humaneval-train` (the first `--train-tasks`): `--steps` steps, LoRA,
             `--num-generations` completions per prompt, the same reward
    after    the trained checkpoint samples the same prompts with the same seeds and is scored the same way

Prompts are HumanEval's code prefixes (signature and docstring) continued as raw text, as GRPO trains on them;
the candidate is the prefix plus the completion cut at HumanEval's stop sequences. Reported: the mean held-out
reward before and after with 95% bootstrap intervals over prompts, the paired bootstrap interval of the
difference (prompts resampled with both runs' samples together), the share of samples passing every test
(Wilson interval), and GRPO's own per-step training reward. No training step sees a held-out prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veriloop.bench import load_average
from veriloop.config import Settings
from veriloop.records import SamplingParams, Task
from veriloop.store.stats import bootstrap_interval, paired_bootstrap_interval, wilson_interval
from veriloop.training.rewards import STOP_SEQUENCES, JudgeReward, LocalJudge


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="veriloop bench grpo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train-tasks", type=int, default=32, help="First humaneval-train problems GRPO trains on.")
    parser.add_argument("--eval-tasks", type=int, default=40, help="First humaneval-test problems (held out).")
    parser.add_argument("--samples", type=int, default=8, help="Held-out completions per prompt, before and after.")
    parser.add_argument("--steps", type=int, default=30, help="GRPO optimiser steps.")
    parser.add_argument("--batch-size", type=int, default=2, help="Prompts per GRPO step.")
    parser.add_argument("--num-generations", type=int, default=4, help="Completions per prompt in a GRPO group.")
    parser.add_argument("--max-tokens", type=int, default=128, help="New tokens per completion (train and eval).")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (train and eval).")
    parser.add_argument("--learning-rate", type=float, default=1e-5, help="GRPO learning rate (LoRA).")
    parser.add_argument("--reward", choices=("pass_rate", "all_pass"), default="pass_rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(list(argv))
    if min(args.train_tasks, args.eval_tasks, args.samples, args.steps) < 1 or args.num_generations < 2:
        parser.error("task counts, --samples and --steps must be at least 1, --num-generations at least 2")
    return args


async def held_out_rewards(
    settings: Settings, tasks: Sequence[Task], reward: JudgeReward, args: argparse.Namespace
) -> list[list[float]]:
    """Per prompt, the reward of each of its `--samples` completions (an unjudgeable sample counts 0)."""
    from veriloop.llm import get_backend

    backend = get_backend(settings)
    try:
        params = [
            SamplingParams(
                n=args.samples,
                temperature=args.temperature,
                max_tokens=args.max_tokens,
                stop=list(STOP_SEQUENCES),
                seed=args.seed + index,
            )
            for index in range(len(tasks))
        ]
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(backend.generate([task.prompt], param) for task, param in zip(tasks, params, strict=True))
        )
        _log(f"  sampled {len(tasks)} x {args.samples} in {time.perf_counter() - started:.0f} s")
    finally:
        await backend.aclose()
    scores = []
    for task, [samples] in zip(tasks, replies, strict=True):
        texts = [sample.text for sample in samples]
        count = len(texts)
        columns: dict[str, Any] = {"tests": [task.tests] * count, "entry_point": [task.entry_point or ""] * count}
        rewards = await asyncio.to_thread(reward, [task.prompt] * count, texts, **columns)
        scores.append([0.0 if value is None else float(value) for value in rewards])
    return scores


def summary(scores: list[list[float]]) -> dict[str, Any]:
    means = [statistics.fmean(row) for row in scores]
    low, high = bootstrap_interval(means)
    passes = sum(value >= 1.0 for row in scores for value in row)
    samples = sum(len(row) for row in scores)
    p_low, p_high = wilson_interval(passes, samples)
    return {
        "mean_reward": round(statistics.fmean(means), 4),
        "bootstrap_95": [round(low, 4), round(high, 4)],
        "all_pass_samples": passes,
        "samples": samples,
        "all_pass_share": round(passes / samples, 4),
        "all_pass_wilson_95": [round(p_low, 4), round(p_high, 4)],
        "prompts_with_any_pass": sum(any(value >= 1.0 for value in row) for row in scores),
        "per_prompt_mean": [round(value, 4) for value in means],
    }


def train(settings: Settings, tasks: Sequence[Task], args: argparse.Namespace, folder: Path) -> dict[str, Any]:
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
    from veriloop.llm.embedded import set_torch_threads
    from veriloop.tasks import load_suite

    args = parse(argv)
    set_torch_threads(settings.llm.torch_threads)
    train_tasks = [task for task in load_suite("humaneval-train", settings).tasks if task.tests][: args.train_tasks]
    held_out = [task for task in load_suite("humaneval-test", settings).tasks if task.tests][: args.eval_tasks]
    overlap = {task.id for task in train_tasks} & {task.id for task in held_out}
    if overlap:
        raise RuntimeError(f"train and held-out prompts overlap: {sorted(overlap)[:3]}")
    folder = settings.paths.home / "bench" / "grpo" / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "config": {**vars(args), "model": settings.llm.model, "folder": str(folder)},
        "load_average_start": load_average(),
        "train_tasks": [task.id for task in train_tasks],
        "held_out_tasks": [task.id for task in held_out],
    }
    partial = folder / "result.json"
    started = time.perf_counter()
    judge = LocalJudge(settings)
    try:
        reward = JudgeReward(judge, mode=args.reward)
        _log(f"before: {len(held_out)} held-out prompts x {args.samples}")
        before = asyncio.run(held_out_rewards(settings, held_out, reward, args))
        result["before"] = summary(before)
        partial.write_text(json.dumps(result, indent=1))
        _log(f"before: mean reward {result['before']['mean_reward']}; training {args.steps} GRPO steps")
        result["training"] = train(settings, train_tasks, args, folder)
        partial.write_text(json.dumps(result, indent=1))
        tuned = settings.model_copy(
            update={"llm": settings.llm.model_copy(update={"model": f"checkpoint:{result['training']['model_id']}"})}
        )
        _log("after: the same prompts and seeds")
        after = asyncio.run(held_out_rewards(tuned, held_out, reward, args))
    finally:
        judge.close()
    result["after"] = summary(after)
    left = [statistics.fmean(row) for row in after]
    right = [statistics.fmean(row) for row in before]
    low, high = paired_bootstrap_interval(left, right)
    result["after_minus_before"] = {
        "mean_reward": round(statistics.fmean(left) - statistics.fmean(right), 4),
        "paired_bootstrap_95": [round(low, 4), round(high, 4)],
        "prompts_up": sum(a > b for a, b in zip(left, right, strict=True)),
        "prompts_down": sum(a < b for a, b in zip(left, right, strict=True)),
    }
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_average_end"] = load_average()
    partial.write_text(json.dumps(result, indent=1))
    return result
