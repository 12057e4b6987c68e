"""`veriloop run mucode`: multi-turn best-of-N with execution feedback, or (`--train`) μCode's expert iteration.

The method's flags are generated from `MuCodeOptions` (`cli/options.py`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from veriloop.agents.mucode.state import MuCodeOptions
from veriloop.cli.app import JsonFlag
from veriloop.cli.options import Alias, option_flags
from veriloop.cli.run_cmd import ExecutorOption, LimitOption, TaskIdsOption, report_run, run_agent, run_app
from veriloop.records import Attempt, Run

if TYPE_CHECKING:
    from veriloop.store import TrajectoryStore


@run_app.command("mucode")
@option_flags(MuCodeOptions, aliases=(Alias("--n", "samples"), Alias("--select", "selection")))
def run_mucode(
    ctx: typer.Context,
    options: dict[str, Any],
    suite: Annotated[str, typer.Option("--suite", help="Task suite (humaneval-test, mbpp, humaneval-train, ...).")] = (
        "humaneval-test"
    ),
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Solve each task in up to --turns turns, --samples candidates a turn, public-test feedback between turns.

    With --train, run the paper's Algorithm 1 on the suite instead (rollouts, learned verifier,
    expert relabelling, fine-tuning); rerunning the same command skips finished rounds.
    """

    def report(store: TrajectoryStore, run: Run, attempts: list[Attempt], seconds: float) -> None:
        report_run(run, attempts, seconds, as_json)
        if options["train"]:
            _print_rounds(store, run.id)

    run_agent(
        ctx, "mucode", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor, report=report
    )


def _print_rounds(store: TrajectoryStore, run_id: str) -> None:
    """The rounds this run finished, with their generator and verifier ids, on stderr."""
    from veriloop.agents.mucode.training import ITERATION_KIND

    for exemplar in store.list_exemplars(kind=ITERATION_KIND, run_id=run_id):
        payload = exemplar.payload
        print(
            f"round {payload['iteration']}: generator {payload['generator']}, verifier {payload['verifier']}",
            file=sys.stderr,
        )
