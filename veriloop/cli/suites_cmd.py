"""`veriloop suites list | show NAME | validate FILE | schema`: what can be run, where it comes from, and checks."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state

suites_app = typer.Typer(help="Task suites: registered ones, task files and datasets.", no_args_is_help=True)
app.add_typer(suites_app, name="suites")

FormatOption = Annotated[
    str | None, typer.Option("--format", help="Task format (default: detected from the first row).")
]


def _print(text: str) -> None:
    from rich.console import Console

    Console(file=sys.stdout, soft_wrap=True, highlight=False).print(text, markup=False)


@suites_app.command("list")
def suites_list(as_json: JsonFlag = False) -> None:
    """Registered suites with where their data comes from, and the task-file formats `--suite FILE` reads."""
    from veriloop.tasks import ORIGINS, SUITES
    from veriloop.tasks.formats import formats

    report = {
        "suites": [{"name": name, "origin": ORIGINS.get(name, "")} for name in SUITES],
        "formats": [{"name": fmt.name, "origin": fmt.origin} for fmt in formats().values()],
    }

    def render(_: object) -> None:
        from rich.console import Console
        from rich.table import Table

        out = Console(file=sys.stdout, soft_wrap=True)
        table = Table(title="suites (veriloop run METHOD --suite NAME)")
        table.add_column("name")
        table.add_column("data comes from")
        for row in report["suites"]:
            table.add_row(row["name"], row["origin"])
        out.print(table)
        formats_table = Table(title="task formats (--suite FILE | hf:NAME[:SPLIT], FILE#FORMAT to name one)")
        formats_table.add_column("format")
        formats_table.add_column("files like")
        for row in report["formats"]:
            formats_table.add_row(row["name"], row["origin"])
        out.print(formats_table)

    emit(report, as_json, render)


def _summary(suite: Any) -> dict[str, Any]:
    tasks = suite.tasks
    checked = Counter(
        "cases" if task.metadata.get("stdio_cases") else str(task.metadata.get("verifier") or "tests") for task in tasks
    )
    return {
        "name": suite.name,
        "version": suite.version,
        "source": suite.source,
        "tasks": len(tasks),
        "languages": dict(Counter(task.language for task in tasks)),
        "checked_by": dict(checked),
        "with_reference": sum(task.reference is not None for task in tasks),
        "with_public_tests": sum(task.public_tests is not None for task in tasks),
        "first_ids": [task.id for task in tasks[:10]],
    }


def _render_summary(report: dict[str, Any]) -> None:
    lines = [
        f"suite     {report['name']}",
        f"version   {report['version']}",
        f"source    {report['source']}",
        f"tasks     {report['tasks']}",
        f"languages {', '.join(f'{k} {v}' for k, v in report['languages'].items())}",
        f"checked   {', '.join(f'{k} {v}' for k, v in report['checked_by'].items())}",
        f"reference {report['with_reference']}, public tests {report['with_public_tests']}",
        f"first ids {', '.join(report['first_ids'])}",
    ]
    if report.get("origin"):
        lines.insert(3, f"origin    {report['origin']}")
    _print("\n".join(lines))


@suites_app.command("show")
def suites_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A registered suite, a task file, or hf:NAME[:SPLIT].")],
    task: Annotated[str | None, typer.Option("--task", help="Print this task in full instead.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Load a suite and summarise it (count, languages, how tasks are checked, where it comes from)."""
    from veriloop.tasks import ORIGINS, load_suite

    suite = load_suite(name, state(ctx).settings())
    if task is not None:
        chosen = suite.select(ids=(task,)).tasks[0]
        emit(chosen, True)
        return
    report = _summary(suite)
    report["origin"] = ORIGINS.get(name, "")
    emit(report, as_json, lambda _: _render_summary(report))


@suites_app.command("validate")
def suites_validate(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="A task file (JSONL, JSON, Parquet) or hf:NAME[:SPLIT].")],
    format: FormatOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Check every row of a task file against the schema; bad rows are listed by row number and field."""
    from veriloop.tasks.files import TaskFileError, load_task_source

    try:
        suite = load_task_source(path, state(ctx).settings(), format)
    except TaskFileError as exc:
        if as_json:
            emit({"valid": False, "problems": exc.problems}, True)
            raise typer.Exit(exc.exit_code) from None
        raise
    report = {"valid": True, "format": suite.version.split(";", 1)[0], **_summary(suite)}

    def render(_: object) -> None:
        _render_summary(report)
        _print(f"valid: {report['tasks']} task(s)")

    emit(report, as_json, render)


@suites_app.command("schema")
def suites_schema() -> None:
    """The task-file schema (one row) as JSON Schema."""
    from veriloop.tasks.schema import json_schema

    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
