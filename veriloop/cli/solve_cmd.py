"""`veriloop solve FILE`: one program, one method, one stored run: fill in a proof, fix code, or translate.

* a Dafny (`.dfy`), Nagini (`.py` without `--tests`) or Verus (`.rs`) program whose proof is missing or
  broken: AlphaVerus's Treefinement searches for the proof; `--spec` is the specification it must keep
  (default: the file itself, so the guard rejects a proof that weakens what the file promises);
* a Python file with `--tests`: μCode repairs it against the tests;
* a source file with `--to LANG`: F2STrans translates it, judged by `--tests` (the target's test program)
  when given; without it the translation is only built and run (`sandbox/build_only.py`), and the verdict
  says it was not functionally checked.

The program becomes a one-task file under `home/solves/` and runs through the same runner as
`veriloop run`, so `veriloop runs show` and the dashboard see it. Progress (each node as it is
stored) streams to stderr; stdout gets the verdict, the final program and its diff against the input.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.config import Settings
from veriloop.errors import ConfigError, NotFoundError, VerifierError
from veriloop.records import Attempt, Candidate, Node, Run, VerifyStatus
from veriloop.verifiers.target import proof_verifier, verifier_target

if TYPE_CHECKING:
    from veriloop.store import TrajectoryStore

EXTENSIONS = {
    ".dfy": "dafny",
    ".py": "python",
    ".rs": "rust",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".cxx": "cpp",
    ".java": "java",
    ".c": "c",
    ".go": "go",
}
NOT_CHECKED = "no --tests: the translation was only built and run, not functionally checked"


@dataclass
class Plan:
    """What `solve` will run: the method, its options, the task row, and how to judge the input first."""

    method: str
    options: dict[str, Any]
    row: dict[str, Any]
    target: str
    language: str
    notes: list[str] = field(default_factory=list)
    functional: bool = True
    """False when nothing checks what the program computes (a translation without --tests)."""


def _read(path: Path, what: str) -> str:
    if not path.is_file():
        raise NotFoundError(f"{what} {path} does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not UTF-8 text") from None


def _python_parses(code: str, path: Path) -> None:
    import ast

    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise ConfigError(
            f"{path} does not parse as Python (line {exc.lineno}: {exc.msg}); fix the syntax first"
        ) from None


def plan_solve(
    path: Path,
    code: str,
    *,
    spec: str | None,
    tests: str | None,
    to: str | None,
    source: str | None,
    width: int,
    depth: int,
    turns: int,
    n: int,
    max_tokens: int,
) -> Plan:
    """Choose the method from the file and the flags (a ConfigError for a combination that cannot be solved)."""
    from veriloop.tasks.transcoder import EXTENSIONS as TRANSLATABLE

    language = source or EXTENSIONS.get(path.suffix.lower())
    if language is None:
        raise ConfigError(f"cannot tell the language of {path.name}; name it with --from")
    stem = path.stem or "program"
    if to is not None:
        if to not in TRANSLATABLE or language not in TRANSLATABLE:
            raise ConfigError(f"F2STrans translates between {', '.join(TRANSLATABLE)}; got {language} -> {to}")
        if language == to:
            raise ConfigError("--to must differ from the file's language")
        functional = tests is not None
        if tests is None:
            from veriloop.sandbox.build_only import build_only_program

            tests = build_only_program(to)
        if language == "python":
            _python_parses(code, path)
        from veriloop.tasks.formats.codegen import task_row
        from veriloop.tasks.transcoder import transcoder_task

        task = transcoder_task("solve", stem, {language: code, to: ""}, {to: tests}, "solve")
        options = {"source": language, "target": to, "turns": turns, "samples": n, "max_tokens": max_tokens}
        row = {**task_row(task), "id": stem, "prompt": code}  # the suite's default direction is cpp -> python
        notes = []
        if not functional:
            notes = [NOT_CHECKED]
            row["metadata"] = {**row.get("metadata", {}), "check": NOT_CHECKED}
        return Plan("f2strans", options, row, "tests", to, notes, functional)
    if tests is not None:
        if language != "python":
            raise ConfigError("--tests repairs Python programs (μCode); to translate, add --to LANG")
        _python_parses(code, path)
        prompt = (
            "Fix this Python program so that it passes its tests. Reply with the whole corrected program.\n\n"
            f"```python\n{code.rstrip()}\n```"
        )
        row = {"id": stem, "prompt": prompt, "tests": tests, "public_tests": tests, "reference": None}
        options = {"turns": turns, "n": n, "max_tokens": max_tokens}
        return Plan("mucode", options, row, "tests", "python")
    target = proof_verifier(language)  # the verifier that proves a file in this language
    if target is None:
        raise ConfigError(f"a {language} file needs --to LANG (translate) or, for Python, --tests (repair)")
    if language == "python":
        _python_parses(code, path)
    row = {
        "id": stem,
        "prompt": code,
        "language": language,
        "spec": spec if spec is not None else code,
        "verifier": target,
        # the target's descriptor says how a lone program is posed (Dafny's: the hints prompt of DafnyBench's task)
        "mode": verifier_target(target).solve_mode,
    }
    options = {"target": target, "mode": "inference", "width": width, "depth": depth, "max_tokens": max_tokens}
    return Plan("alphaverus", options, row, target, language)


async def precheck(settings: Settings, plan: Plan, code: str) -> VerifyStatus | None:
    """The verifier's verdict on the input as it is (None for test-judged methods): a syntax error stops here."""
    if plan.method != "alphaverus":
        return None
    from veriloop.tasks.schema import TaskSpec, to_task
    from veriloop.verifiers import get_verifier

    task = to_task(TaskSpec.model_validate(plan.row), "solve", "solve/input")
    verifier = get_verifier(settings, plan.target, guard=False, cache=False)
    try:
        result = await verifier.verify(Candidate(task_id=task.id, code=code, language=task.language), task)
    finally:
        await verifier.aclose()
    if result.status is VerifyStatus.SYNTAX_ERROR:
        first = next((d for d in result.diagnostics if d.severity == "error"), None)
        where = (
            f" (line {first.line}: {first.message})"
            if first and first.line
            else (f": {first.message}" if first else "")
        )
        raise ConfigError(f"the program does not parse for {plan.target}{where}; fix the syntax first")
    if result.status is VerifyStatus.INFRA_ERROR:
        raise VerifierError(f"{plan.target} could not check the program: {result.reason or 'tool failure'}")
    return result.status


def task_file(settings: Settings, plan: Plan) -> Path:
    """The one-task file the run reads (content-addressed, so the same solve resumes from the same file)."""
    text = json.dumps(plan.row, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    path = settings.paths.home / "solves" / f"{plan.row['id']}-{digest}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text + "\n", encoding="utf-8")
    return path


def _describe(node: Node) -> str:
    verdict = node.verify_result.status.value if node.verify_result else None
    if verdict is None and node.exec_result is not None:
        verdict = node.exec_result.status.value
    score = "-" if node.score is None else f"{node.score:.2f}"
    return f"  node {node.id[:8]} depth {node.depth} {node.role}: {verdict or 'no program'}, score {score}"


async def _run(settings: Settings, run: Run, quiet: bool) -> tuple[Run, list[Attempt]]:
    from veriloop.agents.runner import execute_run
    from veriloop.store import TrajectoryStore

    with TrajectoryStore.from_settings(settings) as store:
        seen: set[str] = set()

        def report_new() -> None:
            for node in store.list_nodes(run.id):
                if node.id not in seen:
                    seen.add(node.id)
                    if not quiet:
                        print(_describe(node), file=sys.stderr, flush=True)

        async def watch() -> None:
            while True:
                await asyncio.sleep(0.5)
                await asyncio.to_thread(report_new)

        watcher = asyncio.create_task(watch())
        try:
            return await execute_run(settings, store, run.id)
        finally:
            watcher.cancel()
            await asyncio.to_thread(report_new)


def final_program(store: TrajectoryStore, attempt: Attempt | None) -> tuple[str | None, Node | None]:
    if attempt is None or attempt.best_node_id is None:
        return None, None
    node = store.get_node(attempt.best_node_id)
    return node.code, node


def verdict_of(plan: Plan, attempt: Attempt | None, node: Node | None) -> str:
    """`verified` / `passed` when solved; otherwise what the best program got (failed, rejected, ...)."""
    solved = attempt is not None and attempt.status == "passed"
    if plan.method == "alphaverus":
        if solved:
            return "verified"
        if node is not None and node.verify_result is not None:
            return f"not verified ({node.verify_result.status.value})"
        return "not verified (no program)"
    if not plan.functional:
        return "builds and runs (not functionally checked: no --tests)" if solved else "failed to build or run"
    return "passed" if solved else "failed"


def unified(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@app.command("solve")
def solve(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The program: .dfy, .py, .rs, or any source with --to.")],
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Specification the proof must keep (default: the file's own).")
    ] = None,
    tests: Annotated[
        Path | None, typer.Option("--tests", help="Python tests to repair against (μCode), or the --to test program.")
    ] = None,
    to: Annotated[str | None, typer.Option("--to", help="Translate into this language (F2STrans).")] = None,
    source: Annotated[
        str | None, typer.Option("--from", help="The file's language (default: from its suffix).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the final program here.")] = None,
    width: Annotated[int, typer.Option("--width", min=1, max=64, help="Treefinement width (proofs).")] = 4,
    depth: Annotated[int, typer.Option("--depth", min=1, max=16, help="Treefinement depth (proofs).")] = 2,
    turns: Annotated[int, typer.Option("--turns", min=1, max=10, help="Repair turns (μCode, F2STrans).")] = 3,
    n: Annotated[int, typer.Option("--n", min=1, max=16, help="Candidates per turn (μCode, F2STrans).")] = 1,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per reply at most.")] = 512,
    as_json: JsonFlag = False,
) -> None:
    """Fill in a proof (Dafny, Nagini, Verus), fix a Python program against tests, or translate a program."""
    from veriloop.agents.runner import create_run
    from veriloop.store import TrajectoryStore

    settings = state(ctx).settings()
    code = _read(file, "program")
    plan = plan_solve(
        file,
        code,
        spec=_read(spec, "spec") if spec else None,
        tests=_read(tests, "tests") if tests else None,
        to=to,
        source=source,
        width=width,
        depth=depth,
        turns=turns,
        n=n,
        max_tokens=max_tokens,
    )
    before = asyncio.run(precheck(settings, plan, code))
    if before is VerifyStatus.VERIFIED:
        done = {
            "verdict": "verified",
            "method": plan.method,
            "run_id": None,
            "program": code,
            "diff": "",
            "note": "the program already verifies; nothing to do",
        }
        emit(done, as_json, lambda _: print(f"verified: {file} already verifies with {plan.target}; nothing to do"))
        return
    if not as_json:
        print(f"{plan.method} on {file} ({plan.target}); progress below", file=sys.stderr, flush=True)
    path = task_file(settings, plan)
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store,
            settings,
            agent=plan.method,
            suite=str(path),
            options=plan.options,
            extra={"solve": {"file": str(file.resolve()), "method": plan.method}},
        )
    finished, attempts = asyncio.run(_run(settings, run, quiet=as_json))
    attempt = attempts[0] if attempts else None
    with TrajectoryStore.from_settings(settings) as store:
        program, node = final_program(store, attempt)
    verdict = verdict_of(plan, attempt, node)
    if program is not None and code.endswith("\n") and not program.endswith("\n"):
        program += "\n"  # extracted code blocks lose the final newline; keep the file's
    diff = unified(code, program, file.name) if program is not None else ""
    if out is not None and program is not None:
        out.write_text(program, encoding="utf-8")
    report: dict[str, Any] = {
        "verdict": verdict,
        "functionally_checked": plan.functional,
        "method": plan.method,
        "run_id": finished.id,
        "status": finished.status.value,
        "program": program,
        "diff": diff,
        "out": str(out) if out is not None and program is not None else None,
        "attempt": attempt,
    }

    def render(_: object) -> None:
        print(f"verdict: {verdict}")
        for note in plan.notes:
            print(f"note: {note}")
        if program is None:
            print("no program was produced")
        else:
            print(f"--- final program ({'written to ' + str(out) if out else 'use --out FILE to save it'}) ---")
            print(program.rstrip("\n"))
            print("--- diff against the input ---")
            print(diff.rstrip("\n") if diff else "(no changes)")
        print(f"run id: {finished.id}  (details: veriloop runs show {finished.id})")

    emit(report, as_json, render)
