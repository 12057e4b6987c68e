"""The `veriloop` command line: one Typer app, commands grouped by module, errors as one line."""

from __future__ import annotations

import sys

import click
import typer

from veriloop.cli import config_cmd  # noqa: F401  (registers commands)
from veriloop.cli.app import app
from veriloop.errors import VeriloopError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Console entry point: typed errors become `error: ...` on stderr and a non-zero exit code."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="veriloop", standalone_mode=False)
    except VeriloopError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        typer.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
