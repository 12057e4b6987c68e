"""`veriloop bench alphaverus_pools`: does AlphaVerus's solved pool from iteration k raise iteration k+1's solve rate?

Hints infill on DafnyBench hints-removed programs, verified by Dafny behind the spec guard:

    split      the `2 x --tasks` shortest programs that pass the hints filter (the first `--scan` of the data
               file), alternately into a train and a held-out half (the rule is fixed, never chosen by outcome)
    k = 0      Treefinement on the train half; each verified hint set joins the solved pool (`grow_pools`)
    k = 1      Treefinement on the held-out half twice, with the same seed and budget: without exemplars
               (`few_shot 0`, the baseline) and with up to `--few-shot` of iteration 0's verified hint sets as
               worked examples; neither held-out run adds to the pool, so both see exactly iteration 0's pool

The two held-out runs are compared task by task as `veriloop runs compare` does (Wilson intervals per run, the
paired bootstrap interval of the difference, McNemar's exact p). Every node lands in a store of its own
(`<home>/bench/alphaverus_pools/<stamp>.db`), so no earlier run's pool leaks in and the runs can be inspected
afterwards with `VERILOOP_STORE__URL=sqlite:///<that file> veriloop runs show RUN`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions
from veriloop.agents.alphaverus.pools import SOLVED
from veriloop.agents.context import AgentContext
from veriloop.agents.runner import with_provenance
from veriloop.bench import load_average
from veriloop.bench._parts import opened
from veriloop.bench.alphaverus import node_shares
from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Run, RunStatus, Task
from veriloop.sandbox import Sandbox
from veriloop.store import TrajectoryStore
from veriloop.store.figures import compare_runs
from veriloop.store.stats import wilson_interval
from veriloop.tasks import Suite


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="veriloop bench alphaverus_pools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", type=int, default=16, help="Programs per half (train and held-out).")
    parser.add_argument("--scan", type=int, default=200, help="DafnyBench programs read before the hints filter.")
    parser.add_argument("--few-shot", type=int, default=3, help="Most solved-pool exemplars in one held-out prompt.")
    parser.add_argument("--width", type=int, default=4, help="Tree width.")
    parser.add_argument("--depth", type=int, default=2, help="Tree depth (budget = width x depth LLM calls).")
    parser.add_argument("--max-tokens", type=int, default=128, help="New tokens per sample.")
    parser.add_argument("--verifier-seconds", type=float, default=90.0, help="Verifier seconds per search and task.")
    parser.add_argument("--prune-steps", type=int, default=8, help="Houdini pruning steps after a search (0 = off).")
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature.")
    parser.add_argument("--batch", type=int, default=16, help="llm.max_batch_size for the run.")
    parser.add_argument("--concurrency", type=int, default=8, help="Tasks searched at once.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(list(argv))
    if args.tasks < 1 or args.few_shot < 1:
        parser.error("--tasks and --few-shot must be at least 1")
    return args


def split(tasks: Sequence[Task], per_half: int) -> tuple[list[Task], list[Task]]:
    """The `2 x per_half` shortest programs, alternately train (even rank) and held-out (odd rank), so both
    halves span the same lengths."""
    shortest = sorted(tasks, key=lambda task: (len(task.prompt), task.id))[: 2 * per_half]
    return shortest[0::2], shortest[1::2]


async def solve_all(
    name: str,
    suite: Suite,
    tasks: Sequence[Task],
    options: AlphaVerusOptions,
    settings: Settings,
    store: TrajectoryStore,
    backend: Backend,
    sandbox: Sandbox,
    concurrency: int,
) -> dict[str, Any]:
    """One stored run: Treefinement on every task, `concurrency` at a time; what it solved and spent."""
    validated = options.model_dump(mode="json")
    run = Run(
        agent="alphaverus",
        suite=suite.name,
        model=backend.model_id,
        status=RunStatus.RUNNING,
        settings={
            "bench": "alphaverus_pools",
            "phase": name,
            "options": validated,
            "task_ids": [task.id for task in tasks],
        },
    )
    chosen = suite.select(ids=[task.id for task in tasks])
    run = store.create_run(
        with_provenance(run, settings, agent_module=AlphaVerusAgent.__module__, options=validated, suite=chosen)
    )
    ctx = AgentContext(settings=settings, backend=backend, sandbox=sandbox, store=store, run=run)
    agent = AlphaVerusAgent(options)
    gate = asyncio.Semaphore(concurrency)
    done = 0
    started = time.perf_counter()

    async def one(task: Task) -> Any:
        nonlocal done
        async with gate:
            attempt = await agent.solve(task, ctx)
        done += 1
        _log(f"  {name}: {done}/{len(tasks)} {task.id} {attempt.status} ({time.perf_counter() - started:.0f} s)")
        return attempt

    attempts = list(await asyncio.gather(*(one(task) for task in tasks)))
    wall = time.perf_counter() - started
    store.finish_run(run.id, RunStatus.FINISHED)
    solved = sorted(attempt.task_id for attempt in attempts if attempt.status == "passed")
    low, high = wilson_interval(len(solved), len(tasks))
    nodes = store.list_nodes(run.id)
    few_shot = [int(node.metadata.get("few_shot", 0)) for node in nodes if node.depth == 0 and node.completion]
    return {
        "run_id": run.id,
        "tasks": len(tasks),
        "solved": len(solved),
        "solved_rate": round(len(solved) / len(tasks), 4),
        "wilson_95": [round(low, 4), round(high, 4)],
        "solved_tasks": solved,
        "llm_calls": sum(int(attempt.budget.get("llm_calls", 0)) for attempt in attempts),
        "tokens": sum(int(attempt.budget.get("tokens", 0)) for attempt in attempts),
        "mean_exemplars_per_prompt": round(sum(few_shot) / len(few_shot), 2) if few_shot else 0.0,
        "wall_s": round(wall, 1),
        **node_shares(nodes),
    }


def bench_store(settings: Settings) -> tuple[Settings, Path]:
    """Settings whose store is a new SQLite file of this bench's own: the pool starts empty by construction."""
    path = settings.paths.home / "bench" / "alphaverus_pools" / f"{time.strftime('%Y%m%d-%H%M%S')}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    store = settings.store.model_copy(update={"url": f"sqlite:///{path}"})
    return settings.model_copy(update={"store": store}), path


async def run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from veriloop.tasks.dafny import load_dafnybench_hints

    llm = settings.llm.model_copy(update={"max_batch_size": args.batch})
    settings, db = bench_store(settings.model_copy(update={"llm": llm}))
    suite = load_dafnybench_hints(settings, scan=args.scan)
    train, held_out = split(suite.tasks, args.tasks)
    if len(held_out) < args.tasks:
        _log(f"only {len(train) + len(held_out)} hints programs in the first {args.scan}: halves of {len(held_out)}")
    result: dict[str, Any] = {
        "config": {**vars(args), "store": str(db), "suite": suite.version},
        "load_average_start": load_average(),
        "train_tasks": [task.id for task in train],
        "held_out_tasks": [task.id for task in held_out],
    }
    common = {
        "mode": "inference",
        "target": "dafny",
        "width": args.width,
        "depth": args.depth,
        "max_tokens": args.max_tokens,
        "verifier_seconds": args.verifier_seconds,
        "prune_steps": args.prune_steps,
        "temperature": args.temperature,
        "seed": args.seed,
        "infill": "hints",
    }
    partial = db.with_suffix(".json")
    async with opened(settings) as parts:
        store, sandbox, backend = parts.store, parts.sandbox, parts.backend
        result["config"]["model"] = backend.model_id
        started = time.perf_counter()
        store.upsert_tasks([*train, *held_out])
        phases = (
            ("iteration_0_train", train, AlphaVerusOptions(**common, few_shot=args.few_shot, grow_pools=True)),
            ("iteration_1_without_pool", held_out, AlphaVerusOptions(**common, few_shot=0, grow_pools=False)),
            ("iteration_1_with_pool", held_out, AlphaVerusOptions(**common, few_shot=args.few_shot, grow_pools=False)),
        )
        for name, tasks, options in phases:
            _log(f"{name}: {len(tasks)} programs")
            result[name] = await solve_all(
                name, suite, tasks, options, settings, store, backend, sandbox, args.concurrency
            )
            if name == "iteration_0_train":
                result["pool_after_iteration_0"] = len(store.list_exemplars(kind=SOLVED, language="dafny"))
            partial.write_text(json.dumps(result, indent=1, default=str))
        comparison = compare_runs(
            store, result["iteration_1_with_pool"]["run_id"], result["iteration_1_without_pool"]["run_id"]
        )
        result["held_out_with_minus_without"] = {
            "difference": comparison.difference,
            "paired_bootstrap_95": [comparison.low, comparison.high],
            "wins": comparison.wins,
            "losses": comparison.losses,
            "mcnemar_p": comparison.mcnemar_p,
        }
        result["wall_s"] = round(time.perf_counter() - started, 1)
        result["load_average_end"] = load_average()
        partial.write_text(json.dumps(result, indent=1, default=str))
    return result


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    return asyncio.run(run(settings, parse(argv)))
