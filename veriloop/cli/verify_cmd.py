"""`veriloop verify FILE --verifier NAME`: verify a program (with its spec guard and the store's cache)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.errors import NotFoundError
from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.verifiers.base import VERIFIERS

SUFFIX = {".py": "python", ".c": "c", ".cpp": "cpp", ".java": "java", ".js": "javascript", ".rs": "rust", ".go": "go"}
FIELDS = ("status", "verified", "errors", "score", "tool", "version", "duration_s", "cache_hit", "reason")


def _read(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    if not path.is_file():
        raise NotFoundError(f"{what} {path} does not exist")
    return path.read_text()


async def _verify(verifier: Any, candidate: Candidate, task: Task) -> VerifyResult:
    try:
        result: VerifyResult = await verifier.verify(candidate, task)
        return result
    finally:
        await verifier.aclose()


@app.command("verify")
def verify_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Program to verify.")],
    verifier_name: Annotated[
        str, typer.Option("--verifier", "-v", help=f"A registered verifier: {', '.join(VERIFIERS)}.")
    ],
    spec: Annotated[
        Path | None, typer.Option("--spec", help="The task's specification: its requires/ensures must be kept.")
    ] = None,
    tests: Annotated[Path | None, typer.Option("--tests", help="Tests for the `tests` verifier.")] = None,
    task_id: Annotated[
        str | None, typer.Option("--task", help="A stored task (veriloop's store) whose spec and tests apply.")
    ] = None,
    entry_point: Annotated[str | None, typer.Option("--entry-point", help="Function the Python tests call.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Wall-clock seconds for the verifier.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the cache.")] = False,
    no_guard: Annotated[bool, typer.Option("--no-guard", help="Skip the spec guard.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Verify FILE and print the VerifyResult; exit 0 when verified, 1 otherwise."""
    from veriloop.store import TrajectoryStore
    from veriloop.verifiers import get_verifier
    from veriloop.verifiers.target import verifier_target

    settings = state(ctx).settings(verifiers={"timeout_s": timeout}, sandbox={"timeout_s": timeout})
    target = verifier_target(verifier_name)  # an unknown name fails listing the registered ones
    code = _read(file, "program") or ""
    language = target.language or SUFFIX.get(file.suffix, "python")
    task = Task(
        id=file.stem,
        suite="cli",
        prompt="",
        language=language,
        entry_point=entry_point,
        tests=_read(tests, "tests file") or "",
        spec=_read(spec, "spec file"),
    )
    if task_id is not None:
        with TrajectoryStore.from_settings(settings) as tasks:
            stored = tasks.get_task(task_id)
        given = {"spec": task.spec, "tests": task.tests or None, "entry_point": entry_point}
        task = stored.model_copy(update={key: value for key, value in given.items() if value is not None})
    store = None if no_cache or not settings.verifiers.cache else TrajectoryStore.from_settings(settings)
    try:
        verifier = get_verifier(settings, verifier_name, store=store, guard=not no_guard)
        result = asyncio.run(_verify(verifier, Candidate(task_id=task.id, code=code, language=language), task))
    finally:
        if store is not None:
            store.close()

    def render(value: dict[str, Any]) -> None:
        hit = "  (cached)" if value["cache_hit"] else ""
        counts = f"{value['verified']} verified, {value['errors']} errors"
        tool = f"{value['tool']} {value['version']}"
        typer.echo(f"{value['status']}: {counts}  score {value['score']:.3f}  {tool}  {value['duration_s']:.2f}s{hit}")
        if value["reason"]:
            typer.echo(f"reason: {value['reason']}")
        for diag in value["diagnostics"]:
            where = f"{diag['line']}:{diag['column']}" if diag["line"] is not None else "-"
            typer.echo(f"  {diag['severity']} [{diag['class']}] {where} {diag['message']}")

    payload = result.model_dump(mode="json", by_alias=True)
    payload["diagnostics"] = [
        {key: diag[key] for key in ("severity", "class", "message", "line", "column")}
        for diag in payload["diagnostics"]
    ]
    emit({key: payload[key] for key in (*FIELDS, "diagnostics")}, as_json, render)
    if result.status is not VerifyStatus.VERIFIED:
        raise typer.Exit(1)
