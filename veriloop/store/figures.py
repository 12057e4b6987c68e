"""A run's figures from its stored nodes and attempts: held-out and public pass rates with intervals,
pass@k, pass rate per turn, and the paired comparison of two runs.

Intervals (`veriloop.store.stats`; each record names its method in `interval`): a pass rate is a
proportion of tasks and gets the Wilson score interval; pass@k gets the bootstrap over tasks (Wilson
when every task's estimate is 0 or 1, which makes it a proportion too); the difference of two runs
gets the paired bootstrap, and McNemar's exact test its p-value.

Which check a node reports: nodes an agent marks `metadata["tests"] == "public"` were run on the
public tests only (μCode's candidates); every other outcome is held-out (the task's full tests or
its verifier), and a task's attempt is always decided held-out. pass@k counts the independent
samples of a task: its nodes of that check at the first turn where the check ran (μCode's
first-turn candidates, best-of-n's n samples); later turns are conditioned on feedback and are not
samples of the same distribution. A node's turn is its metadata's `turn`, `iteration` or `round`
when the agent recorded one, else its depth in the tree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from veriloop.records import STEP_KEY, Attempt, Record, Run
from veriloop.store import stats
from veriloop.store.dashboard import NodeFact, node_facts
from veriloop.store.stats import IntervalMethod
from veriloop.store.summary import (
    CHECK_LABELS,
    CHECK_MEANING,
    Check,
    CheckFigures,
    PassAtK,
    RunFigures,
    RunSummary,
    TurnRate,
    provenance_note,
    provenance_of,
)
from veriloop.store.trajectory import TrajectoryStore

TURN_KEYS = (STEP_KEY, "iteration", "round")
"""The step counter's name, then the names AlphaVerus and ReVISE nodes stored before it was unified."""
FINISHED = frozenset({"passed", "failed"})


def turn_of(fact: NodeFact) -> int:
    for key in TURN_KEYS:
        value = fact.metadata.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return fact.depth


def check_of(fact: NodeFact) -> Check:
    return "public" if fact.metadata.get("tests") == "public" else "held_out"


def ks_for(most: int) -> list[int]:
    """1, 2, 4, ... up to `most`, and `most` itself."""
    ks, k = [], 1
    while k <= most:
        ks.append(k)
        k *= 2
    if most >= 1 and ks[-1] != most:
        ks.append(most)
    return ks


def pass_at_k_table(samples: dict[str, tuple[int, int]]) -> list[PassAtK]:
    """pass@k per k from each task's (n, c), averaged over tasks with n >= k, with 95% intervals: Wilson when each
    task's estimate is 0 or 1 (one sample a task at k = 1, say: a proportion, whose bootstrap collapses at 0/n and
    n/n), else the bootstrap over tasks."""
    most = max((n for n, _ in samples.values()), default=0)
    rows = []
    for k in ks_for(most):
        values = [stats.pass_at_k(n, c, k) for n, c in samples.values() if n >= k]
        low, high, method = stats.mean_interval(values)
        rows.append(PassAtK(k=k, value=stats.mean(values), low=low, high=high, interval=method, tasks=len(values)))
    return rows


def per_turn(facts: Sequence[NodeFact], tasks: int) -> list[TurnRate]:
    """Cumulative share of `tasks` solved by each turn, among these facts (one check)."""
    by_turn: dict[int, list[NodeFact]] = defaultdict(list)
    for fact in facts:
        by_turn[turn_of(fact)].append(fact)
    solved: set[str] = set()
    rows = []
    for turn in sorted(by_turn):
        solved |= {fact.task_id for fact in by_turn[turn] if fact.passed}
        rows.append(TurnRate(turn=turn, pass_rate=len(solved) / tasks if tasks else 0.0, nodes=len(by_turn[turn])))
    return rows


def first_turn_samples(facts: Iterable[NodeFact]) -> dict[str, tuple[int, int]]:
    """Per task, (n, c) over its nodes with an outcome at the first turn where this check ran."""
    by_task: dict[str, list[NodeFact]] = defaultdict(list)
    for fact in facts:
        if fact.passed is not None:
            by_task[fact.task_id].append(fact)
    samples = {}
    for task_id, found in by_task.items():
        first = min(turn_of(fact) for fact in found)
        drawn = [fact for fact in found if turn_of(fact) == first]
        samples[task_id] = (len(drawn), sum(bool(fact.passed) for fact in drawn))
    return samples


def check_figures(check: Check, facts: Sequence[NodeFact], outcomes: dict[str, bool]) -> CheckFigures:
    """One check's figures: `outcomes` is each task's pass/fail under this check."""
    figures = CheckFigures(check=check, label=CHECK_LABELS[check], counts=CHECK_MEANING[check], tasks=len(outcomes))
    figures.tasks_passed = sum(outcomes.values())
    if outcomes:
        figures.pass_rate = figures.tasks_passed / len(outcomes)
        figures.low, figures.high = stats.wilson_interval(figures.tasks_passed, len(outcomes))
    figures.per_turn = per_turn(facts, len(outcomes | {fact.task_id: False for fact in facts}))
    samples = first_turn_samples(facts)
    figures.samples_per_task = max((n for n, _ in samples.values()), default=0)
    figures.pass_at_k = pass_at_k_table(samples)
    if figures.samples_per_task == 1:
        figures.note = "One sample per task: pass@k for k > 1 needs a run that draws n > 1 samples per task"
    elif figures.samples_per_task == 0:
        figures.note = f"No node was checked on the {CHECK_LABELS[check]} yet"
    return figures


def task_outcomes(attempts: Iterable[Attempt]) -> dict[str, bool]:
    """Held-out outcome per task with an attempt: passed when any attempt passed."""
    outcomes: dict[str, bool] = {}
    for attempt in attempts:
        outcomes[attempt.task_id] = outcomes.get(attempt.task_id, False) or attempt.status == "passed"
    return outcomes


def run_figures(facts: Sequence[NodeFact], attempts: Sequence[Attempt]) -> RunFigures:
    held = [fact for fact in facts if check_of(fact) == "held_out"]
    public = [fact for fact in facts if check_of(fact) == "public"]
    figures = RunFigures(held_out=check_figures("held_out", held, task_outcomes(attempts)))
    if public:
        outcomes: dict[str, bool] = {}
        for fact in public:
            if fact.passed is not None:
                outcomes[fact.task_id] = outcomes.get(fact.task_id, False) or bool(fact.passed)
        figures.public = check_figures("public", public, outcomes)
    return figures


def figures_for(store: TrajectoryStore, run_id: str, facts: Sequence[NodeFact] | None = None) -> RunFigures:
    facts = node_facts(store, run_id) if facts is None else facts
    return run_figures(facts, store.list_attempts(run_id))


# --------------------------------------------------------------------------- comparing two runs


class TaskPair(Record):
    """One task both runs finished, and who solved it (held-out tests)."""

    task_id: str
    a_passed: bool
    b_passed: bool
    outcome: Literal["win", "loss", "both", "neither"] = Field(
        description="win: only A solved it; loss: only B did; both or neither."
    )


class RunComparison(Record):
    """Run A against run B on the tasks both finished, held-out tests; difference = A's pass rate - B's."""

    a: Run
    b: Run
    check: Check = "held_out"
    label: str = CHECK_LABELS["held_out"]
    shared_tasks: int = 0
    only_a: list[str] = Field(default_factory=list, description="Tasks only A finished (left out).")
    only_b: list[str] = Field(default_factory=list, description="Tasks only B finished (left out).")
    a_passed: int = 0
    b_passed: int = 0
    a_rate: float | None = None
    b_rate: float | None = None
    wins: int = Field(0, description="Shared tasks only A solved.")
    losses: int = Field(0, description="Shared tasks only B solved.")
    both: int = 0
    neither: int = 0
    difference: float | None = Field(None, description="a_rate - b_rate on the shared tasks.")
    low: float | None = Field(None, description="95% paired bootstrap interval of the difference (tasks resampled).")
    high: float | None = None
    interval: IntervalMethod = Field("paired_bootstrap", description="The interval's method: the paired bootstrap.")
    mcnemar_p: float | None = Field(None, description="Exact two-sided McNemar p-value from wins and losses.")
    same_suite: bool = True
    tasks: list[TaskPair] = Field(default_factory=list)


def finished_outcomes(attempts: Iterable[Attempt]) -> dict[str, bool]:
    """Held-out outcome per task with a finished (passed or failed) attempt."""
    return task_outcomes(attempt for attempt in attempts if attempt.status in FINISHED)


def compare_outcomes(a: Run, b: Run, left: dict[str, bool], right: dict[str, bool]) -> RunComparison:
    shared = sorted(set(left) & set(right))
    result = RunComparison(
        a=a,
        b=b,
        shared_tasks=len(shared),
        same_suite=a.suite == b.suite,
        only_a=sorted(set(left) - set(right)),
        only_b=sorted(set(right) - set(left)),
    )
    for task_id in shared:
        won, lost = left[task_id], right[task_id]
        outcome: Literal["win", "loss", "both", "neither"] = (
            "both" if won and lost else "win" if won else "loss" if lost else "neither"
        )
        result.tasks.append(TaskPair(task_id=task_id, a_passed=won, b_passed=lost, outcome=outcome))
    counts = {name: sum(pair.outcome == name for pair in result.tasks) for name in ("win", "loss", "both", "neither")}
    result.wins, result.losses, result.both, result.neither = (counts[n] for n in ("win", "loss", "both", "neither"))
    if shared:
        a_values = [float(left[t]) for t in shared]
        b_values = [float(right[t]) for t in shared]
        result.a_passed, result.b_passed = int(sum(a_values)), int(sum(b_values))
        result.a_rate, result.b_rate = stats.mean(a_values), stats.mean(b_values)
        result.difference = result.a_rate - result.b_rate
        result.low, result.high = stats.paired_bootstrap_interval(a_values, b_values)
        result.mcnemar_p = stats.mcnemar_exact(result.wins, result.losses)
    return result


def compare_runs(store: TrajectoryStore, a: str, b: str) -> RunComparison:
    """Compare two stored runs (ids or unique prefixes) on the tasks both finished."""
    left, right = store.get_run(a), store.get_run(b)
    return compare_outcomes(
        left, right, finished_outcomes(store.list_attempts(left.id)), finished_outcomes(store.list_attempts(right.id))
    )


def full_summary(store: TrajectoryStore, run_id: str) -> RunSummary:
    """`store.run_summary` plus the run's figures and provenance: what `runs show` and the API report."""
    summary = store.run_summary(run_id)
    summary.figures = figures_for(store, summary.run.id)
    summary.provenance = provenance_of(summary.run)
    summary.provenance_note = provenance_note(summary.run)
    return summary
