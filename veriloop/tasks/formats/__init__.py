"""Readers for the public task formats people already have on disk, each turning one row into a task-file row.

A format detects itself from a row's keys (`detect`) or is named with `--format`; `convert` returns a
dict in the task-file schema (`veriloop.tasks.schema.TaskSpec`) and raises `KeyError(field)` for a
missing field or `ValueError` for a bad one. Formats whose tests need computing (EvalPlus's expected
outputs) also have a `finish` step, run once per file in the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """Where the rows come from (a format may read files beside them, as TransCoder's test programs)."""

    path: Path | None = None


Finish = Callable[[list[dict[str, Any]], Settings], list[dict[str, Any]]]


@dataclass(frozen=True)
class Format:
    """One public format: how to recognise a row, convert it, and where such files come from."""

    name: str
    detect: Callable[[Row], bool]
    convert: Callable[[Row, Context], dict[str, Any]]
    origin: str
    finish: Finish | None = None


def _formats() -> list[Format]:
    from veriloop.tasks.formats import codegen, stdio_formats, verify_formats

    # Order matters: the first format whose `detect` accepts the first row wins (EvalPlus rows are also HumanEval rows).
    return [
        codegen.EVALPLUS,
        codegen.HUMANEVAL,
        codegen.MBPP,
        stdio_formats.APPS,
        stdio_formats.CODECONTESTS,
        stdio_formats.LIVECODEBENCH,
        verify_formats.DAFNYBENCH,
        verify_formats.TRANSCODER,
        codegen.NATIVE,
    ]


def formats() -> dict[str, Format]:
    """Every format by name, in detection order."""
    return {fmt.name: fmt for fmt in _formats()}


def get_format(name: str) -> Format:
    known = formats()
    if name not in known:
        raise ConfigError(f"unknown task format {name!r}; choose one of: {', '.join(known)}")
    return known[name]


def detect(rows: Sequence[Row]) -> Format:
    """The format of the first row (a file holds one format)."""
    if not rows:
        raise ConfigError("the task file has no rows")
    first = rows[0]
    for fmt in _formats():
        if fmt.detect(first):
            return fmt
    keys = ", ".join(sorted(first)[:12])
    raise ConfigError(f"cannot tell the format of row 1 (keys: {keys}); name it with --format (or FILE#FORMAT)")
