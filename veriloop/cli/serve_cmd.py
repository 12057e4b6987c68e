"""`veriloop serve`: dashboard, REST API, OpenAI-compatible API and job loops under uvicorn, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from veriloop.cli.app import JsonFlag, app, state


@app.command("serve")
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Interface to bind (default: service.host).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port to bind (default: service.port).")] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=0, help="Job loops beside the API (default: service.workers); 0 = queue only."),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option("--executor", help="How queued runs execute: local or ray (default: service.executor)."),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster for --executor ray; default: start a local one.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Serve the dashboard (/), the REST API (/api), the OpenAI-compatible API (/v1) and /health.

    Runs queued through the API or the dashboard execute in this process's job loops (sharing its
    model), or in `veriloop worker` processes when started with --workers 0. Prints the URLs once the
    server accepts requests (one JSON line with --json) and stops cleanly on SIGINT or SIGTERM.
    """
    from veriloop.service.server import serve as run_server  # fastapi and uvicorn load only for this command

    service = {"host": host, "port": port, "workers": workers, "executor": executor, "ray_address": ray_address}
    settings = state(ctx).settings(service=service)
    stop_signal = asyncio.run(run_server(settings, as_json=as_json))
    if stop_signal is not None:
        typer.echo(f"stopped on {signal.Signals(stop_signal).name}", err=True)
