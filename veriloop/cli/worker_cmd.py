"""`veriloop worker`: execute runs queued in the database (through the REST API or the dashboard).

Any number of workers on any number of machines may share one PostgreSQL database: each run is
claimed by one worker with a lease it renews; a worker that dies (even by SIGKILL) loses its lease
and the next worker resumes the run where its stored attempts end. SIGINT or SIGTERM hands the
current run back to the queue and exits.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state


async def _work(settings: object, executor_name: str | None, once: bool, max_jobs: int | None) -> object:
    from veriloop.config import Settings
    from veriloop.service.executor import get_executor
    from veriloop.service.preflight import check_worker
    from veriloop.service.worker import work

    assert isinstance(settings, Settings)
    check_worker(settings)
    executor = get_executor(settings, executor_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(work(settings, executor, once=once, max_jobs=max_jobs, stop=stop))
    stopped: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped.append(sig.name)
        stop.set()
        task.cancel()  # hands the current run back to the queue at once

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not stopped:
            raise
        return {"stopped_on": stopped[0]}
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await executor.aclose()


@app.command("worker")
def worker(
    ctx: typer.Context,
    once: Annotated[
        bool, typer.Option("--once", help="Exit when no run is queued or leased (instead of polling).")
    ] = False,
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", min=1, help="Exit after this many runs.")] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local (this process) or ray (default: service.executor).")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster for --executor ray; default: start a local one.")
    ] = None,
    lease: Annotated[
        float | None, typer.Option("--lease", min=0.1, help="Lease seconds (default: service.lease_s).")
    ] = None,
    heartbeat: Annotated[
        float | None,
        typer.Option("--heartbeat", min=0.05, help="Lease renewal interval (default: service.heartbeat_s)."),
    ] = None,
    poll: Annotated[
        float | None, typer.Option("--poll", min=0.01, help="Idle poll interval (default: service.poll_s).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Pull queued runs from the database and execute them, one at a time, until stopped."""
    service = {
        "executor": executor,
        "ray_address": ray_address,
        "lease_s": lease,
        "heartbeat_s": heartbeat,
        "poll_s": poll,
    }
    settings = state(ctx).settings(service=service)
    outcome = asyncio.run(_work(settings, executor, once, max_jobs))
    report: dict[str, Any] = outcome if isinstance(outcome, dict) else dict(vars(outcome))

    def render(value: dict[str, Any]) -> None:
        if "stopped_on" in value:
            typer.echo(f"stopped on {value['stopped_on']}; the current run went back to the queue", err=True)
            return
        typer.echo(
            f"worker {value['worker']}: {value['done']} done, {value['failed']} failed, "
            f"{value['cancelled']} cancelled, {value['lost']} taken over by others"
        )

    emit(report, as_json, render)
