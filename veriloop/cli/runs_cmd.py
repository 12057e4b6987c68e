"""`veriloop runs list | show | compare | report | rerun`: what the trajectory store holds, as tables or JSON.

Every pass rate is labelled with the check it counts: held-out tests (the task's verdict, the
headline) or public tests (the ones shown to the model). Every interval is 95% and names its method:
Wilson for a pass rate (a proportion of tasks), the bootstrap over tasks for pass@k (Wilson when each
task's estimate is 0 or 1), the paired bootstrap for a difference; the statistics themselves are in
`veriloop.store.stats`.
"""

from __future__ import annotations

import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.cli.run_cmd import ExecutorOption, execute_and_report, executor_name
from veriloop.errors import ConfigError
from veriloop.records import Run, RunStatus

if TYPE_CHECKING:
    from veriloop.store import RunSummary
    from veriloop.store.figures import RunComparison
    from veriloop.store.stats import IntervalMethod
    from veriloop.store.summary import CheckFigures, Provenance

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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _interval(low: float | None, high: float | None, method: IntervalMethod) -> str:
    """' [95% Wilson CI 0.0%, 43.4%]': the method named, so a reader knows which interval it is."""
    from veriloop.store.stats import INTERVAL_NAMES

    return "" if low is None or high is None else f" [95% {INTERVAL_NAMES[method]} CI {low:.1%}, {high:.1%}]"


def _figure_rows(figures: CheckFigures) -> list[tuple[str, str]]:
    """Rows for one check: its pass rate with interval, then pass@k (when any sample was drawn)."""
    rows = [
        (
            f"pass rate, {figures.label}",
            f"{_pct(figures.pass_rate)}{_interval(figures.low, figures.high, figures.interval)}, "
            f"{figures.tasks_passed}/{figures.tasks} tasks",
        )
    ]
    if figures.pass_at_k:
        shown = ", ".join(
            f"pass@{r.k} {_pct(r.value)}{_interval(r.low, r.high, r.interval)}" for r in figures.pass_at_k
        )
        rows.append((f"pass@k, {figures.label}", f"{shown} (n <= {figures.samples_per_task} per task)"))
    if figures.per_turn:
        turns = ", ".join(f"turn {r.turn} {_pct(r.pass_rate)}" for r in figures.per_turn)
        rows.append((f"per turn, {figures.label}", turns + " (cumulative)"))
    if figures.note:
        rows.append(("", figures.note))
    return rows


def _provenance_rows(found: Provenance | None, note: str | None) -> list[tuple[str, str]]:
    if found is None:
        return [("provenance", note or "not recorded for this run")]
    commit = f", commit {found.git_commit[:12]}" + (" (dirty)" if found.git_dirty else "") if found.git_commit else ""
    suite = found.suite
    return [
        ("veriloop", f"{found.veriloop_version}{commit}, Python {found.python}"),
        ("model", f"{found.model} ({found.backend})" + (f", {found.checkpoint_hash}" if found.checkpoint_hash else "")),
        ("suite", f"{suite.name} {suite.version}, {suite.tasks} tasks, {suite.content_hash}"),
        ("seeds", ", ".join(f"{key}={value}" for key, value in found.seeds.items()) or "none"),
        ("prompts", ", ".join(f"{key} {value[:12]}" for key, value in found.prompt_hashes.items()) or "-"),
        ("sandbox", f"{found.sandbox.get('backend', '')} {found.sandbox.get('version', '')}".strip()),
        (
            "verifiers",
            ", ".join(f"{key} {value or 'not installed'}" for key, value in found.verifiers.items()) or "none needed",
        ),
    ]


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
    statuses = ", ".join(f"{name} {count}" for name, count in sorted(summary.attempts_by_status.items()))
    counts = Table(box=None, show_header=False)
    counts.add_column(style="bold")
    counts.add_column()
    counts.add_row("tasks", f"{summary.tasks} ({summary.tasks_passed} passed the held-out tests)")
    if summary.figures is not None:
        for figures in (summary.figures.held_out, summary.figures.public):
            for name, value in _figure_rows(figures) if figures is not None else []:
                counts.add_row(name, value)
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
    for name, value in _provenance_rows(summary.provenance, summary.provenance_note):
        counts.add_row(name, value)
    console.print(counts)
    if summary.per_task:
        table = Table(box=None, header_style="bold")
        for column in ("task", "nodes", "depth", "best score", "attempts", "status (held-out)"):
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
    """Show a run: held-out and public pass rates with intervals, pass@k, provenance, counts, tokens, timings and
    each task's search tree in brief."""
    from veriloop.store import TrajectoryStore
    from veriloop.store.figures import full_summary

    with TrajectoryStore.from_settings(state(ctx).settings()) as store:
        summary = full_summary(store, run_id)
    emit(summary, as_json, _render_summary)


def _render_comparison(result: RunComparison) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    a, b = result.a, result.b
    console.print(f"[bold]A[/bold] {a.id}  {a.agent} on {a.suite} with {a.model}")
    console.print(f"[bold]B[/bold] {b.id}  {b.agent} on {b.suite} with {b.model}")
    if not result.same_suite:
        console.print("[yellow]note:[/yellow] the runs are on different suites; only tasks both finished count")
    lines = Table(box=None, show_header=False)
    lines.add_column(style="bold")
    lines.add_column()
    lines.add_row("tasks both finished", str(result.shared_tasks))
    if result.only_a or result.only_b:
        lines.add_row("left out", f"{len(result.only_a)} only in A, {len(result.only_b)} only in B")
    lines.add_row(f"pass rate A, {result.label}", f"{_pct(result.a_rate)} ({result.a_passed}/{result.shared_tasks})")
    lines.add_row(f"pass rate B, {result.label}", f"{_pct(result.b_rate)} ({result.b_passed}/{result.shared_tasks})")
    lines.add_row("A wins / B wins", f"{result.wins} / {result.losses} ({result.both} both, {result.neither} neither)")
    difference = "-" if result.difference is None else f"{100 * result.difference:+.1f} points"
    if result.low is not None and result.high is not None:
        from veriloop.store.stats import INTERVAL_NAMES

        named = INTERVAL_NAMES[result.interval]
        difference += f" [95% {named} CI {100 * result.low:+.1f}, {100 * result.high:+.1f}]"
    lines.add_row("difference A - B", difference)
    lines.add_row("McNemar exact p", "-" if result.mcnemar_p is None else f"{result.mcnemar_p:.4g} (two-sided)")
    console.print(lines)
    if result.tasks:
        table = Table(box=None, header_style="bold")
        for column in ("task", "A", "B", "outcome"):
            table.add_column(column)
        names = {"win": "A wins", "loss": "B wins", "both": "both", "neither": "neither"}
        for pair in result.tasks:
            mark = {True: "passed", False: "failed"}
            table.add_row(pair.task_id, mark[pair.a_passed], mark[pair.b_passed], names[pair.outcome])
        console.print(table)


@runs_app.command("compare")
def compare(
    ctx: typer.Context,
    run_a: Annotated[str, typer.Argument(help="Run A (id or unique prefix).")],
    run_b: Annotated[str, typer.Argument(help="Run B (id or unique prefix).")],
    as_json: JsonFlag = False,
) -> None:
    """Compare two runs on the tasks both finished (held-out tests): wins and losses, the difference with a
    paired bootstrap interval, and an exact McNemar p-value."""
    from veriloop.store import TrajectoryStore
    from veriloop.store.figures import compare_runs

    with TrajectoryStore.from_settings(state(ctx).settings()) as store:
        result = compare_runs(store, run_a, run_b)
    emit(result, as_json, _render_comparison)


class ReportFormat(StrEnum):
    md = "md"
    html = "html"


@runs_app.command("report")
def report(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of at least 4 characters.")],
    fmt: Annotated[ReportFormat, typer.Option("--format", help="md (Markdown) or html (a standalone page).")] = (
        ReportFormat.md
    ),
    out: Annotated[Path | None, typer.Option("--out", help="Write the report here instead of stdout.")] = None,
) -> None:
    """The run page's figures and tables as one file, plots as inline SVG."""
    from veriloop.service.report import render_report
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    with TrajectoryStore.from_settings(settings) as store:
        text = render_report(store, run_id, settings, fmt.value)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {out}", err=True)


@runs_app.command("rerun")
def rerun(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run to start again (id or unique prefix).")],
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Start a stored run again as a new run: same method, options, suite slice, model and LLM settings."""
    from veriloop.agents.runner import create_rerun
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    executor = executor_name(settings, executor)
    with TrajectoryStore.from_settings(settings) as store:
        old, new = create_rerun(store, settings, run_id)
        _announce_rerun(old, new)
        execute_and_report(settings, store, new, None, executor=executor, as_json=as_json)


def _announce_rerun(old: Run, new: Run) -> None:
    """On stderr: the new run's id, and what differs from the old run's provenance (data, weights, code)."""
    from veriloop.store.summary import provenance_of

    before, after = provenance_of(old), provenance_of(new)
    if before is not None and after is not None:
        for what, was, now in (
            ("suite content", before.suite.content_hash, after.suite.content_hash),
            ("model weights", before.checkpoint_hash, after.checkpoint_hash),
            ("veriloop commit", before.git_commit, after.git_commit),
        ):
            if was != now:
                typer.echo(f"note: {what} differs from run {old.id[:SHORT_ID]}: {was} -> {now}", err=True)
    typer.echo(f"rerun of {old.id} as {new.id}", err=True)
