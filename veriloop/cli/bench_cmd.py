"""`veriloop bench NAME`: run the benchmark module `veriloop.bench.NAME` and print its JSON."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path
from typing import Annotated

import typer

import veriloop.bench
from veriloop.cli.app import app, state
from veriloop.errors import UnknownNameError


def available_benchmarks() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(veriloop.bench.__path__) if not m.name.startswith("_"))


HELP_FLAGS = ("--help", "-h")


@app.command(
    "bench",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,  # `--help` after NAME belongs to the benchmark; without NAME it shows this help
)
def bench(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Argument(help="Benchmark: one of the modules in veriloop/bench (llm, sandbox, ...).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the JSON to this file.")] = None,
) -> None:
    """Run a performance benchmark; it measures its baseline in the same run and prints JSON with ratios.

    Extra arguments after NAME go to the benchmark; `veriloop bench NAME --help` lists them.
    """
    if name is None or name in HELP_FLAGS:
        typer.echo(ctx.get_help())
        typer.echo(f"\nBenchmarks: {', '.join(available_benchmarks())}")
        raise typer.Exit(0 if name in HELP_FLAGS else 2)
    if name not in available_benchmarks():
        raise UnknownNameError("benchmark", name, available_benchmarks())
    module = importlib.import_module(f"veriloop.bench.{name}")
    result = module.main(state(ctx).settings(), list(ctx.args))
    text = json.dumps(result, indent=2, default=str)
    sys.stdout.write(text + "\n")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
