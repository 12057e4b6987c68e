"""The `veriloop` command line: one Typer app, commands grouped by module, errors as one line."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from veriloop.cli.app import app
from veriloop.errors import VeriloopError

# Each `*_cmd` module of this package registers its commands on `app` when imported.
for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_cmd"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Console entry point: typed errors become `error: ...` on stderr and a non-zero exit code.

    Typer runs in standalone mode, so usage errors print its own help-style message; our typed
    errors pass through it and are reported here as one line, never as a traceback.
    """
    try:
        app(args=argv, prog_name="veriloop")
    except VeriloopError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        typer.echo(str(exc.code), err=True)
        return 1
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
