"""`veriloop bench rft`: does one round of rejection-sampling fine-tuning raise the reward on held-out prompts?

Expert iteration (STaR, ReST-EM), the loop veriloop runs on its own trajectories, in one round:

    sample   the base model writes `--rollouts` completions of each train prompt at `--temperature`
    filter   the judge keeps those that pass every test; duplicates go, and each prompt keeps at most
             `--keep-per-prompt`, so the easy prompts do not fill the data
    train    `veriloop train sft` (LoRA, completion-only loss) on the kept rows for `--epochs` epochs

A kept row is what the model wrote up to and including the stop sequence where the judge stops reading (the
rollouts are sampled without stop strings for that). Cut before the stop, the row would end in the end-of-text
token TRL appends, a token the model never writes in this format: one round of that taught it everywhere, and at
temperature 1 samples ended mid-word (held-out reward 0.559 -> 0.370; bench/results/rft_qwen05b_eos_rows.json).

The harness is `bench._held_out`, the same as `bench grpo`'s. On Qwen2.5-Coder-0.5B, 16 rollouts of each of the 82
train prompts raised the held-out reward by +0.078 [0.038, 0.116] and greedy 45/82 -> 53/82; 4 rollouts left too few
passing rows to move it (bench/results/rft_qwen05b_16_rollouts.json, rft_qwen05b.json).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veriloop.bench import _held_out as held_out
from veriloop.config import Settings
from veriloop.records import Task
from veriloop.training.rewards import JudgeReward, cut_at_stop, through_stop

ROLLOUT_SEED_OFFSET = 100_000
"""Train prompts sample with seeds from here on, apart from the held-out prompts' seeds."""


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="veriloop bench rft",
        description=f"{__doc__}\n{held_out.HARNESS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    held_out.add_arguments(parser)
    parser.add_argument(
        "--rollouts", type=int, default=16, help="Completions sampled per train prompt (4 gave too few passing rows)."
    )
    parser.add_argument("--keep-per-prompt", type=int, default=4, help="Passing completions kept per prompt at most.")
    parser.add_argument("--epochs", type=float, default=2.0, help="Passes over the kept rows.")
    parser.add_argument("--batch-size", type=int, default=8, help="Rows per SFT step.")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="SFT learning rate (LoRA).")
    parser.add_argument("--max-length", type=int, default=512, help="Tokens per SFT row at most.")
    parser.add_argument("--train-threads", type=int, default=None, help="Torch threads while SFT trains.")
    parser.add_argument("--bf16", action="store_true", help="SFT under bf16 autocast; fast only with AVX512-BF16.")
    args = parser.parse_args(list(argv))
    if min(args.train_tasks, args.eval_tasks, args.samples, args.rollouts, args.keep_per_prompt, args.batch_size) < 1:
        parser.error("task counts, --samples, --rollouts, --keep-per-prompt and --batch-size must be at least 1")
    if args.epochs <= 0:
        parser.error("--epochs must be positive")
    return args


def kept_rows(tasks: Sequence[Task], judged: Sequence[Sequence[held_out.Judged]], keep: int) -> list[dict[str, Any]]:
    """SFT rows from the completions that passed every test: distinct ones, at most `keep` per prompt, each
    through its stop sequence (or whole, where the model ended it with no stop sequence)."""
    rows = []
    for task, samples in zip(tasks, judged, strict=True):
        seen: set[str] = set()
        for sample in samples:
            completion = through_stop(sample.text) or (sample.text if sample.ended else None)
            code = cut_at_stop(sample.text).rstrip()
            if sample.reward < 1.0 or completion is None or not code.strip() or code in seen or len(seen) >= keep:
                continue
            seen.add(code)
            rows.append({"prompt": task.prompt, "completion": completion, "task_id": task.id})
    return rows


def train(
    settings: Settings, tasks: Sequence[Task], args: argparse.Namespace, folder: Path, reward: JudgeReward
) -> dict[str, Any]:
    from veriloop.store.exports import write_rows
    from veriloop.training import default_out
    from veriloop.training import train as run_training
    from veriloop.training.common import TrainSpec, stderr_progress

    started = time.perf_counter()
    held_out.log(f"rollouts: {len(tasks)} train prompts x {args.rollouts}")
    judged = asyncio.run(
        held_out.judged_samples(
            settings,
            tasks,
            reward,
            n=args.rollouts,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            seed=args.seed + ROLLOUT_SEED_OFFSET,
            stop=(),
        )
    )
    rollout_s = time.perf_counter() - started
    rows = kept_rows(tasks, judged, args.keep_per_prompt)
    passing = sum(sample.reward >= 1.0 for row in judged for sample in row)
    if not rows:
        raise RuntimeError(f"none of the {len(tasks) * args.rollouts} rollouts passed every test: nothing to train on")
    steps = max(1, math.ceil(len(rows) * args.epochs / args.batch_size))
    held_out.log(f"kept {len(rows)} rows ({passing} passing rollouts); SFT {steps} steps")
    spec = TrainSpec(
        method="sft",
        data=write_rows(rows, folder / "sft-rows.jsonl", "jsonl"),
        out=Path(),
        lora=True,
        steps=steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        seed=args.seed,
        save_every=steps,
        threads=args.train_threads,
        bf16=args.bf16,
    )
    spec.out = default_out(settings, spec)
    trained = time.perf_counter()
    result = run_training(spec, settings, stderr_progress)
    return {
        "model_id": result.model_id,
        "rollouts": len(tasks) * args.rollouts,
        "passing_rollouts": passing,
        "prompts_with_a_pass": sum(any(sample.reward >= 1.0 for sample in row) for row in judged),
        "rows": len(rows),
        "steps": result.steps,
        "metrics": result.metrics,
        "rollout_s": round(rollout_s, 1),
        "sft_s": round(time.perf_counter() - trained, 1),
    }


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    return held_out.before_after(settings, parse(argv), "rft", train)
