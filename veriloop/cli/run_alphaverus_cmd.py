"""`veriloop run alphaverus`: self-improving translation with Treefinement and anti-hacking filters."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag
from veriloop.cli.run_cmd import ConcurrencyOption, ExecutorOption, LimitOption, TaskIdsOption, run_agent, run_app
from veriloop.errors import ConfigError

SUITE_BY_TARGET = {"dafny": "dafnybench-hints", "nagini": "alphaverus-dafny2nagini", "verus": "alphaverus-dafny2verus"}
SEARCH_NAMES = ("treefinement", "breadth", "beam", "best-of-n", "linear")


@run_app.command("alphaverus")
def run_alphaverus(
    ctx: typer.Context,
    source: Annotated[str, typer.Option("--source", help="Source language of the programs (dafny).")] = "dafny",
    target: Annotated[
        str | None, typer.Option("--target", help="Target verifier: dafny (fill in hints), nagini, verus, or tests.")
    ] = None,
    suite: Annotated[
        str | None, typer.Option("--suite", help="Task suite (default: the target's Dafny suite).")
    ] = None,
    iterations: Annotated[int, typer.Option("--iterations", min=1, max=50, help="Self-improvement rounds.")] = 1,
    width: Annotated[int, typer.Option("--width", min=1, max=256, help="Tree width (nodes per depth).")] = 8,
    depth: Annotated[int, typer.Option("--depth", min=1, max=32, help="Tree depth.")] = 2,
    search: Annotated[str, typer.Option("--search", help="treefinement, breadth, beam, best-of-n or linear.")] = (
        "treefinement"
    ),
    explore: Annotated[int, typer.Option("--explore", min=1, max=256, help="Translations sampled per round.")] = 8,
    mode: Annotated[str, typer.Option("--mode", help="auto, translate or inference (spec prefix -> body).")] = "auto",
    exploit_samples: Annotated[int, typer.Option("--exploit-samples", min=0, help="Exploit-model samples.")] = 4,
    judge_votes: Annotated[int, typer.Option("--judge-votes", min=0, help="Equivalence-judge votes.")] = 4,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per program sample.")] = 512,
    seed: Annotated[int, typer.Option("--seed", help="Seed of exemplar sampling and frontier draws.")] = 0,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Explore translations, refine the best partial ones with tree search, filter, grow the exemplar pools."""
    if search not in SEARCH_NAMES:
        raise ConfigError(f"unknown search {search!r}; choose one of {', '.join(SEARCH_NAMES)}")
    if target is not None and target not in (*SUITE_BY_TARGET, "tests"):
        raise ConfigError(f"unknown target {target!r}; choose dafny, nagini, verus or tests")
    if suite is None:
        if target is None or target == "tests":
            raise ConfigError("pass --suite (or --target dafny|nagini|verus for the default Dafny suite)")
        suite = SUITE_BY_TARGET[target]
    options: dict[str, Any] = {
        "source": source, "target": target, "mode": mode, "iterations": iterations, "width": width, "depth": depth,
        "search": search.replace("-", "_"), "explore_samples": explore, "exploit_samples": exploit_samples,
        "judge_votes": judge_votes, "max_tokens": max_tokens, "seed": seed, "concurrency": concurrency,
    }  # fmt: skip
    run_agent(ctx, "alphaverus", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
