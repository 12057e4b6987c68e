"""`veriloop demo`: the main job on the embedded defaults, end to end on a small HumanEval slice.

The demo runs μCode's multi-turn loop with a small best-of-N (`DEMO_OPTIONS`): each turn samples a
few candidates, runs the public test in the sandbox, keeps the best, and feeds the failure back for
the next turn; the private tests decide. It goes through the same runner as `veriloop run`, so the
run, every candidate and every test execution are stored and `veriloop runs show` explains them.

A second, short step runs AlphaVerus's Treefinement (width 4, depth 2) on two hints-removed
DafnyBench programs, with Dafny as the verifier, as its own stored run (`--no-treefinement`
skips it; without a `dafny` binary it is skipped with a note).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.config import Settings
from veriloop.records import Attempt, Run

if TYPE_CHECKING:
    from veriloop.llm.base import Backend
    from veriloop.sandbox import Sandbox
    from veriloop.store import TrajectoryStore

DEMO_OPTIONS: dict[str, Any] = {"turns": 3, "n": 2, "select": "pt", "max_tokens": 256}
"""Multi-turn best-of-2: small enough for two CPU cores, large enough to show selection and feedback."""


TREEFINEMENT = {"programs": 2, "width": 4, "depth": 2}
"""The demo's Treefinement step: the issue's width and depth, on the two shortest bundled programs."""


async def _run_demo(
    settings: Settings, limit: int, console: Console, treefinement: bool
) -> tuple[Run, list[Attempt], dict[str, int], float, dict[str, Any] | None]:
    # Imported here so `veriloop --help` and every other command start without the store and torch.
    from veriloop.agents.runner import create_run, execute_run
    from veriloop.llm import get_backend
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore

    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store,
            settings,
            agent="mucode",
            suite="humaneval",
            options={**DEMO_OPTIONS, "concurrency": limit},
            limit=limit,
        )
        sandbox = get_sandbox(settings)
        with console.status("loading the model"):
            backend = get_backend(settings)
        started = time.perf_counter()
        try:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as progress:
                bar = progress.add_task(f"μCode on {limit} HumanEval tasks", total=limit)
                run, attempts = await execute_run(
                    settings,
                    store,
                    run.id,
                    backend=backend,
                    sandbox=sandbox,
                    on_attempt=lambda _attempt: progress.advance(bar),
                )
            seconds = time.perf_counter() - started
            tree = await _treefinement_step(settings, store, backend, sandbox, console) if treefinement else None
        finally:
            await backend.aclose()
            await sandbox.aclose()
        turns = {}
        for attempt in attempts:
            final = store.get_node(attempt.best_node_id) if attempt.best_node_id else None
            turns[attempt.task_id] = int(final.metadata.get("turn", 0)) if final is not None else 0
    return run, attempts, turns, seconds, tree


async def _treefinement_step(
    settings: Settings, store: TrajectoryStore, backend: Backend, sandbox: Sandbox, console: Console
) -> dict[str, Any] | None:
    from veriloop.agents.alphaverus.demo import treefinement_demo

    if shutil.which("dafny") is None:
        console.print("Treefinement step skipped: no `dafny` on PATH (scripts/setup-verifiers.sh installs it)")
        return None
    with console.status("Treefinement on DafnyBench hints (width 4, depth 2), verified by Dafny"):
        return await treefinement_demo(settings, store, backend, sandbox, **TREEFINEMENT)


@app.command("demo")
def demo(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=164, help="HumanEval tasks to solve.")] = 5,
    treefinement: Annotated[
        bool, typer.Option("--treefinement/--no-treefinement", help="Also run the short Treefinement step (Dafny).")
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Solve the first HumanEval tasks with μCode (multi-turn, best-of-2) in the sandbox, store everything."""
    settings = state(ctx).settings()
    console = Console(stderr=True)
    run, attempts, turns, seconds, tree = asyncio.run(_run_demo(settings, limit, console, treefinement))
    passed = sum(attempt.status == "passed" for attempt in attempts)
    report = {
        "run_id": run.id,
        "agent": run.agent,
        "model": run.model,
        "sandbox": run.settings.get("sandbox"),
        "options": run.settings.get("options"),
        "passed": passed,
        "total": len(attempts),
        "seconds": round(seconds, 2),
        "attempts": attempts,
        "turns": turns,
        "treefinement": tree,
    }

    def render(_: object) -> None:
        table = Table(title=f"veriloop demo: μCode on {run.suite} with {run.model}")
        columns = (
            ("task", "left"),
            ("passed", "center"),
            ("turns", "right"),
            ("tokens", "right"),
            ("seconds", "right"),
        )
        for column, justify in columns:
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for attempt in attempts:
            mark = "[green]yes[/]" if attempt.status == "passed" else "[red]no[/]"
            table.add_row(
                attempt.task_id, mark, str(turns.get(attempt.task_id, 0)), str(attempt.tokens), f"{attempt.seconds:.1f}"
            )
        out = Console(file=sys.stdout, soft_wrap=True)
        out.print(table)
        out.print(
            f"passed {passed}/{len(attempts)} tasks (held-out tests) in {seconds:.1f} s "
            f"(up to {DEMO_OPTIONS['turns']} turns, "
            f"best of {DEMO_OPTIONS['n']} per turn); tests ran in the {report['sandbox']} sandbox"
        )
        out.print(f"run id: {run.id}  (details: veriloop runs show {run.id})")
        if tree is not None:
            best = ", ".join(f"{task} {score:.2f}" for task, score in tree["best_scores"].items() if score is not None)
            out.print(
                f"Treefinement (width {tree['width']}, depth {tree['depth']}) on {tree['programs']} DafnyBench "
                f"hints programs: solved {tree['solved']}/{tree['programs']}, best scores {best or '-'}, "
                f"{tree['llm_calls']} LLM calls, {tree['verifier_calls']} Dafny calls, {tree['seconds']:.1f} s"
            )
            verdicts = ", ".join(f"{count} {status}" for status, count in tree["verdicts"].items())
            out.print(f"node verdicts: {verdicts or 'none'} (score -1 = syntax error or rejected before Dafny ran)")
            out.print(f"run id: {tree['run_id']}  (details: veriloop runs show {tree['run_id']})")

    emit(report, as_json, render)
