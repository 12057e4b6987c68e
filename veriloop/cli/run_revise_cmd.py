"""`veriloop run revise`: ReVISE self-verification with confidence-aware decoding over K samples, or (`--train`)
its two-stage curriculum on the trajectories of that run.

The method's flags are generated from `ReviseOptions` (`cli/options.py`); training runs inside the agent
(`ReviseAgent.train`), as it does for runs created through the API.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from veriloop.agents.revise.state import ReviseOptions
from veriloop.cli.app import JsonFlag
from veriloop.cli.options import Alias, option_flags
from veriloop.cli.run_cmd import ExecutorOption, LimitOption, TaskIdsOption, run_agent, run_app


@run_app.command("revise")
@option_flags(ReviseOptions, aliases=(Alias("--refinements", "max_refinements"), Alias("--full", "lora", False)))
def run_revise(
    ctx: typer.Context,
    options: dict[str, Any],
    suite: Annotated[str, typer.Option("--suite", help="Task suite name.")] = "humaneval",
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Answer, self-verify with \\[eos] or \\[refine], refine on \\[refine], pick by the model's own confidence.

    The embedded model gets the decision tokens added (embeddings resized) the first time; a curriculum-trained
    checkpoint (`--model checkpoint:ID`) already has them. With --train (use a train split, e.g.
    --suite humaneval-train), the run's stored trajectories then become the curriculum's preference rows:
    stage 1 teaches \\[eos] after right answers and \\[refine] after wrong ones, stage 2 prefers refinements
    that fix the answer. Both checkpoints are registered (ids on stderr); a rerun resumes an interrupted stage.
    """
    run_agent(ctx, "revise", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
