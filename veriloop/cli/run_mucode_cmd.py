"""`veriloop run mucode`: multi-turn best-of-N with execution feedback, or (`--train`) μCode's expert iteration."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from veriloop.cli.app import JsonFlag
from veriloop.cli.run_cmd import ConcurrencyOption, ExecutorOption, LimitOption, TaskIdsOption, run_agent, run_app


@run_app.command("mucode")
def run_mucode(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="Task suite (humaneval-test, mbpp, humaneval-train, ...).")] = (
        "humaneval-test"
    ),
    turns: Annotated[int, typer.Option("--turns", min=1, max=10, help="Turns per episode at most.")] = 3,
    n: Annotated[int, typer.Option("--n", min=1, max=64, help="Candidates per turn (best-of-N).")] = 1,
    select: Annotated[str, typer.Option("--select", help="Candidate selection: pt, lv, pt+lv or random.")] = "pt",
    verifier_model: Annotated[
        str | None, typer.Option("--verifier-model", help="Learned verifier for lv and pt+lv: checkpoint:ID.")
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option("--temperature", min=0.0, max=2.0, help="First-turn temperature (default: 0 for n=1, else 0.7)."),
    ] = None,
    repair_temperature: Annotated[
        float | None,
        typer.Option(
            "--repair-temperature", min=0.0, max=2.0, help="Temperature of later turns (default: as the first)."
        ),
    ] = None,
    history: Annotated[str, typer.Option("--history", help="full conversation, or the latest code only.")] = "full",
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="New tokens per reply at most.")] = 384,
    seed: Annotated[int, typer.Option("--seed", help="Seed of sampling and random selection.")] = 0,
    train: Annotated[bool, typer.Option("--train", help="Run μCode's expert iteration on the suite.")] = False,
    iterations: Annotated[
        int, typer.Option("--iterations", min=1, max=20, help="Expert-iteration rounds (with --train).")
    ] = 1,
    rollouts: Annotated[
        int, typer.Option("--rollouts", min=1, max=64, help="Rollouts per task and round (--train).")
    ] = 4,
    rollout_temperature: Annotated[
        float, typer.Option("--rollout-temperature", min=0.0, max=2.0, help="Rollout temperature.")
    ] = 0.7,
    verifier_steps: Annotated[int, typer.Option("--verifier-steps", min=1, help="Verifier steps per round.")] = 40,
    sft_steps: Annotated[int, typer.Option("--sft-steps", min=1, help="Generator fine-tuning steps per round.")] = 40,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    concurrency: ConcurrencyOption = 8,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Solve each task in up to --turns turns, N candidates a turn, public-test feedback between turns.

    With --train, run the paper's Algorithm 1 on the suite instead (rollouts, learned verifier,
    expert relabelling, fine-tuning); rerunning the same command skips finished rounds.
    """
    options: dict[str, Any] = {
        "turns": turns, "n": n, "select": select, "verifier_model": verifier_model, "temperature": temperature,
        "repair_temperature": repair_temperature, "history": history, "max_tokens": max_tokens, "seed": seed,
        "train": train, "iterations": iterations, "rollouts": rollouts, "rollout_temperature": rollout_temperature,
        "verifier_steps": verifier_steps, "sft_steps": sft_steps, "concurrency": concurrency,
    }  # fmt: skip
    run, _ = run_agent(ctx, "mucode", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
    if train:
        _print_rounds(ctx, run.id)


def _print_rounds(ctx: typer.Context, run_id: str) -> None:
    """The rounds this run finished, with their generator and verifier ids, on stderr."""
    from veriloop.agents.mucode.training import ITERATION_KIND
    from veriloop.cli.app import state
    from veriloop.store import TrajectoryStore

    with TrajectoryStore.from_settings(state(ctx).settings()) as store:
        for exemplar in store.list_exemplars(kind=ITERATION_KIND, run_id=run_id):
            payload = exemplar.payload
            print(
                f"round {payload['iteration']}: generator {payload['generator']}, verifier {payload['verifier']}",
                file=sys.stderr,
            )
