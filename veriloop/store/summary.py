"""Read-side views of a run (what `veriloop runs show` and the dashboard print), built by aggregate queries.

Every figure names what it counts. A run's headline is the held-out result: the check that decides
each task's attempt (the task's full tests, or its verifier). Agents that also check candidates on
the public tests shown in the prompt (μCode does, and marks those nodes `tests: public`) get a
separate, labelled public figure; the two are never mixed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError

from veriloop.records import Record, Run
from veriloop.store.stats import IntervalMethod

Check = Literal["held_out", "public"]

CHECK_LABELS: dict[str, str] = {"held_out": "held-out tests", "public": "public tests"}
"""How figures name the two kinds of check, everywhere (CLI, API, dashboard, reports)."""

CHECK_MEANING: dict[str, str] = {
    "held_out": "the check that decides a task: all of its tests (public and private) or its verifier",
    "public": "only the tests shown to the model in the prompt (feedback, not the verdict)",
}


class TaskTreeSummary(Record):
    """One task's search tree within a run, and how its attempts ended."""

    task_id: str
    nodes: int = 0
    max_depth: int = 0
    best_score: float | None = None
    attempts: int = 0
    status: str | None = Field(None, description="Status of the latest attempt, if any.")


class TokenCounts(Record):
    prompt: int = 0
    completion: int = 0
    total: int = 0


class Timings(Record):
    """Seconds: the run's wall clock, and the time spent in each kind of call (summed over calls)."""

    wall_s: float | None = None
    llm_s: float = 0.0
    exec_s: float = 0.0
    verify_s: float = 0.0
    attempts_s: float = 0.0


class PassAtK(Record):
    """Unbiased pass@k (Chen et al. 2021) averaged over tasks, with a 95% interval over tasks: Wilson when every
    task's estimate is 0 or 1 (then the figure is a proportion of tasks), else the bootstrap."""

    k: int
    value: float
    low: float | None = Field(None, description="Lower end of the 95% interval (`interval` names the method).")
    high: float | None = Field(None, description="Upper end of the 95% interval.")
    interval: IntervalMethod = Field(
        "bootstrap", description="wilson (every task's estimate 0 or 1) or bootstrap (tasks resampled)."
    )
    tasks: int = Field(description="Tasks with at least k samples (the ones averaged).")


class TurnRate(Record):
    turn: int
    pass_rate: float = Field(description="Share of the figure's tasks solved by this turn (cumulative).")
    nodes: int = 0


class CheckFigures(Record):
    """What one kind of check (held-out or public) says about a run."""

    check: Check
    label: str = Field(description="How the figure is named when shown: 'held-out tests' or 'public tests'.")
    counts: str = Field(description="What a pass means for this figure.")
    tasks: int = Field(0, description="Tasks with an outcome of this check.")
    tasks_passed: int = 0
    pass_rate: float | None = Field(None, description="tasks_passed / tasks; None without tasks.")
    low: float | None = Field(None, description="Lower end of the 95% Wilson score interval of pass_rate.")
    high: float | None = Field(None, description="Upper end of the 95% Wilson score interval of pass_rate.")
    interval: IntervalMethod = Field("wilson", description="The interval's method: a proportion's, Wilson's.")
    samples_per_task: int = Field(0, description="Most independent samples (first-turn candidates) of one task.")
    pass_at_k: list[PassAtK] = Field(default_factory=list)
    per_turn: list[TurnRate] = Field(default_factory=list)
    note: str | None = Field(None, description="Why a figure is missing, e.g. one sample per task.")


class RunFigures(Record):
    """A run's figures; `held_out` is the headline."""

    headline: Check = "held_out"
    held_out: CheckFigures
    public: CheckFigures | None = Field(None, description="Present when the agent checked public tests too.")


class SuiteProvenance(Record):
    name: str
    version: str = ""
    content_hash: str = Field("", description="sha256 over the slice's task ids and content hashes, in order.")
    tasks: int = 0
    source: str | None = None


class Provenance(Record):
    """Where a run's numbers come from: enough to repeat the run or to tell why two runs differ."""

    veriloop_version: str
    git_commit: str | None = Field(None, description="Commit of the checkout veriloop ran from, if any.")
    git_dirty: bool | None = Field(None, description="Whether that checkout had uncommitted changes.")
    python: str = ""
    model: str = Field(description="Model id as the run asked for it.")
    backend: str = ""
    checkpoint_hash: str | None = Field(None, description="sha256 of the weights file(s); None for a remote model.")
    settings: dict[str, Any] = Field(default_factory=dict, description="Resolved settings, secrets removed.")
    options: dict[str, Any] = Field(default_factory=dict, description="The method's validated options.")
    prompt_hashes: dict[str, str] = Field(default_factory=dict, description="sha256 of each prompt-template module.")
    seeds: dict[str, Any] = Field(default_factory=dict)
    suite: SuiteProvenance
    sandbox: dict[str, str] = Field(default_factory=dict, description="Backend and its version.")
    verifiers: dict[str, str] = Field(default_factory=dict, description="Verifier tool versions ('' = not installed).")


class RunSummary(Record):
    run: Run
    tasks: int = 0
    tasks_passed: int = Field(0, description="Tasks with at least one passed attempt (held-out tests).")
    attempts: int = 0
    attempts_by_status: dict[str, int] = Field(default_factory=dict)
    nodes: int = 0
    llm_calls: int = 0
    executions: dict[str, int] = Field(default_factory=dict, description="Execution count per ExecStatus.")
    verifications: dict[str, int] = Field(default_factory=dict, description="Verification count per VerifyStatus.")
    tokens: TokenCounts = Field(default_factory=TokenCounts)
    timings: Timings = Field(default_factory=Timings)
    pass_rate: float | None = Field(None, description="Held-out pass rate: tasks_passed / tasks; None without tasks.")
    per_task: list[TaskTreeSummary] = Field(default_factory=list)
    figures: RunFigures | None = Field(None, description="Held-out and public figures with intervals and pass@k.")
    provenance: Provenance | None = Field(None, description="Versions, hashes and settings; None when not recorded.")
    provenance_note: str | None = Field(None, description="Why `provenance` is None, e.g. 'not recorded for this run'.")


def provenance_of(run: Run) -> Provenance | None:
    """The provenance stored with a run: every code path that makes a run records it (`agents.runner.with_provenance`);
    a run stored some other way (or before provenance was kept) has none."""
    stored = run.settings.get("provenance")
    if not isinstance(stored, dict):
        return None
    try:
        return Provenance.model_validate(stored)
    except ValidationError:  # written by another version: show the run without it rather than fail
        return None


def provenance_note(run: Run) -> str | None:
    """Why a run shows no provenance, as a phrase after "provenance" ('not recorded for this run'); None when it has
    some. Not every run without one is old (a run stored straight into the store has none), so the note says no more
    than it knows."""
    if provenance_of(run) is not None:
        return None
    if "provenance" in run.settings:
        return "stored in a form this veriloop version cannot read"
    return "not recorded for this run"
