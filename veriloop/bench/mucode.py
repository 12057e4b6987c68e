"""`veriloop bench mucode`: pass@1 of μCode's inference modes and of one training round, on held-out tasks.

Every configuration is a stored run made by `agents/runner.py` (create_run / execute_run) with the
μCode agent, on the first `--tasks` problems of `humaneval-test` (held out; `--suite` to change):

* `single_turn`: greedy, first turn only (read off the multi-turn run: its first-turn reply, judged
  by every test);
* `multi_turn`: greedy, up to `--turns` turns with public-test feedback;
* `multi_turn_unstructured`: the same without the `structured` constraint (each reply one fenced block
  holding the task's function), so `reply_shapes` (`bench/_shapes.py`: candidates without a python block,
  with several blocks, whose code does not parse, without the task's function) shows what the constraint
  changes;
* `bon_pt`, `bon_lv`, `bon_pt_lv`, `bon_random`: multi-turn best-of-N (`--n` samples a turn at
  `--temperature`), selection by public tests, the learned verifier of the training round,
  100 x public + verifier, or at random;
* `after_training_multi_turn`: greedy multi-turn with the generator of one μCode round
  (`--train-suite`, first `--train-tasks` problems).

pass@1 is the share of tasks whose final code passes all tests (public and private), one search per
task. Best-of-N runs share one generation cache: two selection rules that reach the same
conversation reuse the same N samples (what they would sample anyway with the same seed), so the
rules differ only where their choices differ. The baseline is `single_turn`, measured in the same run;
ratios are against it. Training rounds are resumable: a rerun with the same options reuses the round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veriloop.bench._shapes import reply_shapes
from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Completion, Prompt, SamplingParams

KEYS = (
    "single_turn",
    "multi_turn",
    "multi_turn_unstructured",
    "bon_pt",
    "bon_lv",
    "bon_pt_lv",
    "bon_random",
    "after_training_multi_turn",
)


def _say(message: str) -> None:
    print(f"[bench mucode] {message}", file=sys.stderr, flush=True)


class CachedBackend:
    """Remembers completions by (prompt, params): identical requests of different runs are sampled once."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.cache: dict[str, list[Completion]] = {}
        self.hits = 0
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        keys = [self._key(prompt, params) for prompt in requests]
        missing = [index for index, key in enumerate(keys) if key not in self.cache]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = await self.inner.generate([requests[index] for index in missing], params)
            for index, completions in zip(missing, fresh, strict=True):
                self.cache[keys[index]] = completions
        return [self.cache[key] for key in keys]

    async def aclose(self) -> None:
        await self.inner.aclose()

    @staticmethod
    def _key(prompt: Prompt, params: SamplingParams) -> str:
        shown = prompt if isinstance(prompt, str) else [message.model_dump() for message in prompt]
        return json.dumps([shown, params.model_dump(mode="json")], sort_keys=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="veriloop bench mucode", description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="humaneval-test", help="Held-out suite.")
    parser.add_argument("--tasks", type=int, default=40, help="Held-out tasks (the suite's first N).")
    parser.add_argument("--train-suite", default="humaneval-train", help="Suite of the training round.")
    parser.add_argument("--train-tasks", type=int, default=32, help="Training tasks (the train suite's first N).")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--n", type=int, default=5, help="Best-of-N samples per turn.")
    parser.add_argument("--temperature", type=float, default=0.7, help="Best-of-N sampling temperature.")
    parser.add_argument("--history", default="full", choices=("full", "latest"))
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--rollouts", type=int, default=3, help="Rollouts per training task.")
    parser.add_argument("--rollout-temperature", type=float, default=0.7)
    parser.add_argument("--verifier-steps", type=int, default=30)
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--lora", action="store_true", help="LoRA adapters in the training round.")
    parser.add_argument(
        "--train-threads",
        type=int,
        default=None,
        help="Torch threads while the round's verifier and generator train (sampling keeps one beside the sandbox).",
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="Train the round's verifier and generator under bf16 autocast (fast with AVX512-BF16).",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="Episodes in flight at once.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partial", default="", help="Write the figures so far to this file after each stage.")
    parser.add_argument("--skip", default="", help="Comma-separated keys not to measure (reported as null).")
    return parser


def _repeat_rate(nodes: Sequence[Any]) -> tuple[int, int]:
    """(repair turns whose chosen code equals the previous turn's, repair turns) over one run's trees."""
    chosen: dict[str, dict[int, str]] = {}
    for node in nodes:
        if node.metadata.get("selected") and node.code is not None:
            chosen.setdefault(node.task_id, {})[int(node.metadata["turn"])] = node.code
    repeats = repairs = 0
    for turns in chosen.values():
        for turn, code in turns.items():
            if turn > 1 and turn - 1 in turns:
                repairs += 1
                repeats += int(code == turns[turn - 1])
    return repeats, repairs


def _reply_shapes(nodes: Sequence[Any], entry_points: dict[str, str]) -> dict[str, Any] | None:
    """Over generated candidates (generate and refine nodes): the shares without a python block, with several
    blocks, whose code does not parse, and without `def <entry_point>` (`bench._shapes`)."""
    return reply_shapes(nodes, ("generate", "refine"), "python", entry_points)


def _single_turn(nodes: Sequence[Any]) -> int:
    """Tasks whose first-turn reply passed every test (the episode ended at turn 1 with a passing final check)."""
    return sum(
        1
        for node in nodes
        if node.role == "final" and node.metadata.get("turn") == 1 and node.exec_result and node.exec_result.passed
    )


async def _measure(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from veriloop.agents.runner import create_run, execute_run
    from veriloop.llm import get_backend
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore

    skip = {key for key in args.skip.split(",") if key}
    results: dict[str, float | None] = dict.fromkeys(KEYS)
    runs: dict[str, str] = {}
    seconds: dict[str, float] = {}
    extra: dict[str, Any] = {}
    errors: dict[str, str] = {}
    common = {
        "turns": args.turns,
        "history": args.history,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "concurrency": args.concurrency,
    }
    from veriloop.tasks import load_suite

    held_out = load_suite(args.suite, settings).select(limit=args.tasks).tasks
    entry_points = {task.id: task.entry_point for task in held_out if task.entry_point}
    store = TrajectoryStore.from_settings(settings)
    sandbox = get_sandbox(settings)
    _say("loading the model")
    base: CachedBackend | None = CachedBackend(get_backend(settings))

    async def measure(
        name: str, options: dict[str, Any], backend: Any, suite: str, limit: int, model: Settings = settings
    ) -> tuple[str, int]:
        """One stored run; a failing configuration is reported (`errors`) and the others still run."""
        started = time.perf_counter()
        run = create_run(
            store, model, agent="mucode", suite=suite, options=options, limit=limit, extra={"bench": f"mucode:{name}"}
        )
        _say(f"{name}: run {run.id} on {suite}[:{limit}] with {options}")
        try:
            finished, attempts = await execute_run(settings, store, run.id, backend=backend, sandbox=sandbox)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
            _say(f"{name} failed: {errors[name]}")
            raise
        passed = sum(attempt.status == "passed" for attempt in attempts)
        seconds[name] = round(time.perf_counter() - started, 1)
        runs[name] = finished.id
        _say(f"{name}: {passed}/{len(attempts)} passed in {seconds[name]} s")
        return finished.id, passed

    def save_partial() -> None:
        if args.partial:
            payload = {"pass_at_1": results, "runs": runs, "seconds": seconds, "errors": errors, **extra}
            Path(args.partial).write_text(json.dumps(payload, indent=2, default=str) + "\n")

    verifier: str | None = None
    generator: str | None = None
    try:
        # Cheapest and most telling first; best-of-N (N samples a turn) last.
        if "multi_turn" not in skip:
            with contextlib.suppress(Exception):
                run_id, passed = await measure("multi_turn", {**common, "n": 1}, base, args.suite, args.tasks)
                results["multi_turn"] = passed / args.tasks
                nodes = store.list_nodes(run_id)
                results["single_turn"] = _single_turn(nodes) / args.tasks
                repeats, repairs = _repeat_rate(nodes)
                extra["multi_turn_repeats"] = {"repeated": repeats, "repair_turns": repairs}
                extra.setdefault("reply_shapes", {})["multi_turn"] = _reply_shapes(nodes, entry_points)
            save_partial()
        if "multi_turn_unstructured" not in skip:
            with contextlib.suppress(Exception):
                plain = {**common, "n": 1, "structured": False}
                run_id, passed = await measure("multi_turn_unstructured", plain, base, args.suite, args.tasks)
                results["multi_turn_unstructured"] = passed / args.tasks
                shapes = _reply_shapes(store.list_nodes(run_id), entry_points)
                extra.setdefault("reply_shapes", {})["multi_turn_unstructured"] = shapes
            save_partial()
        if "after_training_multi_turn" not in skip or not {"bon_lv", "bon_pt_lv"} <= skip:
            options = {
                **common,
                "n": 1,
                "train": True,
                "iterations": 1,
                "rollouts": args.rollouts,
                "rollout_temperature": args.rollout_temperature,
                "verifier_steps": args.verifier_steps,
                "sft_steps": args.sft_steps,
                "lora": args.lora,
                "train_threads": args.train_threads,
                "train_bf16": args.bf16,
            }
            with contextlib.suppress(Exception):
                await measure("training", options, base, args.train_suite, args.train_tasks)
            from veriloop.agents.mucode.state import MuCodeOptions
            from veriloop.agents.mucode.training import ITERATION_KIND, loop_key

            tasks = load_suite(args.train_suite, settings).select(limit=args.train_tasks).tasks
            key = loop_key(MuCodeOptions.model_validate(options), tasks, settings.llm.model)
            rounds = [e.payload for e in store.list_exemplars(kind=ITERATION_KIND) if e.payload.get("key") == key]
            if rounds:
                extra["training_round"] = rounds[-1]
                verifier, generator = rounds[-1]["verifier"], rounds[-1]["generator"]
            save_partial()
        if "after_training_multi_turn" not in skip and generator is not None:
            tuned = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": generator})})
            # Two models side by side (plus what training left) overran 24 GB once: the base goes first, and
            # best-of-N below loads it again.
            if base is not None:
                await base.aclose()
                base = None
            _say(f"loading the trained generator {generator}")
            trained = get_backend(tuned)
            try:
                with contextlib.suppress(Exception):
                    _, passed = await measure(
                        "after_training_multi_turn", {**common, "n": 1}, trained, args.suite, args.tasks, tuned
                    )
                    results["after_training_multi_turn"] = passed / args.tasks
            finally:
                await trained.aclose()
            extra["generator"] = generator
            save_partial()
        for name, rule in (("bon_pt", "pt"), ("bon_lv", "lv"), ("bon_pt_lv", "pt+lv"), ("bon_random", "random")):
            if name in skip:
                continue
            options = {**common, "n": args.n, "select": rule, "temperature": args.temperature}
            if rule in ("lv", "pt+lv"):
                if verifier is None:
                    errors[name] = "the training round trained no verifier"
                    continue
                options["verifier_model"] = verifier
            if base is None:
                _say("loading the model again")
                base = CachedBackend(get_backend(settings))
            with contextlib.suppress(Exception):
                _, passed = await measure(name, options, base, args.suite, args.tasks)
                results[name] = passed / args.tasks
            extra["bon_cache"] = {"hits": base.hits, "misses": base.misses}
            save_partial()
        extra["verifier"] = verifier
    finally:
        if base is not None:
            await base.aclose()
        await sandbox.aclose()
        store.close()
    return {"pass_at_1": results, "runs": runs, "seconds": seconds, "errors": errors, **extra}


def table(pass_at_1: dict[str, float | None], n_tasks: int) -> str:
    """The plain table: one row per configuration, the pass count and rate."""
    lines = [f"{'configuration':<28} {'passed':>8} {'pass@1':>8}"]
    for key in KEYS:
        value = pass_at_1.get(key)
        shown = ("-", "-") if value is None else (f"{round(value * n_tasks)}/{n_tasks}", f"{value:.3f}")
        lines.append(f"{key:<28} {shown[0]:>8} {shown[1]:>8}")
    return "\n".join(lines)


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    measured = asyncio.run(_measure(settings, args))
    pass_at_1 = measured["pass_at_1"]
    baseline = pass_at_1.get("single_turn")
    ratios = {
        key: (None if value is None or not baseline else round(value / baseline, 3)) for key, value in pass_at_1.items()
    }
    rendered = table(pass_at_1, args.tasks)
    print(rendered, file=sys.stderr, flush=True)
    return {
        "benchmark": "mucode",
        "model": settings.llm.model,
        "n_tasks": args.tasks,
        "held_out": f"{args.suite}[:{args.tasks}]",
        "train": f"{args.train_suite}[:{args.train_tasks}]",
        "settings": {key: value for key, value in vars(args).items()},
        "llm": {"max_batch_size": settings.llm.max_batch_size, "torch_threads": settings.llm.torch_threads},
        **measured,
        "ratio_to_single_turn": ratios,
        "total_seconds": round(time.perf_counter() - started, 1),
        "table": rendered,
    }
