"""The `veriloop` command line: one Typer app, commands grouped by module, errors as one line."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click
import typer

from veriloop.cli.app import app
from veriloop.errors import VeriloopError

# Each `*_cmd` module of this package registers its commands on `app` when imported.
for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_cmd"):
        importlib.import_module(f"{__name__}.{_module.name}")

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
