"""`veriloop demo`: the main job on the embedded defaults, end to end on a small HumanEval slice."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.config import Settings
from veriloop.records import Attempt, Run, RunStatus


async def _run_demo(settings: Settings, limit: int, console: Console) -> tuple[Run, list[Attempt], float]:
    # Imported here so `veriloop --help` and every other command start without the store and torch.
    from veriloop.agents import direct
    from veriloop.agents.context import AgentContext
    from veriloop.llm import get_backend
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore
    from veriloop.tasks import load_suite

    suite = load_suite("humaneval", settings).select(limit=limit)
    store = TrajectoryStore.from_settings(settings)
    sandbox = get_sandbox(settings)
    with console.status("loading the model"):
        backend = get_backend(settings)
    run = store.create_run(
        Run(
            agent="direct",
            suite=suite.name,
            model=backend.model_id,
            status=RunStatus.RUNNING,
            settings={"suite_version": suite.version, "limit": limit, "sandbox": sandbox.name,
                      "params": direct.DEFAULT_PARAMS.model_dump(mode="json")},
        )
    )  # fmt: skip
    store.upsert_tasks(suite.tasks)
    ctx = AgentContext(settings=settings, backend=backend, sandbox=sandbox, store=store, run=run)
    started = time.perf_counter()
    attempts: list[Attempt] = []
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as progress:  # fmt: skip
            bar = progress.add_task(f"solving {len(suite.tasks)} tasks", total=len(suite.tasks))
            # All tasks start at once: their requests share forward passes in the continuous batcher.
            for finished in asyncio.as_completed([direct.solve(task, ctx) for task in suite.tasks]):
                attempts.append(await finished)
                progress.advance(bar)
        run = store.finish_run(run.id, RunStatus.FINISHED)
    except BaseException as exc:
        store.finish_run(run.id, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        await backend.aclose()
        await sandbox.aclose()
        store.close()
    order = {task.id: index for index, task in enumerate(suite.tasks)}
    attempts.sort(key=lambda attempt: order[attempt.task_id])
    return run, attempts, time.perf_counter() - started


@app.command("demo")
def demo(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=164, help="HumanEval tasks to solve.")] = 5,
    as_json: JsonFlag = False,
) -> None:
    """Solve the first HumanEval tasks with the configured model, test them in the sandbox, store everything."""
    settings = state(ctx).settings()
    console = Console(stderr=True)
    run, attempts, seconds = asyncio.run(_run_demo(settings, limit, console))
    passed = sum(attempt.status == "passed" for attempt in attempts)
    report = {
        "run_id": run.id,
        "model": run.model,
        "sandbox": run.settings.get("sandbox"),
        "passed": passed,
        "total": len(attempts),
        "seconds": round(seconds, 2),
        "attempts": attempts,
    }

    def render(_: object) -> None:
        table = Table(title=f"veriloop demo: {run.suite} on {run.model}")
        for column, justify in (("task", "left"), ("passed", "center"), ("tokens", "right"), ("seconds", "right")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for attempt in attempts:
            mark = "[green]yes[/]" if attempt.status == "passed" else "[red]no[/]"
            table.add_row(attempt.task_id, mark, str(attempt.tokens), f"{attempt.seconds:.1f}")
        out = Console(file=sys.stdout, soft_wrap=True)
        out.print(table)
        out.print(f"passed {passed}/{len(attempts)} in {seconds:.1f} s; tests ran in the {report['sandbox']} sandbox")
        out.print(f"run id: {run.id}  (details: veriloop runs show {run.id})")

    emit(report, as_json, render)
