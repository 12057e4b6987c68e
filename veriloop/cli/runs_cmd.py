"""`veriloop runs list | show RUN_ID`: what the trajectory store holds, as tables or JSON."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.records import Run, RunStatus

if TYPE_CHECKING:
    from veriloop.store import RunSummary

runs_app = typer.Typer(help="Inspect stored runs.")
SHORT_ID = 12
app.add_typer(runs_app, name="runs", no_args_is_help=True)


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _render_runs(runs: list[Run]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not runs:
        console.print("no runs")
        return
    table = Table(box=None, header_style="bold")
    table.add_column("id", no_wrap=True)  # a unique prefix is enough for `runs show`
    table.add_column("agent", no_wrap=True)
    table.add_column("suite", no_wrap=True)
    table.add_column("model", overflow="ellipsis", no_wrap=True, max_width=28)
    table.add_column("status", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("took", no_wrap=True, justify="right")
    for run in runs:
        took = (run.finished_at - run.created_at).total_seconds() if run.finished_at else None
        created = run.created_at.strftime("%Y-%m-%d %H:%M")
        table.add_row(run.id[:SHORT_ID], run.agent, run.suite, run.model, run.status.value, created, _seconds(took))
    console.print(table)


def _render_summary(summary: RunSummary) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    run = summary.run
    console.print(f"[bold]run {run.id}[/bold]  {run.agent} on {run.suite} with {run.model}  ({run.status.value})")
    console.print(
        f"created {_when(run.created_at)}  finished {_when(run.finished_at)}  wall {_seconds(summary.timings.wall_s)}"
    )
    if run.error:
        console.print(f"[red]error:[/red] {run.error}")
    rate = "-" if summary.pass_rate is None else f"{summary.pass_rate:.1%}"
    statuses = ", ".join(f"{name} {count}" for name, count in sorted(summary.attempts_by_status.items()))
    counts = Table(box=None, show_header=False)
    counts.add_column(style="bold")
    counts.add_column()
    counts.add_row("tasks", f"{summary.tasks} ({summary.tasks_passed} passed, {rate})")
    counts.add_row("attempts", f"{summary.attempts}" + (f" ({statuses})" if statuses else ""))
    counts.add_row("nodes", str(summary.nodes))
    counts.add_row("llm calls", str(summary.llm_calls))
    counts.add_row("executions", _counts(summary.executions))
    counts.add_row("verifications", _counts(summary.verifications))
    tokens = summary.tokens
    counts.add_row("tokens", f"{tokens.total} ({tokens.prompt} prompt, {tokens.completion} completion)")
    timings = summary.timings
    counts.add_row(
        "time in calls",
        f"llm {_seconds(timings.llm_s)}, exec {_seconds(timings.exec_s)}, verify {_seconds(timings.verify_s)}",
    )
    console.print(counts)
    if summary.per_task:
        table = Table(box=None, header_style="bold")
        for column in ("task", "nodes", "depth", "best score", "attempts", "status"):
            table.add_column(column, justify="left" if column in ("task", "status") else "right")
        for task in summary.per_task:
            table.add_row(
                task.task_id,
                str(task.nodes),
                str(task.max_depth),
                _score(task.best_score),
                str(task.attempts),
                task.status or "-",
            )
        console.print(table)


def _counts(values: dict[str, int]) -> str:
    total = sum(values.values())
    detail = ", ".join(f"{name} {count}" for name, count in sorted(values.items()))
    return f"{total} ({detail})" if detail else str(total)


@runs_app.command("list")
def list_runs(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option("--agent", help="Only runs of this agent.")] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="Only runs over this suite.")] = None,
    status: Annotated[RunStatus | None, typer.Option("--status", help="Only runs in this status.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs, newest first.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first."""
    from veriloop.store import TrajectoryStore  # sqlalchemy loads only for store commands

    with TrajectoryStore.from_settings(state(ctx).settings()) as store:
        runs = store.list_runs(agent=agent, suite=suite, status=status, limit=limit)
    emit(runs, as_json, _render_runs)


@runs_app.command("show")
def show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of at least 4 characters.")],
    as_json: JsonFlag = False,
) -> None:
    """Show a run: counts, tokens, timings and each task's search tree in brief."""
    from veriloop.store import TrajectoryStore

    with TrajectoryStore.from_settings(state(ctx).settings()) as store:
        summary = store.run_summary(run_id)
    emit(summary, as_json, _render_summary)
