"""`veriloop bench revise`: ReVISE pass@1 on a HumanEval slice: plain sampling, majority vote and
confidence-aware decoding before the curriculum, and confidence-aware decoding after it, in one run.

    M0    = the embedded model + [eos]/[refine] (embeddings resized, rows started from words)
    train = K samples per training task with M0, tested and stored            (run `revise` on the train slice)
    eval  = K trajectories per evaluation task with M0: first attempts give plain sampling (mean pass over
            the K) and majority vote (by normalised code); the agent's answer is confidence-aware decoding
    M2    = stage 1 (verify) then stage 2 (correct) on the training samples (LoRA, few steps)
    eval  = the same with M2: after_curriculum_confidence_aware

The slices are disjoint (stage 2 trains on reference solutions): evaluation takes every 5th HumanEval
task, training the next two after each. Each run is stored; run ids are in the output.

`--shapes-only` skips the curriculum: M0 answers the evaluation slice twice, with the `structured` constraint on
its attempts and without it, and `reply_shapes` (`bench/_shapes.py`) gives the share of attempts (first and
refined) without a python block, with several blocks, whose code does not parse, and without the task's
function. The [eos]/[refine] decisions are read from probabilities, never parsed, so they have no shape.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

from veriloop.config import Settings
from veriloop.store.stats import mcnemar_exact, paired_bootstrap_interval, wilson_interval


def _say(message: str) -> None:
    print(f"[bench revise] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="veriloop bench revise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-tasks", type=int, default=24, help="HumanEval tasks evaluated (every 5th).")
    parser.add_argument("--train-tasks", type=int, default=32, help="HumanEval tasks sampled for the curriculum.")
    parser.add_argument("--samples", type=int, default=4, help="K samples per task.")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--refinements", type=int, default=1, help="Refinements per trajectory at most.")
    parser.add_argument("--steps", type=int, nargs=2, default=[16, 16], help="Optimiser steps of stages 1 and 2.")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument(
        "--anchor-weight",
        type=float,
        default=1.0,
        help="Weight of the SFT term on right attempts' own code (0: the decisions and corrections only).",
    )
    parser.add_argument("--max-batch-size", type=int, default=16, help="Rows decoded together.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train-threads",
        type=int,
        default=1,
        help="Torch threads while the curriculum trains (sampling and evaluation keep 1 beside the sandbox).",
    )
    parser.add_argument(
        "--train-run",
        metavar="RUN_ID",
        help="Train on this stored, finished M0 run of the training slice instead of sampling it again "
        "(same tasks and options required): a curriculum that failed is retried without resampling.",
    )
    parser.add_argument(
        "--before-run",
        metavar="RUN_ID",
        help="Take M0's evaluation from this stored, finished run of the evaluation slice (same tasks and options).",
    )
    parser.add_argument(
        "--eval-stage1",
        action="store_true",
        help="Also evaluate M1 (after stage 1, verification only): how often it refines, and whether that helps.",
    )
    parser.add_argument(
        "--shapes-only",
        action="store_true",
        help="No curriculum: answer the evaluation slice with M0, with and without `structured`; report reply shapes.",
    )
    return parser.parse_args(argv)


def slices(ids: Sequence[str], eval_tasks: int, train_tasks: int) -> tuple[list[str], list[str]]:
    """(evaluation ids: every 5th task, training ids: the two after each of them), disjoint."""
    evaluation = [ids[i] for i in range(0, len(ids), 5)][:eval_tasks]
    training = [ids[i + j] for i in range(0, len(ids) - 2, 5) for j in (1, 2)][:train_tasks]
    return evaluation, training


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """P(score of a right attempt > score of a wrong one), ties half: the verifier's AUROC."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def run_metrics(store: Any, run_id: str, task_ids: Sequence[str]) -> dict[str, Any]:
    """pass@1 of sampling, majority and the agent's answer, plus how the decisions did, from the stored run."""
    from veriloop.agents.revise.graph import vote
    from veriloop.agents.revise.prompts import REFINE_TOKEN, normalize_code

    attempts = {attempt.task_id: attempt for attempt in store.list_attempts(run_id)}
    sampling, majority, answer = [], [], []
    right_conf: list[float] = []
    wrong_conf: list[float] = []
    refined = fixed = broken = trajectories = 0
    for task_id in task_ids:
        nodes = store.get_tree(run_id, task_id)
        first = sorted((n for n in nodes if n.role == "generate"), key=lambda n: n.metadata["trajectory"])
        passed = [bool(n.exec_result and n.exec_result.passed) for n in first]
        sampling.append(sum(passed) / len(passed))
        chosen, _ = vote([normalize_code(n.code or "") for n in first], [1.0] * len(first))
        majority.append(passed[chosen])
        answer.append(attempts[task_id].status == "passed")
        by_parent = {n.parent_id: n for n in nodes if n.role in ("verify", "refine")}
        for attempt in first:
            trajectories += 1
            decision = by_parent.get(attempt.id)
            if decision is None:
                continue
            ok = bool(attempt.exec_result and attempt.exec_result.passed)
            (right_conf if ok else wrong_conf).append(float(decision.score or 0.0))
            if decision.metadata["decision"] == REFINE_TOKEN:
                refined += 1
                child = by_parent.get(decision.id)
                now = bool(child is not None and child.exec_result and child.exec_result.passed)
                fixed += (not ok) and now
                broken += ok and not now
    n = len(task_ids)
    low, high = wilson_interval(sum(answer), n)
    return {
        "sampling": sum(sampling) / n,
        "majority": sum(majority) / n,
        "confidence_aware": sum(answer) / n,
        "confidence_aware_solved": sum(answer),
        "confidence_aware_wilson_95": [round(low, 4), round(high, 4)],
        "solved_tasks": [task_id for task_id, ok in zip(task_ids, answer, strict=True) if ok],
        "first_attempts_right": len(right_conf),
        "first_attempts_wrong": len(wrong_conf),
        "verification_auroc": auroc(right_conf, wrong_conf),
        "mean_confidence_right": sum(right_conf) / len(right_conf) if right_conf else None,
        "mean_confidence_wrong": sum(wrong_conf) / len(wrong_conf) if wrong_conf else None,
        "refined_share": refined / trajectories if trajectories else 0.0,
        "refinements_fixed": fixed,
        "refinements_broke": broken,
    }


def paired(before: dict[str, Any], after: dict[str, Any], task_ids: Sequence[str]) -> dict[str, Any]:
    """After minus before on the same tasks: the difference, its paired bootstrap interval and McNemar's p."""
    left = [float(task_id in set(after["solved_tasks"])) for task_id in task_ids]
    right = [float(task_id in set(before["solved_tasks"])) for task_id in task_ids]
    wins = sum(a > b for a, b in zip(left, right, strict=True))
    losses = sum(a < b for a, b in zip(left, right, strict=True))
    low, high = paired_bootstrap_interval(left, right)
    return {
        "difference": round((sum(left) - sum(right)) / len(task_ids), 4),
        "paired_bootstrap_95": [round(low, 4), round(high, 4)],
        "wins": wins,
        "losses": losses,
        "mcnemar_p": round(mcnemar_exact(wins, losses), 4),
    }


def stored_run(store: Any, run_id: str, model: str, task_ids: Sequence[str], options: dict[str, Any]) -> Any:
    """A finished stored run that answers exactly what this bench would have run: same model, tasks and options."""
    from veriloop.agents.base import make_agent
    from veriloop.errors import ConfigError

    run = store.get_run(run_id)
    wanted = make_agent("revise", options).options.model_dump(mode="json")
    problems = [
        f"{what} {have!r}, not {want!r}"
        for what, have, want in (
            ("agent", run.agent, "revise"),
            ("status", str(run.status), "finished"),
            ("model", run.model, model),
            ("task ids", run.settings.get("task_ids"), list(task_ids)),
            ("options", run.settings.get("options"), wanted),
        )
        if have != want
    ]
    if problems:
        raise ConfigError(f"run {run_id} cannot stand in for this bench's run: " + "; ".join(problems))
    return run


async def _execute(settings: Settings, store: Any, run_id: str, backend: Any) -> float:
    from veriloop.agents.runner import execute_run

    started = time.perf_counter()
    await execute_run(settings, store, run_id, backend=backend)
    return time.perf_counter() - started


def shapes_report(
    settings: Settings, store: Any, backend: Any, tasks: Sequence[Any], options: dict[str, Any]
) -> dict[str, Any]:
    """`backend`'s attempts on `tasks` with and without `structured`: reply shapes and pass@1 of each."""
    from veriloop.agents.runner import create_run
    from veriloop.bench._shapes import reply_shapes

    ids = [task.id for task in tasks]
    names = {task.id: task.entry_point for task in tasks if task.entry_point}
    report: dict[str, Any] = {"tasks": len(ids)}
    for label, structured in (("structured", True), ("unstructured", False)):
        run = create_run(
            store,
            settings,
            agent="revise",
            suite=tasks[0].suite,
            options={**options, "structured": structured},
            task_ids=ids,
            extra={"bench": f"revise:shapes:{label}"},
        )
        _say(f"{label}: {len(ids)} tasks (run {run.id})")
        seconds = asyncio.run(_execute(settings, store, run.id, backend))
        shapes = reply_shapes(store.list_nodes(run.id), ("generate", "refine"), "python", names)
        metrics = run_metrics(store, run.id, ids)
        report[label] = {
            **(shapes or {}),
            "pass_at_1": {key: metrics[key] for key in ("sampling", "majority", "confidence_aware")},
            "refined_share": metrics["refined_share"],
            "seconds": round(seconds, 1),
            "run": run.id,
        }
        _say(f"{label}: {report[label]}")
    return report


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    import torch

    from veriloop.agents.revise.curriculum import CurriculumSpec, run_curriculum
    from veriloop.agents.revise.prompts import DECISION_TOKENS
    from veriloop.agents.runner import create_run
    from veriloop.llm.embedded import EmbeddedBackend
    from veriloop.store import TrajectoryStore
    from veriloop.tasks import load_suite
    from veriloop.training.common import stderr_progress
    from veriloop.training.special_tokens import prepare_model

    args = parse(argv)
    torch.set_num_threads(1)
    settings = settings.model_copy(
        update={"llm": settings.llm.model_copy(update={"backend": "embedded", "max_batch_size": args.max_batch_size})}
    )
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    m0, m0_id = prepare_model(settings, DECISION_TOKENS)
    suite = load_suite("humaneval", settings)
    eval_ids, train_ids = slices([task.id for task in suite.tasks], args.eval_tasks, args.train_tasks)
    options = {
        "samples": args.samples,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "max_refinements": args.refinements,
        "selection": "confidence",
        "seed": args.seed,
    }
    m0_settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": str(m0)})})
    report: dict[str, Any] = {}
    if args.shapes_only:
        evaluated = [task for task in suite.tasks if task.id in set(eval_ids)]
        backend = EmbeddedBackend.from_settings(m0_settings)
        try:
            with TrajectoryStore.from_settings(settings) as store:
                shapes = shapes_report(m0_settings, store, backend, evaluated, options)
        finally:
            backend.close()
        config = {
            **vars(args),
            "command": " ".join(["veriloop bench revise", *argv]),
            "m0": m0_id,
            "eval_tasks": eval_ids,
        }
        return {"reply_shapes": shapes, "config": config, "seconds": round(time.perf_counter() - started, 1)}
    with TrajectoryStore.from_settings(settings) as store:
        given = {"train": (args.train_run, train_ids), "before": (args.before_run, eval_ids)}
        runs = {
            name: stored_run(store, run_id, str(m0), ids, options)
            if run_id
            else create_run(store, m0_settings, agent="revise", suite="humaneval", options=options, task_ids=ids)
            for name, (run_id, ids) in given.items()
        }
        fresh = [name for name, (run_id, _) in given.items() if not run_id]
        sampler = EmbeddedBackend.from_settings(m0_settings) if fresh else None
        try:
            for name in fresh:
                what = f"sampling {len(train_ids)} training tasks x {args.samples}" if name == "train" else "evaluating"
                _say(f"{what} with M0 ({m0}), run {runs[name].id}")
                key = "sample_train" if name == "train" else "eval_before"
                seconds[key] = asyncio.run(_execute(m0_settings, store, runs[name].id, sampler))
        finally:
            if sampler is not None:
                sampler.close()
        before = run_metrics(store, runs["before"].id, eval_ids)
        _say(f"before: {before}")
        tasks = {task.id: task for task in suite.tasks if task.id in set(train_ids)}
        spec = CurriculumSpec(
            base=str(m0),
            out=settings.paths.home / "checkpoints" / "revise-curriculum",
            steps=(args.steps[0], args.steps[1]),
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            max_length=args.max_length,
            anchor_weight=args.anchor_weight,
            seed=args.seed,
            threads=args.train_threads,
        )
        tick = time.perf_counter()
        curriculum = run_curriculum(settings, store, [runs["train"].id], tasks, spec, stderr_progress)
        seconds["curriculum"] = time.perf_counter() - tick
        stage1 = curriculum["stage1"]["path"]
        _say(f"curriculum: {round(seconds['curriculum'])} s, M1 {stage1}, M2 {curriculum['model']}")
        stages = [("after", curriculum["model"], "M2")]
        if args.eval_stage1:
            stages.insert(0, ("after_stage1", curriculum["stage1"]["path"], "M1"))
        measured: dict[str, dict[str, Any]] = {}
        for name, model, label in stages:
            tuned = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": str(model)})})
            runs[name] = create_run(store, tuned, agent="revise", suite="humaneval", options=options, task_ids=eval_ids)
            backend = EmbeddedBackend.from_settings(tuned)
            try:
                _say(f"evaluating {label} on {len(eval_ids)} tasks")
                seconds[f"eval_{name}"] = asyncio.run(_execute(tuned, store, runs[name].id, backend))
            finally:
                backend.close()
            measured[name] = run_metrics(store, runs[name].id, eval_ids)
            _say(f"{name}: {measured[name]}")
        after = measured["after"]
    seconds["total"] = time.perf_counter() - started
    report = {
        "n": len(eval_ids),
        "pass_at_1": {
            "sampling": before["sampling"],
            "majority": before["majority"],
            "confidence_aware": before["confidence_aware"],
            "after_curriculum_confidence_aware": after["confidence_aware"],
        },
        "before_curriculum": before,
        "after_curriculum": after,
        "after_minus_before": paired(before, after, eval_ids),
        **(
            {
                "after_stage1": measured["after_stage1"],
                "stage1_minus_before": paired(before, measured["after_stage1"], eval_ids),
            }
            if "after_stage1" in measured
            else {}
        ),
        "curriculum": {
            stage: {key: curriculum[stage][key] for key in ("rows", "kinds", "model_id", "metrics")}
            for stage in ("stage1", "stage2")
        },
        "config": {
            **vars(args),
            "command": " ".join(["veriloop bench revise", *argv]),
            "m0": m0_id,
            "eval_tasks": eval_ids,
            "train_tasks": train_ids,
        },
        "runs": {name: run.id for name, run in runs.items()},
        "seconds": {key: round(value, 1) for key, value in seconds.items()},
    }
    return report
