"""`veriloop run f2strans --source cpp --target python --suite transcoder`: translate, test, repair; CA and style.

Suites: `transcoder` (UniTrans-cleaned TransCoder: C++, Java, Python) and `transcoder-gfg` (the
original GfG scripts, also C, Go and Rust). Each task is one function in every language it has;
the direction comes from --source/--target (old spelling: --from/--to), and only functions having both
sides are run. With --train, the run's translations then feed one F2STrans round (`F2STransAgent.train`):
functional SFT, then style DPO. The method's flags are generated from `F2STransOptions`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import typer

from veriloop.agents.f2strans.state import F2STransOptions
from veriloop.cli.app import JsonFlag, emit, state
from veriloop.cli.options import Alias, option_flags
from veriloop.cli.run_cmd import ExecutorOption, LimitOption, TaskIdsOption, _execute, executor_name, run_app


@run_app.command("f2strans")
@option_flags(F2STransOptions, aliases=(Alias("--from", "source"), Alias("--to", "target")))
def run_f2strans(
    ctx: typer.Context,
    options: dict[str, Any],
    suite: Annotated[str, typer.Option("--suite", help="Translation suite: transcoder or transcoder-gfg.")] = (
        "transcoder"
    ),
    limit: LimitOption = None,
    task: TaskIdsOption = None,
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

    make_agent("f2strans", options)  # a bad direction fails before the suite is read
    source, target = options["source"], options["target"]
    settings = state(ctx).settings()
    executor = executor_name(settings, executor)
    ids = list(task or [])
    if not ids:
        ids = [t.id for t in load_suite(suite, settings).tasks if has_direction(t, source, target)]
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store,
            settings,
            agent="f2strans",
            suite=suite,
            options=options,
            limit=limit,
            task_ids=ids,
            extra={"direction": f"{source}->{target}"},
        )
    total = len(suite_of(run, settings).tasks)
    finished, attempts, seconds = asyncio.run(_execute(settings, run, total, executor))
    with TrajectoryStore.from_settings(settings) as store:
        summary = summarize(store, attempts)
        styles = {a.task_id: _style(store, a.best_node_id) for a in attempts}
    report = {
        "run_id": finished.id,
        "agent": "f2strans",
        "suite": suite,
        "direction": f"{source}->{target}",
        "model": finished.model,
        "status": finished.status.value,
        **summary,
        "seconds": round(seconds, 2),
        "attempts": [{**a.model_dump(mode="json"), "style": styles[a.task_id]} for a in attempts],
    }

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
        out.print(
            f"computational accuracy {summary['passed']}/{summary['n']}"
            f" = {summary['computational_accuracy']}, style {summary['style']}"
            f" (passing only: {summary['style_passing']}) in {seconds:.1f} s"
        )
        out.print(f"run id: {finished.id}  (details: veriloop runs show {finished.id})")

    emit(report, as_json, render)


def _style(store: Any, node_id: str | None) -> float | None:
    if node_id is None:
        return None
    value = (store.get_node(node_id).metadata.get("style") or {}).get("score")
    return None if value is None else float(value)
