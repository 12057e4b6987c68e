"""A run's labelled figures and the comparison of two runs, computed from runs stored in a real database."""

from __future__ import annotations

import pytest

from veriloop.records import Attempt, ExecResult, ExecStatus, Node, Run
from veriloop.store import TrajectoryStore
from veriloop.store.figures import compare_runs, full_summary, ks_for

PASSED, FAILED = ExecResult(status=ExecStatus.PASSED), ExecResult(status=ExecStatus.FAILED)


def candidate(run: Run, task: str, turn: int, passed: bool, parent: str | None = None) -> Node:
    return Node(
        run_id=run.id,
        task_id=task,
        parent_id=parent,
        depth=turn - 1,
        exec_result=PASSED if passed else FAILED,
        score=float(passed),
        metadata={"turn": turn, "tests": "public"},
    )


def final(run: Run, task: str, turn: int, passed: bool, parent: str) -> Node:
    return Node(
        run_id=run.id,
        task_id=task,
        parent_id=parent,
        depth=turn,
        role="final",
        exec_result=PASSED if passed else FAILED,
        score=float(passed),
        metadata={"turn": turn, "tests": "public+private"},
    )


def mucode_like(store: TrajectoryStore) -> Run:
    """Two tasks, two candidates a turn. a: a public pass at turn 1, yet the held-out tests fail.
    b: no public pass at turn 1, both pass at turn 2, and the held-out tests pass."""
    run = store.create_run(Run(agent="mucode", suite="humaneval", model="m"))
    a1, a2 = candidate(run, "a", 1, True), candidate(run, "a", 1, False)
    b1, b2 = candidate(run, "b", 1, False), candidate(run, "b", 1, False)
    b3, b4 = candidate(run, "b", 2, True, b1.id), candidate(run, "b", 2, True, b1.id)
    store.add_nodes([a1, a2, b1, b2, b3, b4, final(run, "a", 1, False, a1.id), final(run, "b", 2, True, b3.id)])
    store.add_attempt(Attempt(run_id=run.id, task_id="a", status="failed"))
    store.add_attempt(Attempt(run_id=run.id, task_id="b", status="passed"))
    store.finish_run(run.id)
    return run


def test_held_out_is_the_headline_and_public_results_are_a_separate_labelled_figure(store: TrajectoryStore) -> None:
    run = mucode_like(store)
    summary = full_summary(store, run.id)
    figures = summary.figures
    assert figures is not None and figures.headline == "held_out"
    held, public = figures.held_out, figures.public
    assert (held.label, held.tasks, held.tasks_passed, held.pass_rate) == ("held-out tests", 2, 1, 0.5)
    assert summary.pass_rate == held.pass_rate and summary.tasks_passed == held.tasks_passed
    assert held.low is not None and held.high is not None and held.low <= 0.5 <= held.high
    assert [(t.turn, t.pass_rate) for t in held.per_turn] == [(1, 0.0), (2, 0.5)]
    assert held.samples_per_task == 1 and [p.k for p in held.pass_at_k] == [1]
    assert held.note is not None and "n > 1" in held.note

    assert public is not None and public.label == "public tests"
    assert (public.tasks, public.tasks_passed, public.pass_rate) == (2, 2, 1.0)  # public passes are not verdicts
    assert [(t.turn, t.pass_rate) for t in public.per_turn] == [(1, 0.5), (2, 1.0)]
    assert public.samples_per_task == 2  # first-turn candidates only: later turns saw feedback
    assert [(p.k, p.value, p.tasks) for p in public.pass_at_k] == [(1, 0.25, 2), (2, 0.5, 2)]
    for row in public.pass_at_k:
        assert row.low is not None and row.high is not None and row.low <= row.value <= row.high
    assert held.interval == "wilson" and public.interval == "wilson"  # pass rates are proportions of tasks
    # pass@1 averages 0.5 and 0 (a mean, bootstrapped); pass@2 is 1 or 0 a task (a proportion: Wilson)
    assert [row.interval for row in public.pass_at_k] == ["bootstrap", "wilson"]
    assert summary.provenance is None  # stored directly, not through create_run


def test_a_run_without_public_checks_has_no_public_figure(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
    nodes = [Node(run_id=run.id, task_id=t, exec_result=PASSED if t == "x" else FAILED) for t in ("x", "y", "z")]
    store.add_nodes(nodes)
    for node in nodes:
        status = "passed" if node.task_id == "x" else "failed"
        store.add_attempt(Attempt(run_id=run.id, task_id=node.task_id, status=status, best_node_id=node.id))
    figures = full_summary(store, run.id).figures
    assert figures is not None and figures.public is None
    assert figures.held_out.pass_rate == pytest.approx(1 / 3)
    assert [(p.k, round(p.value, 6)) for p in figures.held_out.pass_at_k] == [(1, round(1 / 3, 6))]


@pytest.mark.parametrize(("passed", "low", "high"), [(False, 0.0, 0.43448), (True, 0.56552, 1.0)])
def test_an_all_failed_or_all_passed_run_has_a_wilson_interval_not_a_point(
    store: TrajectoryStore, passed: bool, low: float, high: float
) -> None:
    run = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
    nodes = [Node(run_id=run.id, task_id=f"t{i}", exec_result=PASSED if passed else FAILED) for i in range(5)]
    store.add_nodes(nodes)
    for node in nodes:
        status = "passed" if passed else "failed"
        store.add_attempt(Attempt(run_id=run.id, task_id=node.task_id, status=status, best_node_id=node.id))
    figures = full_summary(store, run.id).figures
    assert figures is not None
    held = figures.held_out
    assert (held.tasks, held.tasks_passed, held.pass_rate) == (5, 5 if passed else 0, float(passed))
    assert (held.low, held.high) == pytest.approx((low, high), abs=5e-5) and held.interval == "wilson"
    [pass_at_1] = held.pass_at_k  # one sample a task: pass@1 is the same proportion, with the same interval
    assert (pass_at_1.low, pass_at_1.high, pass_at_1.interval) == (held.low, held.high, "wilson")
    assert "interval" in held.model_dump(mode="json") and held.model_dump(mode="json")["interval"] == "wilson"


def test_pass_at_k_lists_powers_of_two_and_n() -> None:
    assert ks_for(0) == [] and ks_for(1) == [1] and ks_for(5) == [1, 2, 4, 5] and ks_for(8) == [1, 2, 4, 8]


def outcomes_run(store: TrajectoryStore, outcomes: dict[str, str]) -> Run:
    run = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
    for task_id, status in outcomes.items():
        store.add_attempt(Attempt(run_id=run.id, task_id=task_id, status=status))  # type: ignore[arg-type]
    return run


def test_compare_counts_wins_and_losses_on_shared_tasks_with_exact_mcnemar(store: TrajectoryStore) -> None:
    # 14 shared tasks: A alone solves 1, B alone solves 9, both solve 2, neither 2; plus tasks only one finished.
    tasks = [f"t{i:02d}" for i in range(14)]
    a = {t: "passed" if i in (0, 1, 2) else "failed" for i, t in enumerate(tasks)}
    b = {t: "passed" if 1 <= i <= 11 else "failed" for i, t in enumerate(tasks)}
    a |= {"only-a": "passed", "open": "running"}
    b |= {"only-b": "failed", "open": "passed"}
    left, right = outcomes_run(store, a), outcomes_run(store, b)
    result = compare_runs(store, left.id[:10], right.id)
    assert result.shared_tasks == 14 and result.only_a == ["only-a"] and result.only_b == ["only-b", "open"]
    assert (result.wins, result.losses, result.both, result.neither) == (1, 9, 2, 2)
    assert (result.a_passed, result.b_passed) == (3, 11)
    assert result.difference == pytest.approx(3 / 14 - 11 / 14)
    assert result.mcnemar_p == pytest.approx(2 * 11 / 1024)
    assert result.low is not None and result.high is not None
    assert result.low < result.difference < result.high < 0  # B is better, and the interval says so
    assert {pair.task_id: pair.outcome for pair in result.tasks}["t00"] == "win"
    assert result.interval == "paired_bootstrap"  # a difference keeps the paired bootstrap

    same = compare_runs(store, left.id, left.id)
    assert (same.wins, same.losses, same.difference, same.mcnemar_p, same.low, same.high) == (0, 0, 0.0, 1.0, 0.0, 0.0)


def test_the_step_counter_has_one_name_and_stored_runs_keep_their_old_ones() -> None:
    from datetime import UTC, datetime

    from veriloop.records import STEP_KEY
    from veriloop.store.dashboard import NodeFact
    from veriloop.store.figures import turn_of

    def fact(**metadata: object) -> NodeFact:
        return NodeFact(
            id="n",
            task_id="t",
            parent_id=None,
            depth=7,
            role="generate",
            score=None,
            created_at=datetime.now(UTC),
            metadata=dict(metadata),
        )

    assert STEP_KEY == "turn" and turn_of(fact(turn=2)) == 2
    assert turn_of(fact(iteration=1)) == 1 and turn_of(fact(round=3)) == 3  # AlphaVerus / ReVISE nodes stored before
    assert turn_of(fact()) == 7  # no counter: the depth
