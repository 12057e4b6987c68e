"""`veriloop run revise`: ReVISE self-verification with confidence-aware decoding over K samples."""

from __future__ import annotations

from typing import Annotated

import typer

from veriloop.cli.app import JsonFlag, state
from veriloop.cli.run_cmd import ConcurrencyOption, LimitOption, TaskIdsOption, run_agent, run_app


@run_app.command("revise")
def run_revise(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Task suite name.")] = "humaneval",
    samples: Annotated[int, typer.Option("--samples", min=1, max=64, help="K trajectories per task.")] = 4,
    refinements: Annotated[
        int, typer.Option("--refinements", min=0, max=8, help="Attempts after \\[refine] per trajectory at most.")
    ] = 2,
    selection: Annotated[
        str, typer.Option("--selection", help="confidence (ReVISE), majority, or first.")
    ] = "confidence",
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, max=2.0, help="Sampling temperature.")] = 0.7,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per attempt at most.")] = 320,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    as_json: JsonFlag = False,
) -> None:
    """Answer, self-verify with \\[eos] or \\[refine], refine on \\[refine], pick by the model's own confidence.

    The embedded model gets the decision tokens added (embeddings resized) the first time; a curriculum-trained
    checkpoint (`--model checkpoint:ID`) already has them.
    """
    from veriloop.agents.revise.curriculum import ensure_decision_tokens

    settings = ensure_decision_tokens(state(ctx).settings())
    options = {
        "samples": samples,
        "max_refinements": refinements,
        "selection": selection,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "concurrency": concurrency,
    }
    run_agent(ctx, "revise", suite, options, limit=limit, task_ids=task, as_json=as_json, settings=settings)
