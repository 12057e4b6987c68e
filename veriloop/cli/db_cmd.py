"""`veriloop db upgrade | current`: migrate the store's database and show its schema revision."""

from __future__ import annotations

import typer

from veriloop.cli.app import JsonFlag, app, emit, state

db_app = typer.Typer(help="Manage the store's database schema (Alembic migrations shipped with veriloop).")
app.add_typer(db_app, name="db", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Migrate the database to the revision this veriloop needs (creates a SQLite file and its folder)."""
    from veriloop.store import upgrade_database  # sqlalchemy and alembic load only for store commands

    settings = state(ctx).settings()
    done = upgrade_database(settings.database_url, busy_timeout_ms=settings.store.busy_timeout_ms)
    result = {"url": done.url, "from": done.before, "to": done.after}

    def render(value: dict[str, str | None]) -> None:
        if value["from"] == value["to"]:
            typer.echo(f"database at {value['url']} is already at revision {value['to']}")
        else:
            typer.echo(f"database at {value['url']} upgraded from revision {value['from'] or 'none'} to {value['to']}")

    emit(result, as_json, render)


@db_app.command("current")
def current(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Show the database's revision and the one this veriloop needs."""
    from veriloop.store import database_state

    settings = state(ctx).settings()
    found = database_state(settings.database_url, busy_timeout_ms=settings.store.busy_timeout_ms)
    result = {"url": found.url, "current": found.current, "head": found.head, "up_to_date": found.up_to_date}

    def render(value: dict[str, object]) -> None:
        advice = "up to date" if value["up_to_date"] else "run `veriloop db upgrade`"
        typer.echo(f"{value['url']}: revision {value['current'] or 'none'} (code needs {value['head']}; {advice})")

    emit(result, as_json, render)
