"""The root Typer app, the per-invocation state and the output helpers shared by all commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from veriloop.config import Settings, load_settings

app = typer.Typer(
    name="veriloop",
    help="Agentic code generation and verification: generate, run, verify, store, train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]


@dataclass
class CliState:
    """What the root options set: the settings file and CLI overrides, resolved on first use."""

    config_file: Path | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings(self, **section_overrides: dict[str, Any]) -> Settings:
        layered = {name: dict(values) for name, values in self.overrides.items()}
        for section, values in section_overrides.items():
            kept = {key: value for key, value in values.items() if value is not None}
            if kept:
                layered.setdefault(section, {}).update(kept)
        return load_settings(self.config_file, **layered)


@app.callback()
def root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Settings file (default: ./veriloop.toml, or $VERILOOP_CONFIG)."),
    ] = None,
    home: Annotated[Path | None, typer.Option("--home", help="Folder for the database, caches and exports.")] = None,
    database: Annotated[str | None, typer.Option("--database", help="SQLAlchemy URL of the store.")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Inference backend name.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model for the inference backend.")] = None,
) -> None:
    """Settings come from defaults, veriloop.toml, VERILOOP_* variables and these flags, in that order."""
    overrides: dict[str, dict[str, Any]] = {}
    for section, key, value in (
        ("paths", "home", home),
        ("store", "url", database),
        ("llm", "backend", backend),
        ("llm", "model", model),
    ):
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    ctx.obj = CliState(config_file=config, overrides=overrides)


def state(ctx: typer.Context) -> CliState:
    """The CliState of this invocation (a default one when a command runs without the root callback)."""
    if not isinstance(ctx.obj, CliState):
        ctx.obj = CliState()
    return ctx.obj


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: to_jsonable(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def emit(value: Any, as_json: bool, render: Callable[[Any], None] | None = None) -> None:
    """Print `value` as JSON (machine output) or through `render` (people)."""
    if as_json or render is None:
        json.dump(to_jsonable(value), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        render(value)
