"""`veriloop run f2strans --source cpp --target python --suite transcoder`: translate, test, repair; CA and style.

Suites: `transcoder` (UniTrans-cleaned TransCoder: C++, Java, Python) and `transcoder-gfg` (the
original GfG scripts, also C, Go and Rust). Each task is one function in every language it has;
the direction comes from --source/--target (old spelling: --from/--to), and only functions having both
sides are run (`F2STransAgent.takes`, so API and worker runs of the suite cover the same functions).
With --train, the run's translations then feed one F2STrans round (`F2STransAgent.train`): functional
SFT, then style DPO. The method's flags are generated from `F2STransOptions`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from veriloop.agents.f2strans.state import F2STransOptions
from veriloop.cli.app import JsonFlag, emit
from veriloop.cli.options import Alias, option_flags
from veriloop.cli.run_cmd import ExecutorOption, LimitOption, TaskIdsOption, run_agent, run_app
from veriloop.records import Attempt, Run


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
    source, target = options["source"], options["target"]
    direction = f"{source}->{target}"

    def report(store: Any, finished: Run, attempts: list[Attempt], seconds: float) -> None:
        _report(store, finished, attempts, seconds, suite, direction, as_json)

    run_agent(
        ctx,
        "f2strans",
        suite,
        options,
        limit=limit,
        task_ids=task,
        as_json=as_json,
        executor=executor,
        extra={"direction": direction},
        report=report,
    )


def _report(
    store: Any, finished: Run, attempts: list[Attempt], seconds: float, suite: str, direction: str, as_json: bool
) -> None:
    """Computational accuracy and style of the final answers, as JSON or a per-task table."""
    from veriloop.agents.f2strans.data import summarize

    summary = summarize(store, attempts)
    styles = {a.task_id: _style(store, a.best_node_id) for a in attempts}
    report = {
        "run_id": finished.id,
        "agent": "f2strans",
        "suite": suite,
        "direction": direction,
        "model": finished.model,
        "status": finished.status.value,
        **summary,
        "seconds": round(seconds, 2),
        "attempts": [{**a.model_dump(mode="json"), "style": styles[a.task_id]} for a in attempts],
    }

    def render(_: object) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"f2strans {direction}: {suite} on {finished.model}")
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
