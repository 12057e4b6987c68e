"""`veriloop serve`: the service (OpenAI-compatible API today) under uvicorn, until SIGINT or SIGTERM."""

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
    as_json: JsonFlag = False,
) -> None:
    """Serve the OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) and /health.

    Prints the URL once the server accepts requests (one JSON line with --json) and stops cleanly on
    SIGINT or SIGTERM, closing the backend.
    """
    from veriloop.service.server import serve as run_server  # fastapi and uvicorn load only for this command

    settings = state(ctx).settings(service={"host": host, "port": port})
    stop_signal = asyncio.run(run_server(settings, as_json=as_json))
    if stop_signal is not None:
        typer.echo(f"stopped on {signal.Signals(stop_signal).name}", err=True)
