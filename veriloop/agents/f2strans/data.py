"""F2STrans's two training sets, built from stored translation nodes and the suite's human references.

* Functional learning (stage 1, SFT): `source -> target` pairs whose target passes the target
  language's tests: the suite's reference pairs (human translations, laid out by `style.tidy`; they
  pass by construction; the paper mines such pairs and keeps those that agree under differential
  testing) plus every stored model translation that passed. Prompt = the agent's first-turn request; completion = the
  translation in one fenced block.
* Style learning (stage 2, DPO): for one source, the positive is the passing candidate with the
  best style score (the human reference competes too, scored like any candidate), and negatives are
  candidates that fail or pass with a clearly lower style score (literal or un-idiomatic). The paper
  optimises a list-wise loss over {positive, negatives}; here each (positive, negative) becomes one
  preference pair (a pairwise decomposition of that list), at most `max_pairs` per source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from veriloop.agents.f2strans import prompts
from veriloop.agents.f2strans.style import style_score, tidy
from veriloop.records import Attempt, Node, Task
from veriloop.store import TrajectoryStore
from veriloop.store.exports import Row
from veriloop.tasks.transcoder import Translation, has_direction, translation


@dataclass(frozen=True)
class Scored:
    """One candidate translation of a source: its code, whether it passed, and its style score."""

    code: str
    passed: bool
    style: float
    node_id: str | None = None
    """None for the human reference."""


def nodes_of_runs(store: TrajectoryStore, run_ids: Sequence[str]) -> list[Node]:
    return [node for run_id in run_ids for node in store.list_nodes(run_id)]


def scored_by_task(nodes: Iterable[Node], source: str, target: str) -> dict[str, list[Scored]]:
    """The stored candidates of one direction, grouped by task."""
    grouped: dict[str, list[Scored]] = {}
    for node in nodes:
        meta = node.metadata
        if meta.get("source_language") != source or meta.get("target_language") != target:
            continue
        if not node.code or node.exec_result is None:
            continue
        style = float((meta.get("style") or {}).get("score") or 0.0)
        grouped.setdefault(node.task_id, []).append(Scored(node.code, node.exec_result.passed, style, node.id))
    return grouped


def prompt_of(item: Translation) -> list[dict[str, str]]:
    messages = prompts.translate_messages(item.source_language, item.target_language, item.source, item.source_name)
    return [message.model_dump() for message in messages]


def _directed(tasks: Iterable[Task], source: str, target: str) -> list[Translation]:
    return [translation(task, source, target) for task in tasks if has_direction(task, source, target)]


def functional_rows(
    tasks: Iterable[Task], source: str, target: str, nodes: Iterable[Node] = (), *, references: bool = True
) -> list[Row]:
    """SFT rows: reference pairs (when `references`) and every passing stored translation, deduplicated."""
    by_task = scored_by_task(nodes, source, target)
    rows: list[Row] = []
    for item in _directed(tasks, source, target):
        seen: set[str] = set()
        found = [Scored(tidy(item.reference, target), True, 1.0)] if references else []
        found += [candidate for candidate in by_task.get(item.task_id, []) if candidate.passed]
        for candidate in found:
            key = candidate.code.strip()
            if key in seen:
                continue
            seen.add(key)
            rows.append(
                {
                    "prompt": prompt_of(item),
                    "completion": [{"role": "assistant", "content": prompts.fenced(candidate.code, target)}],
                    "task_id": item.task_id,
                    "direction": f"{source}->{target}",
                    "origin": "reference" if candidate.node_id is None else "model",
                    "node_id": candidate.node_id,
                }
            )
    return rows


def style_rows(
    tasks: Iterable[Task],
    source: str,
    target: str,
    nodes: Iterable[Node],
    *,
    max_pairs: int = 3,
    margin: float = 0.05,
    linter: bool = True,
) -> list[Row]:
    """Preference rows: best-styled passing candidate (reference included) over failing or worse-styled ones."""
    by_task = scored_by_task(nodes, source, target)
    rows: list[Row] = []
    for item in _directed(tasks, source, target):
        model = by_task.get(item.task_id, [])
        if not model:
            continue
        reference = tidy(item.reference, target)
        reference_style = style_score(reference, item.reference, target, use_linter=linter).score
        pool = [Scored(reference, True, reference_style), *model]
        positive = max((c for c in pool if c.passed), key=lambda c: c.style)
        negatives = [c for c in pool if c is not positive and (not c.passed or c.style < positive.style - margin)]
        negatives = [c for c in negatives if c.code.strip() != positive.code.strip()]
        unique: dict[str, Scored] = {}
        for candidate in sorted(negatives, key=lambda c: (c.passed, c.style)):
            unique.setdefault(candidate.code.strip(), candidate)
        for negative in list(unique.values())[:max_pairs]:
            rows.append(
                {
                    "prompt": prompt_of(item),
                    "chosen": [{"role": "assistant", "content": prompts.fenced(positive.code, target)}],
                    "rejected": [{"role": "assistant", "content": prompts.fenced(negative.code, target)}],
                    "chosen_score": positive.style,
                    "rejected_score": negative.style,
                    "chosen_node_id": positive.node_id,
                    "rejected_node_id": negative.node_id,
                    "pair_source": "style" if negative.passed else "function",
                    "task_id": item.task_id,
                    "direction": f"{source}->{target}",
                }
            )
    return rows


def summarize(store: TrajectoryStore, attempts: Sequence[Attempt]) -> dict[str, Any]:
    """Computational accuracy (share of functions whose translation passes) and mean style of the final answers.

    `style` averages every function's final candidate (a failing one keeps its score: style is measured
    on what the agent returns); `style_passing` averages the passing ones only. Attempts that errored
    (the task lacks the direction) are left out and counted as `skipped`.
    """
    judged = [attempt for attempt in attempts if attempt.status in ("passed", "failed")]
    styles: list[float] = []
    passing_styles: list[float] = []
    similarity: list[float] = []
    for attempt in judged:
        node = store.get_node(attempt.best_node_id) if attempt.best_node_id else None
        style = (node.metadata.get("style") or {}) if node is not None else {}
        styles.append(float(style.get("score") or 0.0))
        similarity.append(float(style.get("similarity") or 0.0))
        if attempt.status == "passed":
            passing_styles.append(styles[-1])
    n = len(judged)
    passed = sum(attempt.status == "passed" for attempt in judged)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    return {
        "n": n,
        "passed": passed,
        "computational_accuracy": round(passed / n, 4) if n else None,
        "style": mean(styles),
        "style_passing": mean(passing_styles),
        "similarity": mean(similarity),
        "skipped": len(attempts) - n,
        "tokens": sum(attempt.tokens for attempt in attempts),
    }
