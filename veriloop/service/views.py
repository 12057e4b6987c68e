"""What the dashboard and the API show about runs, computed from stored facts (no agent-specific knowledge).

Figures (held-out headline, public figure, pass@k with intervals, pass rate per turn) come from
`store.figures`, the same code `veriloop runs show` and `runs report` use; see there for what each
counts. This module adds the page-level pieces: score bins, error classes, tree layout, diffs.
"""

from __future__ import annotations

import difflib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from veriloop.agents.runner import suite_of
from veriloop.config import Settings
from veriloop.errors import VeriloopError
from veriloop.records import Attempt, Diagnostic, Node, Record, Run, RunStatus
from veriloop.store import TrajectoryStore
from veriloop.store.dashboard import NodeFact, node_facts
from veriloop.store.figures import figures_for
from veriloop.store.summary import Provenance, RunFigures, provenance_note, provenance_of


class RunOverview(Record):
    """One line of the runs table; `passed` and `pass_rate` count held-out tests (the tasks' verdicts)."""

    run: Run
    tasks: int = 0
    passed: int = Field(0, description="Tasks passed on the held-out tests.")
    pass_rate: float | None = Field(None, description="Held-out pass rate.")
    nodes: int = 0
    tokens: int = 0
    wall_s: float | None = None


class TaskRow(Record):
    task_id: str
    nodes: int = 0
    max_depth: int = 0
    best_score: float | None = None
    status: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    best_node_id: str | None = None


class Bin(Record):
    low: float
    high: float
    count: int


class RunCharts(Record):
    """Node-level charts; pass rates (per turn, pass@k) are in `RunPage.figures`, labelled by check."""

    scores: list[Bin] = Field(default_factory=list)
    unscored: int = 0
    error_classes: dict[str, int] = Field(default_factory=dict)


class RunPage(Record):
    """Everything the run page draws; also served as JSON at /api/runs/{id}/overview."""

    row: RunOverview
    total_tasks: int | None = None
    figures: RunFigures
    provenance: Provenance | None = None
    provenance_note: str | None = Field(
        None, description="Why `provenance` is missing, e.g. 'not recorded for this run'."
    )
    charts: RunCharts = Field(default_factory=RunCharts)
    tasks: list[TaskRow] = Field(default_factory=list)
    slowest: list[TaskRow] = Field(default_factory=list)
    costliest: list[TaskRow] = Field(default_factory=list)


# --------------------------------------------------------------------------- runs


_TOTALS: dict[str, int | None] = {}


def progress_total(run: Run, settings: Settings) -> int | None:
    """How many tasks the run covers (its suite slice), cached per run; None when the suite cannot load."""
    if run.id not in _TOTALS:
        try:
            _TOTALS[run.id] = len(suite_of(run, settings).tasks)
        except (VeriloopError, OSError, ValueError):
            _TOTALS[run.id] = None
    return _TOTALS[run.id]


def run_row(store: TrajectoryStore, run: Run) -> RunOverview:
    summary = store.run_summary(run.id)
    return RunOverview(
        run=summary.run,
        tasks=summary.tasks,
        passed=summary.tasks_passed,
        pass_rate=summary.pass_rate,
        nodes=summary.nodes,
        tokens=summary.tokens.total,
        wall_s=summary.timings.wall_s,
    )


def _latest_attempts(attempts: list[Attempt]) -> dict[str, Attempt]:
    latest: dict[str, Attempt] = {}
    for attempt in attempts:  # oldest first: the latest wins
        latest[attempt.task_id] = attempt
    return latest


def task_rows(store: TrajectoryStore, run: Run, facts: list[NodeFact] | None = None) -> list[TaskRow]:
    facts = node_facts(store, run.id) if facts is None else facts
    rows: dict[str, TaskRow] = {}
    for fact in facts:
        row = rows.setdefault(fact.task_id, TaskRow(task_id=fact.task_id))
        row.nodes += 1
        row.max_depth = max(row.max_depth, fact.depth)
        row.tokens += fact.tokens
        if fact.score is not None and (row.best_score is None or fact.score > row.best_score):
            row.best_score = fact.score
    for task_id, attempt in _latest_attempts(store.list_attempts(run.id)).items():
        row = rows.setdefault(task_id, TaskRow(task_id=task_id))
        row.status, row.seconds, row.best_node_id = attempt.status, attempt.seconds, attempt.best_node_id
        row.tokens = max(row.tokens, attempt.tokens)
    return [rows[key] for key in sorted(rows)]


def charts(facts: list[NodeFact]) -> RunCharts:
    result = RunCharts()
    bins = [0] * 10
    for fact in facts:
        if fact.score is None:
            result.unscored += 1
            continue
        bins[min(9, max(0, int(fact.score * 10)))] += 1
    result.scores = [Bin(low=i / 10, high=(i + 1) / 10, count=count) for i, count in enumerate(bins)]

    classes: Counter[str] = Counter()
    for fact in facts:
        if fact.exec_status not in (None, "passed"):
            classes[f"exec: {fact.exec_status}"] += 1
        if fact.verify_status not in (None, "verified"):
            classes[f"verify: {fact.verify_status}"] += 1
        for kind in fact.diagnostic_classes:
            classes[f"diagnostic: {kind}"] += 1
    result.error_classes = dict(classes.most_common())
    return result


def overview(store: TrajectoryStore, run: Run, settings: Settings) -> RunPage:
    # The run's row first, its tasks after: a run ends only once its attempts are stored, so a page that
    # reads "finished" also counts every task done (the other order showed "finished" beside "0/3").
    row = run_row(store, run)
    facts = node_facts(store, run.id)
    tasks = task_rows(store, run, facts)
    total = progress_total(run, settings)
    return RunPage(
        row=row,
        total_tasks=total,
        figures=figures_for(store, run.id, facts),
        provenance=provenance_of(run),
        provenance_note=provenance_note(run),
        charts=charts(facts),
        tasks=tasks,
        slowest=sorted((t for t in tasks if t.seconds), key=lambda t: -t.seconds)[:5],
        costliest=sorted((t for t in tasks if t.tokens), key=lambda t: -t.tokens)[:5],
    )


def run_ended(run: Run) -> bool:
    return run.status in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)


# --------------------------------------------------------------------------- trees


@dataclass
class PlacedNode:
    node: Node
    x: float
    y: float
    children: list[str] = field(default_factory=list)


def layout_tree(nodes: list[Node]) -> list[PlacedNode]:
    """A layered layout: leaves spaced evenly left to right, each parent centred over its children, depth down.

    The tree is `search.tree.build_tree` (networkx, linked by `parent_id`); a node whose parent is not
    among `nodes` is drawn as a root.
    """
    from veriloop.search.tree import build_tree, roots

    graph = build_tree(nodes)
    by_id = {node.id: node for node in nodes}
    placed: dict[str, PlacedNode] = {}
    next_leaf = [0.0]

    def place(node_id: str, level: int) -> float:
        kids = [str(kid) for kid in graph.successors(node_id)]
        xs = [place(kid, level + 1) for kid in kids]
        if xs:
            x = (xs[0] + xs[-1]) / 2
        else:
            x = next_leaf[0]
            next_leaf[0] += 1
        placed[node_id] = PlacedNode(node=by_id[node_id], x=x, y=float(level), children=kids)
        return x

    for root in roots(graph):
        place(str(root), 0)
    return [placed[node.id] for node in nodes if node.id in placed]


def score_colour(score: float | None) -> str:
    """Red (0) through amber to green (1); grey when unscored."""
    if score is None:
        return "#9ca3af"
    s = min(1.0, max(0.0, score))
    hue = int(120 * s)
    return f"hsl({hue}, 70%, 45%)"


# --------------------------------------------------------------------------- node page


@dataclass
class CodeLine:
    number: int
    text: str
    diagnostics: list[Diagnostic]


def pin_diagnostics(code: str, diagnostics: list[Diagnostic]) -> tuple[list[CodeLine], list[Diagnostic]]:
    """The code's lines, each with the diagnostics that point at it, plus those that point nowhere in it."""
    lines = code.splitlines() or [""]
    pinned: dict[int, list[Diagnostic]] = defaultdict(list)
    loose: list[Diagnostic] = []
    for diagnostic in diagnostics:
        if diagnostic.line is not None and 1 <= diagnostic.line <= len(lines):
            pinned[diagnostic.line].append(diagnostic)
        else:
            loose.append(diagnostic)
    return [CodeLine(i, text, pinned.get(i, [])) for i, text in enumerate(lines, start=1)], loose


def diff_lines(old: str, new: str) -> list[tuple[str, str]]:
    """A unified diff of parent code to this code as (kind, text): kind is add, del, hunk or same."""
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), "parent", "this node", lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = "hunk" if line.startswith("@@") else "add" if line[:1] == "+" else "del" if line[:1] == "-" else "same"
        out.append((kind, line))
    return out


def guard_verdict(node: Node) -> dict[str, Any] | None:
    """The spec guard's say on this node: rejected (with why), or passed when the guarded verifier accepted."""
    result = node.verify_result
    if result is None:
        return None
    guard = node.metadata.get("guard")
    if result.status.value == "rejected":
        return {"verdict": "rejected", "reason": result.reason or "the candidate weakens or escapes the spec"}
    if isinstance(guard, dict):
        return {"verdict": str(guard.get("verdict", "checked")), "reason": str(guard.get("reason", ""))}
    return {"verdict": "not rejected", "reason": f"{result.tool} {result.version}".strip()}
