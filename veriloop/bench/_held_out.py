"""The before/after harness the training benches share (`bench grpo`, `bench rft`), on held-out HumanEval prompts.

Private (underscored), so `veriloop bench` does not list it as a bench of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veriloop.bench import load_average
from veriloop.config import Settings
from veriloop.records import SamplingParams, Task
from veriloop.store.stats import bootstrap_interval, mcnemar_exact, paired_bootstrap_interval, wilson_interval
from veriloop.training.rewards import STOP_SEQUENCES, JudgeReward, LocalJudge

HARNESS = """How the bench measures:

    before   the base model samples `--samples` completions of each held-out prompt (`humaneval-test`, the first
             `--eval-tasks`) at `--temperature`, and one greedy completion; the judge scores each
    train    the bench's own training on `humaneval-train` (the first `--train-tasks`), which never sees a
             held-out prompt
    after    the trained checkpoint samples the same prompts with the same seeds and is scored the same way

Prompts are HumanEval's code prefixes (signature and docstring) continued as raw text; the candidate is the
prefix plus the completion cut at HumanEval's stop sequences. Reported: the mean held-out reward before and after
with 95% bootstrap intervals over prompts, the paired bootstrap interval of the difference, the share of samples
passing every test (Wilson interval), and the greedy completions' all-pass count with an exact McNemar test and the
prompts gained and lost. The greedy figure says whether a gain at `--temperature` is more than a sharper sampling
distribution.
"""

Train = Callable[[Settings, Sequence[Task], argparse.Namespace, Path, JudgeReward], dict[str, Any]]
"""A bench's training step: (settings, train tasks, args, working folder, reward) -> figures with `model_id`."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The held-out options every training bench shares."""
    parser.add_argument("--train-tasks", type=int, default=32, help="First humaneval-train problems to train on.")
    parser.add_argument("--eval-tasks", type=int, default=40, help="First humaneval-test problems (held out).")
    parser.add_argument("--samples", type=int, default=8, help="Held-out completions per prompt, before and after.")
    parser.add_argument("--max-tokens", type=int, default=128, help="New tokens per completion (train and eval).")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (train and eval).")
    parser.add_argument("--reward", choices=("pass_rate", "all_pass"), default="pass_rate")
    parser.add_argument("--seed", type=int, default=0)


@dataclass(frozen=True)
class Judged:
    """One completion and the judge's reward for it (an unjudgeable sample scores 0)."""

    text: str
    reward: float
    ended: bool = True
    """The model ended it (an end-of-text token or a stop string), rather than the token limit."""


async def judged_samples(
    settings: Settings,
    tasks: Sequence[Task],
    reward: JudgeReward,
    *,
    n: int,
    temperature: float,
    max_tokens: int,
    seed: int,
    stop: Sequence[str] = STOP_SEQUENCES,
) -> list[list[Judged]]:
    """Per prompt, `n` completions (prompt i sampled with seed `seed + i`, ended at `stop`) and their rewards; the
    judge reads each only up to HumanEval's first stop sequence, whatever `stop` is."""
    from veriloop.llm import get_backend

    backend = get_backend(settings)
    try:
        params = [
            SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, stop=list(stop), seed=seed + index)
            for index in range(len(tasks))
        ]
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(backend.generate([task.prompt], param) for task, param in zip(tasks, params, strict=True))
        )
        log(f"  sampled {len(tasks)} x {n} in {time.perf_counter() - started:.0f} s")
    finally:
        await backend.aclose()
    judged = []
    for task, [samples] in zip(tasks, replies, strict=True):
        texts = [sample.text for sample in samples]
        count = len(texts)
        columns: dict[str, Any] = {"tests": [task.tests] * count, "entry_point": [task.entry_point or ""] * count}
        rewards = await asyncio.to_thread(reward, [task.prompt] * count, texts, **columns)
        judged.append(
            [
                Judged(sample.text, 0.0 if value is None else float(value), sample.finish_reason != "length")
                for sample, value in zip(samples, rewards, strict=True)
            ]
        )
    return judged


async def held_out_rewards(
    settings: Settings, tasks: Sequence[Task], reward: JudgeReward, args: argparse.Namespace, *, greedy: bool = False
) -> list[list[float]]:
    """Per prompt, the reward of each of its `--samples` completions, or of its one greedy completion."""
    judged = await judged_samples(
        settings,
        tasks,
        reward,
        n=1 if greedy else args.samples,
        temperature=0.0 if greedy else args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    return [[sample.reward for sample in row] for row in judged]


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


def difference(after: list[list[float]], before: list[list[float]]) -> dict[str, Any]:
    """After minus before, per prompt, with the paired bootstrap interval over prompts."""
    left = [statistics.fmean(row) for row in after]
    right = [statistics.fmean(row) for row in before]
    low, high = paired_bootstrap_interval(left, right)
    return {
        "mean_reward": round(statistics.fmean(left) - statistics.fmean(right), 4),
        "paired_bootstrap_95": [round(low, 4), round(high, 4)],
        "prompts_up": sum(a > b for a, b in zip(left, right, strict=True)),
        "prompts_down": sum(a < b for a, b in zip(left, right, strict=True)),
    }


def greedy_comparison(after: list[list[float]], before: list[list[float]], ids: Sequence[str]) -> dict[str, Any]:
    """All-pass counts of the greedy completions before and after, Wilson intervals, exact McNemar, and which
    prompts changed (the ones to read to see what training taught)."""
    solved_after = [row[0] >= 1.0 for row in after]
    solved_before = [row[0] >= 1.0 for row in before]
    gained_ids = [id_ for id_, a, b in zip(ids, solved_after, solved_before, strict=True) if a and not b]
    lost_ids = [id_ for id_, a, b in zip(ids, solved_after, solved_before, strict=True) if b and not a]
    gained, lost = len(gained_ids), len(lost_ids)
    count = len(solved_before)
    return {
        "before_solved": sum(solved_before),
        "after_solved": sum(solved_after),
        "prompts": count,
        "before_wilson_95": [round(value, 4) for value in wilson_interval(sum(solved_before), count)],
        "after_wilson_95": [round(value, 4) for value in wilson_interval(sum(solved_after), count)],
        "gained": gained,
        "lost": lost,
        "mcnemar_p": round(mcnemar_exact(gained, lost), 4),
        "gained_tasks": gained_ids,
        "lost_tasks": lost_ids,
    }


def _measure(settings: Settings, tasks: Sequence[Task], reward: JudgeReward, args: argparse.Namespace) -> Any:
    sampled = asyncio.run(held_out_rewards(settings, tasks, reward, args))
    greedy = asyncio.run(held_out_rewards(settings, tasks, reward, args, greedy=True))
    return sampled, greedy


def before_after(settings: Settings, args: argparse.Namespace, name: str, train: Train) -> dict[str, Any]:
    """Measure the base model on the held-out prompts, run `train`, measure its checkpoint the same way."""
    from veriloop.llm.embedded import set_torch_threads
    from veriloop.tasks import load_suite

    set_torch_threads(settings.llm.torch_threads)
    train_tasks = [task for task in load_suite("humaneval-train", settings).tasks if task.tests][: args.train_tasks]
    held_out = [task for task in load_suite("humaneval-test", settings).tasks if task.tests][: args.eval_tasks]
    overlap = {task.id for task in train_tasks} & {task.id for task in held_out}
    if overlap:
        raise RuntimeError(f"train and held-out prompts overlap: {sorted(overlap)[:3]}")
    folder = settings.paths.home / "bench" / name / time.strftime("%Y%m%d-%H%M%S")
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
        log(f"before: {len(held_out)} held-out prompts x {args.samples}, and greedy")
        before, greedy_before = _measure(settings, held_out, reward, args)
        result["before"] = summary(before)
        partial.write_text(json.dumps(result, indent=1))
        log(f"before: mean reward {result['before']['mean_reward']}; training")
        result["training"] = train(settings, train_tasks, args, folder, reward)
        partial.write_text(json.dumps(result, indent=1))
        tuned = settings.model_copy(
            update={"llm": settings.llm.model_copy(update={"model": f"checkpoint:{result['training']['model_id']}"})}
        )
        log("after: the same prompts and seeds")
        after, greedy_after = _measure(tuned, held_out, reward, args)
    finally:
        judge.close()
    result["after"] = summary(after)
    result["after_minus_before"] = difference(after, before)
    result["greedy"] = greedy_comparison(greedy_after, greedy_before, [task.id for task in held_out])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_average_end"] = load_average()
    partial.write_text(json.dumps(result, indent=1))
    return result
