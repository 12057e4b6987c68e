"""The dashboard's computations: pass@k, pass rate per turn, score bins, error classes, tree layout, diffs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from veriloop.records import Attempt, Diagnostic, Node
from veriloop.service.views import charts, diff_lines, layout_tree, pin_diagnostics, score_colour
from veriloop.store.dashboard import NodeFact
from veriloop.store.figures import run_figures
from veriloop.store.stats import pass_at_k


def fact(task: str, depth: int, passed: bool, score: float | None = None, **extra: Any) -> NodeFact:
    return NodeFact(
        id=f"{task}-{depth}-{passed}",
        task_id=task,
        parent_id=None,
        depth=depth,
        role="generate",
        score=score if score is not None else float(passed),
        created_at=datetime.now(UTC),
        metadata={},
        exec_status="passed" if passed else "failed",
        **extra,
    )


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 5) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)


def test_charts_per_turn_pass_at_k_bins_and_error_classes() -> None:
    facts = [
        fact("a", 0, False),
        fact("a", 1, True),
        fact("b", 0, False, 0.3, verify_status="failed", diagnostic_classes=["invariant", "invariant"]),
        fact("b", 1, False, 0.45),
    ]
    result = charts(facts)
    attempts = [Attempt(run_id="r", task_id="a", status="passed"), Attempt(run_id="r", task_id="b", status="failed")]
    held = run_figures(facts, attempts).held_out
    assert [(t.turn, t.pass_rate, t.nodes) for t in held.per_turn] == [(0, 0.0, 2), (1, 0.5, 2)]
    assert [(p.k, p.value, p.tasks) for p in held.pass_at_k] == [(1, 0.0, 2)]  # first-turn samples: one a task
    assert [b.count for b in result.scores] == [1, 0, 0, 1, 1, 0, 0, 0, 0, 1]
    assert result.error_classes == {"exec: failed": 3, "diagnostic: invariant": 2, "verify: failed": 1}


def test_turn_comes_from_metadata_when_the_agent_records_it() -> None:
    late = fact("a", 0, True).model_copy(update={"metadata": {"iteration": 3}})
    figures = run_figures([fact("a", 0, False), late], [])
    assert [t.turn for t in figures.held_out.per_turn] == [0, 3]


def test_layout_centres_parents_over_children() -> None:
    root = Node(run_id="r", task_id="t")
    left = Node(run_id="r", task_id="t", parent_id=root.id, depth=1)
    right = Node(run_id="r", task_id="t", parent_id=root.id, depth=1)
    leaf = Node(run_id="r", task_id="t", parent_id=left.id, depth=2)
    orphan = Node(run_id="r", task_id="t", parent_id="gone", depth=3)
    placed = {p.node.id: (p.x, p.y) for p in layout_tree([root, left, right, leaf, orphan])}
    assert placed[root.id] == (0.5, 0.0) and placed[left.id] == (0.0, 1.0) and placed[right.id] == (1.0, 1.0)
    assert placed[leaf.id] == (0.0, 2.0) and placed[orphan.id] == (2.0, 0.0)  # a missing parent makes a root


def test_diagnostics_are_pinned_to_their_lines() -> None:
    on_two = Diagnostic(message="loop invariant might not hold", line=2)
    nowhere = Diagnostic(message="timeout", line=None)
    outside = Diagnostic(message="beyond the code", line=9)
    lines, loose = pin_diagnostics("a\nb\nc", [on_two, nowhere, outside])
    assert [len(line.diagnostics) for line in lines] == [0, 1, 0] and loose == [nowhere, outside]


def test_diff_and_colours() -> None:
    assert diff_lines("a\nb\n", "a\nc\n") == [("hunk", "@@ -1,2 +1,2 @@"), ("same", " a"), ("del", "-b"), ("add", "+c")]
    assert diff_lines("same", "same") == []
    assert score_colour(None) == "#9ca3af" and score_colour(1.0) == "hsl(120, 70%, 45%)"
    assert score_colour(-3) == "hsl(0, 70%, 45%)"
