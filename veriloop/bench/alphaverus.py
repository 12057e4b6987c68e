"""`veriloop bench alphaverus`: Treefinement against breadth, beam, best-of-N and linear refinement at equal budgets.

Three settings that run on this machine with the embedded model:
- `dafny_hints`: DafnyBench hints-removed programs (the shortest `--dafny-tasks`), verified by Dafny with the spec
  guard; solved programs then go through the exploit model and the equivalence judge (against the hints-removed
  program), whose rejections are counted;
- `humaneval_tests`: the first `--humaneval-tasks` HumanEval problems, judged by their tests in the sandbox
  (score = fraction of tests passed).
- `nagini_hints`: the bundled `nagini-hints` programs (the first `--nagini-tasks`), invariants filled in and
  verified by Nagini with the spec guard (no exploit model or judge: their prompts are Dafny-shaped).

Every search gets the same budget per task: `width x depth` LLM calls (one call = one sample) and
`--verifier-seconds` of verifier time, and stops at its first success. In hints mode a search that ends
unsolved is followed by Houdini pruning of its samples' hints (`--prune-steps` Dafny runs at most, no LLM call,
within the same verifier seconds): `solved` splits into `solved_by_search` and `solved_by_pruning`, and the node
shares count the model's samples only (`pruning_nodes` apart). Reported per search: programs solved,
LLM calls to the first success (mean over solved), spend, and the filters' rejections; ratios compare each
baseline's solved count with Treefinement's, all measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions, filters, make_verifier
from veriloop.agents.context import AgentContext
from veriloop.agents.runner import with_provenance
from veriloop.bench._parts import opened
from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Attempt, Run, RunStatus, Task, VerifyStatus
from veriloop.sandbox import Sandbox
from veriloop.search.engine import SEARCHES
from veriloop.store import TrajectoryStore
from veriloop.tasks import Suite


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="veriloop bench alphaverus", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dafny-tasks", type=int, default=4, help="DafnyBench hints-removed programs (shortest).")
    parser.add_argument(
        "--scan", type=int, default=40, help="DafnyBench programs read (the first N) before the hints filter."
    )
    parser.add_argument("--humaneval-tasks", type=int, default=8, help="First HumanEval problems.")
    parser.add_argument("--nagini-tasks", type=int, default=10, help="First nagini-hints programs.")
    parser.add_argument("--width", type=int, default=4, help="Tree width.")
    parser.add_argument("--depth", type=int, default=2, help="Tree depth (budget = width x depth LLM calls).")
    parser.add_argument("--max-tokens", type=int, default=256, help="New tokens per sample.")
    parser.add_argument("--verifier-seconds", type=float, default=90.0, help="Verifier seconds per search and task.")
    parser.add_argument("--exploit-samples", type=int, default=2, help="Exploit-model samples per solved program.")
    parser.add_argument("--judge-votes", type=int, default=2, help="Equivalence-judge votes per solved program.")
    parser.add_argument("--searches", default=",".join(SEARCHES), help="Comma-separated searches to compare.")
    parser.add_argument("--settings", default="dafny_hints,humaneval_tests", help="Settings to run.")
    parser.add_argument("--batch", type=int, default=16, help="llm.max_batch_size for the run.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--infill", default="hints", help="dafny_hints and nagini_hints modes: hints, whole, or hints,whole."
    )
    parser.add_argument(
        "--prune-steps", type=int, default=8, help="Hints mode: Houdini pruning steps after a search (0 = off)."
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature.")
    return parser.parse_args(list(argv))


async def _filters(
    ctx: AgentContext, attempts: list[Attempt], tasks: dict[str, Task], args: argparse.Namespace, target: str
) -> dict[str, int]:
    """Exploit model and equivalence judge on each solved program (as the AlphaVerus loop filters them)."""
    counts = {"checked": 0, "exploit_rejected": 0, "judge_rejected": 0}
    bare = make_verifier(target, ctx, guard=False)
    try:
        for attempt in attempts:
            if attempt.status != "passed" or attempt.best_node_id is None:
                continue
            node = ctx.store.get_node(attempt.best_node_id)
            task = tasks[attempt.task_id]
            counts["checked"] += 1
            verdict = await filters.exploit_check(
                node, task, target, ctx.backend, bare, ctx.store, samples=args.exploit_samples
            )
            if verdict.rejected:
                counts["exploit_rejected"] += 1
                continue
            verdict = await filters.judge_check(
                node, task.prompt, target, target, ctx.backend, ctx.store, votes=args.judge_votes
            )
            counts["judge_rejected"] += int(verdict.rejected)
    finally:
        await bare.aclose()
    return counts


def save_partial(settings: Settings, result: dict[str, Any]) -> None:
    """What is measured so far, so an interrupted bench still leaves its finished searches behind."""
    path = settings.paths.home / "bench" / "alphaverus.partial.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))


async def run_setting(
    name: str,
    chosen: Suite,
    target: str,
    args: argparse.Namespace,
    settings: Settings,
    store: TrajectoryStore,
    backend: Backend,
    sandbox: Sandbox,
    result: dict[str, Any],
    infill: str = "hints",
    filtered: bool = False,
) -> dict[str, Any]:
    """Every search on every task of one setting (the suite slice `chosen`); one stored run per search. `filtered`:
    solved programs also go through the exploit model and the equivalence judge (the setting chooses, not the
    verifier's name: `dafny_hints` measures them as AlphaVerus did; `nagini_hints` does not)."""
    tasks = list(chosen.tasks)
    report: dict[str, Any] = result.setdefault(name, {})
    by_id = {task.id: task for task in tasks}
    store.upsert_tasks(tasks)
    for kind in args.searches.split(","):
        options = AlphaVerusOptions(
            mode="inference",
            target=target,
            search=kind,
            width=args.width,
            depth=args.depth,
            max_tokens=args.max_tokens,
            verifier_seconds=args.verifier_seconds,
            seed=args.seed,
            few_shot=0,
            grow_pools=False,
            infill=infill,
            prune_steps=args.prune_steps,
            temperature=args.temperature,
        )
        validated = options.model_dump(mode="json")
        run = Run(
            agent="alphaverus",
            suite=tasks[0].suite,
            model=backend.model_id,
            status=RunStatus.RUNNING,
            settings={"bench": "alphaverus", "setting": name, "options": validated, "task_ids": list(by_id)},
        )
        run = store.create_run(
            with_provenance(run, settings, agent_module=AlphaVerusAgent.__module__, options=validated, suite=chosen)
        )
        ctx = AgentContext(settings=settings, backend=backend, sandbox=sandbox, store=store, run=run)
        agent = AlphaVerusAgent(options)
        started = time.perf_counter()
        attempts = list(await asyncio.gather(*(agent.solve(task, ctx) for task in tasks)))
        wall = time.perf_counter() - started
        nodes = store.list_nodes(run.id)
        guard = sum(1 for n in nodes if n.verify_result is not None and n.verify_result.status is VerifyStatus.REJECTED)
        checks = await _filters(ctx, attempts, by_id, args, target) if filtered else {}
        store.finish_run(run.id, RunStatus.FINISHED)
        solved = [a for a in attempts if a.status == "passed"]
        by_pruning = [
            a for a in solved if a.best_node_id and store.get_node(a.best_node_id).metadata.get("phase") == "prune"
        ]
        calls = [a.budget.get("calls_to_success", 0) for a in solved]

        def total(key: str, attempts: list[Attempt] = attempts) -> float:
            return round(sum(float(a.budget.get(key, 0)) for a in attempts), 3)

        report[kind] = {
            "run_id": run.id,
            "tasks": len(tasks),
            "solved": len(solved),
            "solved_by_search": len(solved) - len(by_pruning),
            "solved_by_pruning": len(by_pruning),
            "solved_after_filters": len(solved) - checks.get("exploit_rejected", 0) - checks.get("judge_rejected", 0),
            "calls_to_first_success": calls,
            "mean_calls_to_first_success": round(statistics.fmean(calls), 2) if calls else None,
            "mean_best_score": round(statistics.fmean([a.score if a.score is not None else -1.0 for a in attempts]), 4),
            "llm_calls": int(total("llm_calls")),
            "llm_call_budget": args.width * args.depth * len(tasks),
            "tokens": int(total("tokens")),
            "verifier_calls": int(total("verifier_calls")),
            "verifier_s": total("verifier_s"),
            "wall_s": round(wall, 2),
            "filters": {"guard_rejected_nodes": guard, **checks},
            **node_shares(nodes),
        }
        save_partial(settings, result)
        _log(
            f"  {name} {kind}: solved {len(solved)}/{len(tasks)}, calls {report[kind]['llm_calls']}, "
            f"mean best {report[kind]['mean_best_score']}, {wall:.0f} s"
        )
    return report


def node_shares(nodes: Sequence[Any]) -> dict[str, Any]:
    """Over the model's samples: share Dafny could not parse and share it verified; over every node, the
    deepest refinement reached. Houdini pruning nodes (no LLM call) are counted apart, so they neither dilute
    nor inflate the samples' shares."""
    sampled = [node for node in nodes if node.metadata.get("phase") != "prune"]
    pruned = [node for node in nodes if node.metadata.get("phase") == "prune"]
    statuses = [node.verify_result.status for node in sampled if node.verify_result is not None]
    count = len(statuses) or 1
    return {
        "nodes": len(sampled),
        "syntax_error_share": round(sum(s is VerifyStatus.SYNTAX_ERROR for s in statuses) / count, 4),
        "verified_share": round(sum(s is VerifyStatus.VERIFIED for s in statuses) / count, 4),
        "max_depth": max((node.depth for node in nodes), default=0),
        "pruning_nodes": len(pruned),
        "pruning_verified": sum(1 for node in pruned if node.score is not None and node.score >= 1.0),
    }


def summary(result: dict[str, Any], tasks: int, setting: str = "dafny_hints") -> dict[str, Any]:
    """The committed shape: {"tasks": N, "hints"|"whole": {SEARCH: {syntax_error_share, verified_share, solved}}}."""
    out: dict[str, Any] = {"tasks": tasks}
    for infill, name in (("hints", setting), ("whole", f"{setting}_whole")):
        if name in result:
            out[infill] = {
                kind: {
                    key: row[key]
                    for key in (
                        "syntax_error_share",
                        "verified_share",
                        "solved",
                        "solved_by_search",
                        "solved_by_pruning",
                        "max_depth",
                        "nodes",
                        "pruning_nodes",
                    )
                }
                for kind, row in result[name].items()
            }
    return out


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    """Each baseline's solved count over Treefinement's (null when Treefinement solved nothing)."""
    out: dict[str, Any] = {}
    base = report.get("treefinement", {}).get("solved", 0)
    for kind, row in report.items():
        if kind != "treefinement":
            out[f"{kind}_solved_over_treefinement"] = round(row["solved"] / base, 3) if base else None
    return out


async def run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from veriloop.tasks import load_suite
    from veriloop.tasks.dafny import load_dafnybench_hints

    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"max_batch_size": args.batch})})
    chosen = [name.strip() for name in args.settings.split(",") if name.strip()]
    result: dict[str, Any] = {"config": {k: v for k, v in vars(args).items()}}
    async with opened(settings) as parts:
        store, sandbox, backend = parts.store, parts.sandbox, parts.backend
        result["config"]["model"] = backend.model_id
        if "dafny_hints" in chosen:
            suite = load_dafnybench_hints(settings, scan=args.scan)
            tasks = sorted(suite.tasks, key=lambda task: len(task.prompt))[: args.dafny_tasks]
            _log(f"dafny_hints: {len(tasks)} programs of {suite.name} ({suite.version})")
            for infill in [mode.strip() for mode in args.infill.split(",") if mode.strip()]:
                name = "dafny_hints" if infill == "hints" else "dafny_hints_whole"
                shortest = suite.select(ids=[task.id for task in tasks])
                await run_setting(
                    name, shortest, "dafny", args, settings, store, backend, sandbox, result, infill, filtered=True
                )
            result["dafny_hints_suite"] = suite.version
            result["summary"] = summary(result, len(tasks))
        if "nagini_hints" in chosen:
            suite = load_suite("nagini-hints", settings)
            first = suite.select(limit=args.nagini_tasks)
            tasks = list(first.tasks)
            _log(f"nagini_hints: {len(tasks)} programs of {suite.name} ({suite.version})")
            for infill in [mode.strip() for mode in args.infill.split(",") if mode.strip()]:
                name = "nagini_hints" if infill == "hints" else "nagini_hints_whole"
                await run_setting(name, first, "nagini", args, settings, store, backend, sandbox, result, infill)
            result["nagini_hints_suite"] = suite.version
            result["nagini_summary"] = summary(result, len(tasks), "nagini_hints")
        if "humaneval_tests" in chosen:
            suite = load_suite("humaneval", settings)
            first = suite.select(limit=args.humaneval_tasks)
            _log(f"humaneval_tests: {len(first.tasks)} problems")
            await run_setting("humaneval_tests", first, "tests", args, settings, store, backend, sandbox, result)
        names = ("dafny_hints", "dafny_hints_whole", "nagini_hints", "nagini_hints_whole", "humaneval_tests")
        result["ratios"] = {name: ratios(result[name]) for name in names if name in result}
    return result


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    args = parse(argv)
    unknown = set(args.searches.split(",")) - set(SEARCHES)
    if unknown:
        from veriloop.errors import ConfigError

        raise ConfigError(f"unknown search {sorted(unknown)[0]!r}; choose from {', '.join(SEARCHES)}")
    return asyncio.run(run(settings, args))
