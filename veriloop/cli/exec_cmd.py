"""`veriloop exec FILE --lang L`: run a program (optionally with tests) in a sandbox and print its ExecResult."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.errors import ConfigError, NotFoundError
from veriloop.records import ExecResult
from veriloop.sandbox import Job, Limits, Sandbox, StdioCase, default_limits, get_sandbox
from veriloop.sandbox import languages as langs

FIELDS = ("status", "exit_code", "signal", "stdout", "stderr", "wall_s", "cpu_s", "max_rss_mb", "truncated")


def _read(path: Path, what: str) -> str:
    if not path.is_file():
        raise NotFoundError(f"{what} {path} does not exist")
    return path.read_text()


def _cases(text: str, path: Path) -> list[StdioCase]:
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{path} must hold a list of {{'stdin': ..., 'expected': ...}} cases")
    cases = []
    for index, item in enumerate(data):
        if not isinstance(item, dict) or "expected" not in item:
            raise ConfigError(f"case {index} of {path} needs an 'expected' field")
        cases.append(
            StdioCase(
                name=str(item.get("name", f"case_{index + 1}")),
                stdin=str(item.get("stdin", "")),
                expected=str(item["expected"]),
            )
        )
    return cases


def build_job(
    sandbox: Sandbox, lang: str, code: str, tests: Path | None, stdin: str | None, limits: Limits, entry: str | None
) -> Job:
    """Python + a tests file: assert-style tests; a .json tests file: stdin/stdout cases; else a harness program."""
    toolchain = sandbox.toolchain
    if tests is None:
        return langs.program_job(lang, toolchain, code, stdin=stdin, limits=limits)
    text = _read(tests, "tests file")
    if tests.suffix == ".json":
        return langs.stdio_job(lang, toolchain, code, _cases(text, tests), limits=limits)
    if langs.language(lang).name == "python":
        return langs.python_tests_job(toolchain, code, text, entry_point=entry, limits=limits)
    return langs.harness_job(lang, toolchain, code, text, limits=limits)


async def _execute(sandbox: Sandbox, make: Any) -> ExecResult:
    try:
        prepare = getattr(sandbox, "prepare", None)
        if prepare is not None:
            await prepare()
        return await sandbox.run(make())
    finally:
        await sandbox.aclose()


@app.command("exec")
def exec_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Program source file.")],
    lang: Annotated[str, typer.Option("--lang", "-l", help="python, c, cpp, java, javascript, rust or go.")],
    tests: Annotated[
        Path | None,
        typer.Option("--tests", help="Python asserts (HumanEval/MBPP), a .json list of stdio cases, or a harness."),
    ] = None,
    stdin: Annotated[Path | None, typer.Option("--stdin", help="File fed to the program's stdin.")] = None,
    sandbox_name: Annotated[str | None, typer.Option("--sandbox", help="bwrap, docker or process.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Wall-clock seconds per run.")] = None,
    memory: Annotated[int | None, typer.Option("--memory", help="Memory limit in MiB.")] = None,
    entry_point: Annotated[str | None, typer.Option("--entry-point", help="Function the Python tests call.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run FILE in a sandbox; exit 0 when it passed, 1 otherwise (the status says why)."""
    settings = state(ctx).settings(sandbox={"backend": sandbox_name, "timeout_s": timeout, "memory_mb": memory})
    code = _read(file, "program")
    stdin_text = _read(stdin, "stdin file") if stdin is not None else None
    langs.language(lang)
    limits = default_limits(settings)
    sandbox = get_sandbox(settings)
    result = asyncio.run(
        _execute(sandbox, lambda: build_job(sandbox, lang, code, tests, stdin_text, limits, entry_point))
    )

    def render(value: dict[str, Any]) -> None:
        typer.echo(
            f"status: {value['status']}  exit: {value['exit_code']}  wall: {value['wall_s']:.3f}s  "
            f"sandbox: {value['sandbox']}"
        )
        for test in value["tests"]:
            mark = "PASS" if test["passed"] else "FAIL"
            typer.echo(f"  {mark} {test['name']} {test['message'].splitlines()[0] if test['message'] else ''}")
        if value["stdout"]:
            typer.echo("--- stdout\n" + value["stdout"].rstrip())
        if value["stderr"]:
            typer.echo("--- stderr\n" + value["stderr"].rstrip())

    payload = result.model_dump(mode="json")
    emit(payload, as_json, render)
    if not result.passed:
        raise typer.Exit(1)
