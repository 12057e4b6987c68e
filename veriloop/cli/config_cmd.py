"""`veriloop config show`: the effective settings after every layer."""

from __future__ import annotations

import typer

from veriloop.cli.app import JsonFlag, app, emit, state

config_app = typer.Typer(help="Inspect settings.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def show(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Print the effective settings (defaults < veriloop.toml < VERILOOP_* env < flags)."""
    settings = state(ctx).settings()
    values = settings.model_dump(mode="json")
    values["database_url"] = settings.database_url

    def render(data: dict[str, object]) -> None:
        for section, fields in data.items():
            if isinstance(fields, dict):
                typer.echo(f"[{section}]")
                for key, value in fields.items():
                    typer.echo(f"{key} = {value!r}")
                typer.echo("")
            else:
                typer.echo(f"# {section} = {fields}")

    emit(values, as_json, render)
