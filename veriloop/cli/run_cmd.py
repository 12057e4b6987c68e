"""`veriloop run <method> ...`: one subcommand per agent, all sharing the slice options and the report.

An agent's command lives in its own `run_<method>_cmd.py`, gets its flags from the method's options
model (`cli/options.py`), and hands them to `run_agent`, which creates the run, executes it with a
progress bar, and prints a per-task table (or JSON). `veriloop run resume RUN_ID` continues any interrupted run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.config import Settings
from veriloop.records import Attempt, Run

if TYPE_CHECKING:
    from veriloop.store import TrajectoryStore

run_app = typer.Typer(help="Run a method (agent) over a task suite; every step is stored.", no_args_is_help=True)
app.add_typer(run_app, name="run")

LimitOption = Annotated[int | None, typer.Option("--limit", min=1, help="Solve only the first N tasks of the suite.")]
TaskIdsOption = Annotated[
    list[str] | None, typer.Option("--task", help="Solve only this task id (repeatable); overrides the suite order.")
]
ConcurrencyOption = Annotated[int, typer.Option("--concurrency", min=1, help="Tasks in flight at once.")]
ExecutorOption = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="local: this process; ray: the tasks as Ray tasks on service.ray_address, or a local Ray "
        "(pip install 'veriloop[ray]'). Default: service.executor (local).",
    ),
]


def executor_name(settings: Settings, executor: str | None) -> str:
    """The executor a run uses (the flag, else `service.executor`); an unknown name fails before anything is stored."""
    from veriloop.service.executor import EXECUTORS

    name = executor or settings.service.executor
    EXECUTORS.load(name)
    return name


def _finished_count(store: TrajectoryStore, run_id: str) -> int:
    return len({a.task_id for a in store.list_attempts(run_id) if a.status in ("passed", "failed")})


async def _execute(
    settings: Settings, run: Run, total: int, executor: str | None = None
) -> tuple[Run, list[Attempt], float]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from veriloop.agents.runner import execute_run, suite_attempts, suite_of
    from veriloop.service.executor import get_executor
    from veriloop.store import TrajectoryStore

    name = executor_name(settings, executor)
    started = time.perf_counter()
    with TrajectoryStore.from_settings(settings) as store, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    ) as progress:  # fmt: skip
        bar = progress.add_task(f"{run.agent} on {run.suite} ({name})", total=total)
        progress.update(bar, completed=_finished_count(store, run.id))
        if name == "local":
            finished, attempts = await execute_run(
                settings, store, run.id, on_attempt=lambda _attempt: progress.advance(bar)
            )
            return finished, attempts, time.perf_counter() - started
        remote = get_executor(settings, name)

        async def watch() -> None:  # other processes write the attempts: poll the store for progress
            while True:
                await asyncio.sleep(1.0)
                progress.update(bar, completed=await asyncio.to_thread(_finished_count, store, run.id))

        watcher = asyncio.create_task(watch())
        try:
            finished = await remote.execute(settings, run.id)
        finally:
            watcher.cancel()
            await remote.aclose()
        attempts = suite_attempts(store, run.id, suite_of(finished, settings))
    return finished, attempts, time.perf_counter() - started


def report_run(run: Run, attempts: Sequence[Attempt], seconds: float, as_json: bool) -> None:
    """Print a finished run: JSON, or a per-task table with the pass count and the run id."""
    passed = sum(attempt.status == "passed" for attempt in attempts)
    report = {
        "run_id": run.id,
        "agent": run.agent,
        "suite": run.suite,
        "model": run.model,
        "status": run.status.value,
        "passed": passed,
        "total": len(attempts),
        "seconds": round(seconds, 2),
        "attempts": list(attempts),
    }

    def render(_: object) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{run.agent}: {run.suite} on {run.model}")
        for column, justify in (("task", "left"), ("passed", "center"), ("score", "right"), ("tokens", "right"),
                                ("seconds", "right")):  # fmt: skip
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for attempt in attempts:
            mark = "[green]yes[/]" if attempt.status == "passed" else "[red]no[/]"
            score = "-" if attempt.score is None else f"{attempt.score:.3g}"
            table.add_row(attempt.task_id, mark, score, str(attempt.tokens), f"{attempt.seconds:.1f}")
        out = Console(file=sys.stdout, soft_wrap=True)
        out.print(table)
        out.print(f"passed {passed}/{len(attempts)} tasks (held-out tests) in {seconds:.1f} s")
        out.print(f"run id: {run.id}  (details: veriloop runs show {run.id})")

    emit(report, as_json, render)


def run_agent(
    ctx: typer.Context,
    agent: str,
    suite: str,
    options: dict[str, Any],
    *,
    limit: int | None,
    task_ids: Sequence[str] | None,
    as_json: bool,
    executor: str | None = None,
) -> tuple[Run, list[Attempt]]:
    """Create a run of `agent` on the suite slice, execute it with progress, print the report."""
    from veriloop.agents.runner import create_run, suite_of
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    executor = executor_name(settings, executor)
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent=agent, suite=suite, options=options, limit=limit,
                         task_ids=task_ids or ())  # fmt: skip
    total = len(suite_of(run, settings).tasks)
    finished, attempts, seconds = asyncio.run(_execute(settings, run, total, executor))
    report_run(finished, attempts, seconds, as_json)
    return finished, attempts


@run_app.command("direct")
def run_direct(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Task suite name.")] = "humaneval",
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """One greedy sample per task, tested once: the single-turn baseline."""
    run_agent(ctx, "direct", suite, {"concurrency": concurrency}, limit=limit, task_ids=task, as_json=as_json,
              executor=executor)  # fmt: skip


@run_app.command("resume")
def run_resume(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run to continue; tasks already finished are not repeated.")],
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Continue an interrupted run with the options it was created with."""
    from veriloop.agents.runner import suite_of
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    with TrajectoryStore.from_settings(settings) as store:
        run = store.get_run(run_id)
    total = len(suite_of(run, settings).tasks)
    finished, attempts, seconds = asyncio.run(_execute(settings, run, total, executor))
    report_run(finished, attempts, seconds, as_json)
