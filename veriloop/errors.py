"""Typed errors for broken input or infrastructure; the CLI turns each into one line and an exit code.

Expected outcomes (a failing test, a refuted postcondition, a timeout) are values in records,
not exceptions. These are for what a user must fix: bad settings, an unknown name, a server
that does not answer, a database that is not migrated.
"""

from __future__ import annotations

from collections.abc import Iterable


class VeriloopError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code: int = 1


class ConfigError(VeriloopError):
    """Settings or arguments are invalid (malformed file, unknown name, bad value)."""

    exit_code = 2


class UnknownNameError(ConfigError):
    """A registry lookup failed; the message lists what exists."""

    def __init__(self, kind: str, name: str, choices: Iterable[str]) -> None:
        options = ", ".join(sorted(choices))
        super().__init__(f"unknown {kind} {name!r}; choose one of: {options}")


class UnavailableError(ConfigError):
    """Something the request needs exists but cannot be had here now (data neither cached nor fetchable)."""


class NotFoundError(VeriloopError):
    """A referenced object (run, node, model, file) does not exist."""

    exit_code = 3


class BackendError(VeriloopError):
    """An inference backend failed: unreachable server, bad model folder, generation error."""

    exit_code = 4


class StoreError(VeriloopError):
    """The trajectory store cannot be used as asked."""

    exit_code = 5


class DatabaseNotMigratedError(StoreError):
    """The database schema is older than this code; `veriloop db upgrade` fixes it."""


class SandboxError(VeriloopError):
    """The sandbox itself failed (not the program inside it)."""

    exit_code = 6


class VerifierError(VeriloopError):
    """A verifier tool is missing or produced output that cannot be understood."""

    exit_code = 7
