"""`veriloop run f2strans --from cpp --to python --suite transcoder`: translate, test, repair; CA and style.

Suites: `transcoder` (UniTrans-cleaned TransCoder: C++, Java, Python) and `transcoder-gfg` (the
original GfG scripts, also C, Go and Rust). Each task is one function in every language it has;
the direction comes from --from/--to, and only functions having both sides are run. With --train,
the run's translations then feed one F2STrans round: functional SFT, then style DPO.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag, emit, state
from veriloop.cli.run_cmd import (
    ConcurrencyOption,
    ExecutorOption,
    LimitOption,
    TaskIdsOption,
    _execute,
    executor_name,
    run_app,
)
from veriloop.config import Settings
from veriloop.records import Task


@run_app.command("f2strans")
def run_f2strans(
    ctx: typer.Context,
    source: Annotated[str, typer.Option("--from", help="Language translated from: cpp, java, python, c, go, rust.")] = (
        "cpp"
    ),
    target: Annotated[str, typer.Option("--to", help="Language translated to (its test program judges).")] = "python",
    suite: Annotated[str, typer.Option("--suite", help="Translation suite: transcoder or transcoder-gfg.")] = (
        "transcoder"
    ),
    turns: Annotated[int, typer.Option("--turns", min=1, max=10, help="k: one translation plus k-1 repairs.")] = 3,
    samples: Annotated[int, typer.Option("--samples", min=1, max=16, help="First-turn candidates.")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, help="First-turn temperature.")] = 0.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per reply at most.")] = 384,
    linter: Annotated[bool, typer.Option("--linter/--no-linter", help="Lint candidates for the style score.")] = True,
    train: Annotated[
        bool, typer.Option("--train", help="Then train one round on this run: functional SFT, then style DPO.")
    ] = False,
    sft_steps: Annotated[int, typer.Option("--sft-steps", min=1, help="Functional SFT steps (--train).")] = 30,
    dpo_steps: Annotated[int, typer.Option("--dpo-steps", min=1, help="Style DPO steps (--train).")] = 20,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Translate each function, compile and test it in the target language, repair with the feedback.

    Reports computational accuracy (share of functions whose translation passes its tests) and the
    mean style score (similarity to the human reference plus linter cleanliness) of the final answers.
    With --train (sample several candidates: --samples 4 --temperature 0.8), the functions' reference
    pairs and passing translations become SFT rows, and the best-styled passing candidate is preferred
    over failing or plainer ones for DPO; both checkpoints are registered (ids on stderr).
    """
    from veriloop.agents.base import make_agent
    from veriloop.agents.f2strans.data import summarize
    from veriloop.agents.runner import create_run, suite_of
    from veriloop.store import TrajectoryStore
    from veriloop.tasks import load_suite
    from veriloop.tasks.transcoder import has_direction

    options: dict[str, Any] = {
        "source": source, "target": target, "turns": turns, "samples": samples, "temperature": temperature,
        "max_tokens": max_tokens, "linter": linter, "concurrency": concurrency,
    }  # fmt: skip
    make_agent("f2strans", options)  # a bad direction fails before the suite is read
    settings = state(ctx).settings()
    executor = executor_name(settings, executor)
    ids = list(task or [])
    if not ids:
        ids = [t.id for t in load_suite(suite, settings).tasks if has_direction(t, source, target)]
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="f2strans", suite=suite, options=options, limit=limit, task_ids=ids,
                         extra={"direction": f"{source}->{target}"})  # fmt: skip
    total = len(suite_of(run, settings).tasks)
    finished, attempts, seconds = asyncio.run(_execute(settings, run, total, executor))
    with TrajectoryStore.from_settings(settings) as store:
        summary = summarize(store, attempts)
        styles = {a.task_id: _style(store, a.best_node_id) for a in attempts}
    report = {
        "run_id": finished.id, "agent": "f2strans", "suite": suite, "direction": f"{source}->{target}",
        "model": finished.model, "status": finished.status.value, **summary, "seconds": round(seconds, 2),
        "attempts": [{**a.model_dump(mode="json"), "style": styles[a.task_id]} for a in attempts],
    }  # fmt: skip

    def render(_: object) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"f2strans {source}->{target}: {suite} on {finished.model}")
        for column in ("task", "passed", "tests", "style", "tokens"):
            table.add_column(column)
        for attempt in attempts:
            mark = (
                "[green]yes[/]"
                if attempt.status == "passed"
                else f"[red]{'no' if attempt.status == 'failed' else attempt.status}[/]"
            )
            score = "-" if attempt.score is None else f"{attempt.score:.2f}"
            style = styles[attempt.task_id]
            table.add_row(attempt.task_id, mark, score, "-" if style is None else f"{style:.3f}", str(attempt.tokens))
        out = Console(file=sys.stdout, soft_wrap=True)
        out.print(table)
        out.print(f"computational accuracy {summary['passed']}/{summary['n']}"
                  f" = {summary['computational_accuracy']}, style {summary['style']}"
                  f" (passing only: {summary['style_passing']}) in {seconds:.1f} s")  # fmt: skip
        out.print(f"run id: {finished.id}  (details: veriloop runs show {finished.id})")

    emit(report, as_json, render)
    if train:
        tasks = suite_of(finished, settings).tasks
        _train_round(settings, finished.id, tasks, source, target, sft_steps, dpo_steps, linter)


def _train_round(
    settings: Settings,
    run_id: str,
    tasks: Sequence[Task],
    source: str,
    target: str,
    sft_steps: int,
    dpo_steps: int,
    linter: bool,
) -> None:
    """One functional + style round on the run's stored translations; the checkpoints go to stderr."""
    from veriloop.agents.f2strans.data import functional_rows, nodes_of_runs, style_rows
    from veriloop.agents.f2strans.training import RoundSpec, train_round
    from veriloop.store import TrajectoryStore
    from veriloop.training.common import stderr_progress

    with TrajectoryStore.from_settings(settings) as store:
        nodes = nodes_of_runs(store, [run_id])
    sft = functional_rows(tasks, source, target, nodes)
    pairs = style_rows(tasks, source, target, nodes, linter=linter)
    print(f"training: {len(sft)} functional rows, {len(pairs)} style pairs", file=sys.stderr)
    folder = settings.paths.home / "checkpoints" / f"f2strans-{run_id[:12]}"
    spec = RoundSpec(sft_steps=sft_steps, dpo_steps=dpo_steps)
    report = train_round(settings, sft, pairs, folder, spec, progress=stderr_progress)
    for stage in ("sft", "dpo"):
        if stage in report:
            print(f"{stage}: {report[stage]['model']}", file=sys.stderr)
    if not pairs:
        print("dpo: skipped (no style pairs: sample more candidates, e.g. --samples 4 --temperature 0.8)",
              file=sys.stderr)  # fmt: skip
    print(f"use it with: veriloop --model {report['model']} run f2strans ...", file=sys.stderr)


def _style(store: Any, node_id: str | None) -> float | None:
    if node_id is None:
        return None
    value = (store.get_node(node_id).metadata.get("style") or {}).get("score")
    return None if value is None else float(value)
