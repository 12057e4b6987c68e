"""`veriloop bench f2strans`: computational accuracy and style of the F2STrans agent before and after one round
of functional + style training, for cpp->python and java->python, on the embedded model.

The baseline is measured in the same run: the same held-out functions (a seeded shuffle of the
UniTrans-cleaned TransCoder functions that have C++, Java and Python sides) are translated by the
base model, then one training round runs (functional SFT on the reference pairs of the other
functions plus the model's passing translations of them; then style DPO on pairs built from sampled
candidates of `--train-tasks` other functions, the reference competing), and the held-out functions
are translated again by the trained model. No held-out function is trained on. Progress goes to stderr.

`--shapes-only` skips training: the base model translates the held-out functions twice, with the `structured`
constraint and without it, and `reply_shapes` (`bench/_shapes.py`) gives the share of replies without a block in
the target language, with several blocks, whose code does not parse (or compile), and without the function
the prompt asks to keep.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError

DIRECTIONS = ("cpp->python", "java->python")


def _say(message: str) -> None:
    print(f"[bench f2strans] {message}", file=sys.stderr, flush=True)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="veriloop bench f2strans", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="Held-out functions per direction.")
    parser.add_argument("--train-tasks", type=int, default=24, help="Functions sampled for style pairs, per direction.")
    parser.add_argument("--samples", type=int, default=3, help="Sampled candidates per training function.")
    parser.add_argument("--turns", type=int, default=2, help="k of the evaluated agent (1 translation + k-1 repairs).")
    parser.add_argument("--max-tokens", type=int, default=256, help="New tokens per reply at most.")
    parser.add_argument("--batch", type=int, default=32, help="llm.max_batch_size of the embedded backend.")
    parser.add_argument("--concurrency", type=int, default=32, help="Functions in flight at once.")
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--dpo-steps", type=int, default=16)
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--max-pairs", type=int, help="Style pairs kept for DPO (default: all; fewer is faster).")
    parser.add_argument("--directions", default=",".join(DIRECTIONS), help="Comma-separated src->dst pairs.")
    parser.add_argument("--suite", default="transcoder")
    parser.add_argument("--work", type=Path, help="Folder for the store, data and checkpoints (default: temporary).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shapes-only",
        action="store_true",
        help="No training: translate the held-out functions with and without `structured`; report reply shapes.",
    )
    return parser.parse_args(argv)


def _directions(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        source, sep, target = item.strip().partition("->")
        if not sep or not source or not target:
            raise ConfigError(f"bad direction {item!r}; write it as cpp->python")
        pairs.append((source, target))
    return pairs


def _shapes(
    settings: Settings, tasks: list[Any], directions: list[tuple[str, str]], args: argparse.Namespace
) -> dict[str, Any]:
    """Reply shapes of the base model's translations of `tasks`, with and without the `structured` constraint."""
    from veriloop.agents.f2strans.prompts import FENCE, kept_name
    from veriloop.bench._shapes import reply_shapes
    from veriloop.store import TrajectoryStore
    from veriloop.tasks.transcoder import translation

    report: dict[str, Any] = {"tasks": len(tasks), "turns": args.turns, "max_tokens": args.max_tokens}
    for source, target in directions:
        names = {task.id: kept_name(translation(task, source, target).source_name) for task in tasks}
        shown: dict[str, Any] = {}
        for label, structured in (("structured", True), ("unstructured", False)):
            options = {
                "turns": args.turns,
                "max_tokens": args.max_tokens,
                "concurrency": args.concurrency,
                "linter": False,  # style is not reported here; the linters only cost time
                "structured": structured,
            }
            run_id, summary = asyncio.run(_translate(settings, tasks, source, target, options, label))
            with TrajectoryStore.from_settings(settings) as store:
                nodes = store.list_nodes(run_id)
            shapes = reply_shapes(nodes, ("translate", "repair"), FENCE.get(target, target), names)
            shown[label] = {
                **(shapes or {}),
                "computational_accuracy": summary["computational_accuracy"],
                "seconds": summary["seconds"],
                "run": run_id,
            }
            _say(f"{label} {source}->{target}: {shown[label]}")
        report[f"{source}->{target}"] = shown
    return report


async def _translate(
    settings: Settings, tasks: list[Any], source: str, target: str, options: dict[str, Any], label: str
) -> tuple[str, dict[str, Any]]:
    """One stored f2strans run over `tasks`; returns its id and summary."""
    from veriloop.agents.f2strans.data import summarize
    from veriloop.agents.runner import create_run, execute_run
    from veriloop.store import TrajectoryStore

    started = time.perf_counter()
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store,
            settings,
            agent="f2strans",
            suite=tasks[0].suite,
            options={"source": source, "target": target, **options},
            task_ids=[task.id for task in tasks],
            extra={"bench": label},
        )
        done = 0

        def tick(_: object) -> None:
            nonlocal done
            done += 1
            if done % 10 == 0 or done == len(tasks):
                _say(f"{label} {source}->{target}: {done}/{len(tasks)} ({time.perf_counter() - started:.0f} s)")

        _, attempts = await execute_run(settings, store, run.id, on_attempt=tick)
        summary = summarize(store, attempts)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    return run.id, summary


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    import torch

    from veriloop.agents.f2strans.data import functional_rows, nodes_of_runs, style_rows
    from veriloop.agents.f2strans.training import RoundSpec, train_round
    from veriloop.store import TrajectoryStore
    from veriloop.tasks import load_suite
    from veriloop.tasks.transcoder import has_direction

    torch.set_num_threads(1)
    args = _parse(argv)
    directions = _directions(args.directions)
    work = args.work or Path(tempfile.mkdtemp(prefix="veriloop-bench-f2strans-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = settings.model_copy(
        update={
            "store": settings.store.model_copy(update={"url": f"sqlite:///{work / 'bench.db'}"}),
            "llm": settings.llm.model_copy(update={"max_batch_size": args.batch}),
        }
    )
    started = time.perf_counter()
    suite = load_suite(args.suite, settings)
    pool = [task for task in suite.tasks if all(has_direction(task, s, t) for s, t in directions)]
    random.Random(args.seed).shuffle(pool)
    needed = args.n if args.shapes_only else args.n + args.train_tasks
    if len(pool) < needed:
        raise ConfigError(f"{args.suite} has {len(pool)} functions with every direction; need {needed}")
    held_out, others = pool[: args.n], pool[args.n :]
    if args.shapes_only:
        _say(f"{len(held_out)} held-out functions, reply shapes only; work dir {work}")
        shapes = _shapes(settings, held_out, directions, args)
        return {"reply_shapes": shapes, "seconds": round(time.perf_counter() - started, 1)}
    sampled = others[: args.train_tasks]
    _say(f"{len(held_out)} held-out functions, {len(others)} for training ({len(sampled)} sampled); work dir {work}")
    eval_options = {"turns": args.turns, "max_tokens": args.max_tokens, "concurrency": args.concurrency}
    sample_options = {
        "turns": 1,
        "samples": args.samples,
        "temperature": 0.8,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "seed": args.seed,
    }

    report: dict[str, Any] = {}
    for source, target in directions:
        _, before = asyncio.run(_translate(settings, held_out, source, target, eval_options, "before"))
        report[f"{source}->{target}"] = {"n": len(held_out), "before": before}
        _say(f"before {source}->{target}: CA {before['computational_accuracy']} style {before['style']}")

    sft: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    for source, target in directions:
        run_id, sample_summary = asyncio.run(_translate(settings, sampled, source, target, sample_options, "samples"))
        with TrajectoryStore.from_settings(settings) as store:
            nodes = nodes_of_runs(store, [run_id])
        sft += functional_rows(others, source, target, nodes)
        pairs += style_rows(sampled, source, target, nodes)
        report[f"{source}->{target}"]["training_samples"] = sample_summary
    random.Random(args.seed).shuffle(sft)
    random.Random(args.seed).shuffle(pairs)
    _say(f"training: {len(sft)} functional rows, {len(pairs)} style pairs")
    round_spec = RoundSpec(
        sft_steps=args.sft_steps,
        dpo_steps=args.dpo_steps,
        batch_size=args.train_batch,
        max_length=args.max_length,
        seed=args.seed,
        max_preference_rows=args.max_pairs,
    )
    train_started = time.perf_counter()

    def progress(step: int, total: int, metrics: dict[str, float]) -> None:
        _say(f"train step {step}/{total} loss {metrics.get('loss', 0.0):.4f}")

    training = train_round(settings, sft, pairs, work / "round-1", round_spec, progress=progress)
    training["seconds"] = round(time.perf_counter() - train_started, 1)
    trained = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": training["model"]})})
    for source, target in directions:
        _, after = asyncio.run(_translate(trained, held_out, source, target, eval_options, "after"))
        report[f"{source}->{target}"]["after"] = after
        _say(f"after {source}->{target}: CA {after['computational_accuracy']} style {after['style']}")
    report["training"] = training
    report["config"] = {
        "suite": f"{suite.name} ({suite.version})",
        "model": settings.llm.model,
        "turns": args.turns,
        "max_tokens": args.max_tokens,
        "samples": args.samples,
        "train_tasks": args.train_tasks,
        "sft_steps": args.sft_steps,
        "dpo_steps": args.dpo_steps,
        "train_batch": args.train_batch,
        "max_length": args.max_length,
        "max_pairs": args.max_pairs,
        "lora": True,
        "seed": args.seed,
        "style": "(similarity + lint)/2; similarity = mean(BLEU-4, keyword-weighted BLEU, AST subtree match); "
        "lint = 1/(1 + ruff findings per 10 lines)",
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report
