"""`veriloop run <method> ...`: one subcommand per agent, all sharing the slice options and the report.

Every registered agent gets a subcommand generated from its options model (`method_command`); a method
that needs its own default suite, old flag spellings or report writes it in `run_<method>_cmd.py`. Either
way the flags come from the options model (`cli/options.py`) and go to `run_agent`, which creates the run,
executes it with a progress bar, and prints a per-task table (or JSON), reading the suite once and opening the
store once (`execute_and_report` is the path every command that executes a run shares). `veriloop run resume
RUN_ID` continues any interrupted run.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.cli.options import option_flags
from veriloop.config import Settings
from veriloop.records import Attempt, Run

if TYPE_CHECKING:
    from veriloop.store import TrajectoryStore
    from veriloop.tasks import Suite

Reporter = Callable[["TrajectoryStore", Run, list[Attempt], float], None]
"""A method's own report of a finished run: (store, run, attempts, seconds), printed as JSON or a table."""


class MethodGroup(TyperGroup):
    """`veriloop run`'s subcommands: the hand-written ones, then one generated for every other registered agent.

    (Contexts and commands are typed `Any`: typer ships its own copy of click, `typer._click`.)
    """

    def list_commands(self, ctx: Any) -> list[str]:
        from veriloop.agents.base import AGENTS

        written = super().list_commands(ctx)
        return [*written, *(name for name in AGENTS if name not in written)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        from veriloop.agents.base import AGENTS

        written = super().get_command(ctx, cmd_name)
        if written is not None or cmd_name not in AGENTS:
            return written
        return method_command(cmd_name)


run_app = typer.Typer(
    cls=MethodGroup, help="Run a method (agent) over a task suite; every step is stored.", no_args_is_help=True
)
app.add_typer(run_app, name="run")

LimitOption = Annotated[int | None, typer.Option("--limit", min=1, help="Solve only the first N tasks of the suite.")]
TaskIdsOption = Annotated[
    list[str] | None, typer.Option("--task", help="Solve only this task id (repeatable); overrides the suite order.")
]
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
    settings: Settings, store: TrajectoryStore, run: Run, suite: Suite, executor: str | None = None
) -> tuple[Run, list[Attempt], float]:
    """Execute `run` on its slice `suite` with a progress bar: here (`local`), or on an executor whose processes write
    the attempts, polled from `store` for the bar."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from veriloop.agents.runner import execute_run, suite_attempts
    from veriloop.service.executor import get_executor

    name = executor_name(settings, executor)
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        bar = progress.add_task(f"{run.agent} on {run.suite} ({name})", total=len(suite.tasks))
        progress.update(bar, completed=_finished_count(store, run.id))
        if name == "local":
            finished, attempts = await execute_run(
                settings, store, run.id, on_attempt=lambda _attempt: progress.advance(bar), suite=suite
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
        attempts = suite_attempts(store, run.id, suite)
    return finished, attempts, time.perf_counter() - started


def execute_and_report(
    settings: Settings,
    store: TrajectoryStore,
    run: Run,
    suite: Suite | None,
    *,
    executor: str | None,
    as_json: bool,
    report: Reporter | None = None,
) -> tuple[Run, list[Attempt]]:
    """The one way a command runs a stored run: on its slice (read here only when the caller has not), then the
    report (default `report_run`), all on the caller's store."""
    from veriloop.agents.runner import suite_of

    suite = suite if suite is not None else suite_of(run, settings)
    finished, attempts, seconds = asyncio.run(_execute(settings, store, run, suite, executor))
    if report is None:
        report_run(finished, attempts, seconds, as_json)
    else:
        report(store, finished, attempts, seconds)
    return finished, attempts


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
        for column, justify in (
            ("task", "left"),
            ("passed", "center"),
            ("score", "right"),
            ("tokens", "right"),
            ("seconds", "right"),
        ):
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
    extra: dict[str, Any] | None = None,
    report: Reporter | None = None,
) -> tuple[Run, list[Attempt]]:
    """Create a run of `agent` on the suite slice, execute it with progress, print the report: the suite is read
    once and the store opened once (`report`, if given, prints from that store instead of `report_run`)."""
    from veriloop.agents.runner import new_run
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    executor = executor_name(settings, executor)
    with TrajectoryStore.from_settings(settings) as store:
        run, chosen = new_run(
            store,
            settings,
            agent=agent,
            suite=suite,
            options=options,
            limit=limit,
            task_ids=task_ids or (),
            extra=extra,
        )
        return execute_and_report(settings, store, run, chosen, executor=executor, as_json=as_json, report=report)


def method_command(agent: str) -> Any:
    """`veriloop run <agent>` for a registered agent: its flags generated from its Options (`cli/options.py`),
    the suite slice, the executor and the report; its help is the first paragraph of the agent's docstring."""
    from veriloop.agents.base import AGENTS

    method = AGENTS.load(agent)

    @option_flags(method.Options)
    def command(
        ctx: typer.Context,
        options: dict[str, Any],
        suite: Annotated[str, typer.Option("--suite", help="Task suite name.")] = "humaneval",
        limit: LimitOption = None,
        task: TaskIdsOption = None,
        executor: ExecutorOption = None,
        as_json: JsonFlag = False,
    ) -> None:
        run_agent(ctx, agent, suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)

    single = typer.Typer(add_completion=False)
    single.command(agent, help=(inspect.getdoc(method) or "").split("\n\n")[0])(command)
    return typer.main.get_command(single)


@run_app.command("resume")
def run_resume(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run to continue; tasks already finished are not repeated.")],
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Continue an interrupted run with the options it was created with."""
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    with TrajectoryStore.from_settings(settings) as store:
        execute_and_report(settings, store, store.get_run(run_id), None, executor=executor, as_json=as_json)
