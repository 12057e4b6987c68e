"""`veriloop export KIND --run RUN_ID --out PATH`: stored trajectories as training datasets in TRL's formats."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.errors import ConfigError

KINDS = ("sft", "preference", "verifier", "prm", "trees")


def _when(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"{flag} {value!r} is not an ISO date or time (e.g. 2026-11-30 or 2026-11-30T12:00)"
        ) from None
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return parsed


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help=f"What to build: {', '.join(KINDS)}.")],
    run: Annotated[list[str], typer.Option("--run", help="Run id (or unique prefix); repeat for several runs.")],
    out: Annotated[Path, typer.Option("--out", help="Output file (jsonl, parquet) or folder (hf).")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, parquet or hf (datasets save_to_disk).")] = "jsonl",
    suite: Annotated[list[str] | None, typer.Option("--suite", help="Keep runs of this suite (repeatable).")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="Keep runs of this agent (repeatable).")] = None,
    verify_status: Annotated[
        list[str] | None,
        typer.Option("--verify-status", help="Keep nodes with this verifier status; 'none' for unverified."),
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="Keep nodes created at or after (ISO time).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Keep nodes created at or before (ISO time).")] = None,
    pairing: Annotated[
        list[str] | None, typer.Option("--pairing", help="Preference pairs: siblings, best_worst (repeatable).")
    ] = None,
    max_pairs: Annotated[int, typer.Option("--max-pairs", min=1, help="Sibling pairs per prompt at most.")] = 32,
    no_dedupe: Annotated[bool, typer.Option("--no-dedupe", help="Keep rows with the same content.")] = False,
    reward_augment: Annotated[
        bool, typer.Option("--reward-augment", help="preference: add score-conditioned copies (RA-DPO).")
    ] = False,
    goal_in_user: Annotated[
        bool, typer.Option("--goal-in-user", help="RA-DPO: put the goal in the user turn, not a system message.")
    ] = False,
    security: Annotated[
        str,
        typer.Option("--security", help="Candidates with security findings (judge runs): keep, mark or drop."),
    ] = "keep",
    as_json: JsonFlag = False,
) -> None:
    """Export SFT, preference, verifier (unpaired), PRM (stepwise) or whole-tree datasets from stored runs."""
    from veriloop.store import TrajectoryStore
    from veriloop.store.exports import EXPORT_FORMATS, ExportFilter, ExportOptions, export
    from veriloop.training.data import reward_augment as augment

    if reward_augment and kind != "preference":
        raise ConfigError("--reward-augment applies to preference exports only")
    if kind not in KINDS:
        raise ConfigError(f"unknown export kind {kind!r}; choose one of: {', '.join(KINDS)}")
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of: {', '.join(EXPORT_FORMATS)}")
    for name in pairing or ():
        if name not in ("siblings", "best_worst"):
            raise ConfigError(f"unknown pairing {name!r}; choose siblings or best_worst")
    if security not in ("keep", "mark", "drop"):
        raise ConfigError(f"unknown --security {security!r}; choose keep, mark or drop")
    filters = ExportFilter(
        security=security,
        suites=tuple(suite or ()),
        agents=tuple(agent or ()),
        verify_status=tuple(verify_status or ()),
        since=_when(since, "--since"),
        until=_when(until, "--until"),
    )
    options = ExportOptions(
        pairing=tuple(pairing or ("siblings", "best_worst")),
        max_pairs_per_group=max_pairs,
        dedupe=not no_dedupe,
        filters=filters,
        transform=(lambda rows: augment(rows, system=not goal_in_user)) if reward_augment else None,
    )
    settings = state(ctx).settings()
    with TrajectoryStore.from_settings(settings) as store:
        summary = export(store, kind, run, out, fmt, options)

    def render(_: object) -> None:
        typer.echo(f"wrote {summary['rows']} {kind} rows to {summary['path']} ({fmt})")

    emit(summary, as_json, render)
