"""Training datasets from stored trajectories, in TRL's column formats.

Kinds (one row shape each, all conversational: prompts and completions are message lists):

* ``sft``: ``prompt``/``completion`` from nodes that passed.
* ``preference``: ``prompt``/``chosen``/``rejected``. Nodes answering the same prompt at the same
  place in a tree (same task, same parent, same messages; roots of several runs of one suite count
  as siblings) are grouped; every passed x failed pair of a group is kept (``siblings``), and so is
  the best-vs-worst pair by score when the scores differ (``best_worst``).
* ``verifier``: unpaired ``prompt``/``completion``/``label`` (passed or not), for BCE verifiers and KTO.
* ``prm``: stepwise ``prompt``/``completions``/``labels``. Along a root-to-leaf path each node is a
  step labelled by its own outcome; a single-node path is split into blank-line-separated steps,
  each labelled with the final outcome (outcome supervision spread over steps).
* ``trees``: one row per (run, task) holding the whole tree.

Every row keeps its provenance (run, node ids, model, suite, agent, time) and the sampled token ids
next to the text, since re-tokenising text does not reproduce what the model sampled.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import product
from pathlib import Path
from typing import Any, Literal

from veriloop.errors import ConfigError
from veriloop.records import Node, Run, VerifyStatus
from veriloop.store.trajectory import TrajectoryStore

ExportKind = Literal["sft", "preference", "verifier", "prm", "trees"]
EXPORT_KINDS: tuple[str, ...] = ("sft", "preference", "verifier", "prm", "trees")
EXPORT_FORMATS: tuple[str, ...] = ("jsonl", "parquet", "hf")

Row = dict[str, Any]


SEVERITY_RANK = {"low": 1, "medium": 2, "high": 3}
SECURITY_MODES = ("keep", "mark", "drop")


@dataclass
class ExportFilter:
    """Which nodes an export reads; every field left empty lets all through."""

    suites: Sequence[str] = ()
    agents: Sequence[str] = ()
    verify_status: Sequence[str] = ()
    """Verifier statuses to keep (``verified``, ``failed``, ...); ``none`` keeps unverified nodes."""
    since: datetime | None = None
    until: datetime | None = None
    security: str = "keep"
    """Nodes with security findings (the judge's bandit report): ``keep``, ``mark`` (a ``security`` column) or
    ``drop`` (findings at or above ``security_min_severity``)."""
    security_min_severity: str = "medium"

    def flagged(self, node: Node) -> bool:
        """The node has a security finding at or above the minimum severity."""
        floor = SEVERITY_RANK.get(self.security_min_severity, 2)
        findings = node.metadata.get("security") or []
        return any(SEVERITY_RANK.get(str(f.get("severity", "")), 0) >= floor for f in findings if isinstance(f, dict))

    def keeps_run(self, run: Run) -> bool:
        return (not self.suites or run.suite in self.suites) and (not self.agents or run.agent in self.agents)

    def keeps_node(self, node: Node) -> bool:
        if self.since is not None and node.created_at < self.since:
            return False
        if self.until is not None and node.created_at > self.until:
            return False
        if self.security == "drop" and self.flagged(node):
            return False
        if self.verify_status:
            status = node.verify_result.status.value if node.verify_result is not None else "none"
            return status in self.verify_status
        return True


@dataclass
class ExportOptions:
    """How pairs are drawn; the defaults keep every sibling pair and the best-vs-worst pair."""

    pairing: Sequence[str] = ("siblings", "best_worst")
    max_pairs_per_group: int = 32
    seed: int = 0
    dedupe: bool = True
    filters: ExportFilter = field(default_factory=ExportFilter)
    transform: Callable[[list[Row]], list[Row]] | None = None
    """Applied to the rows after dedupe (e.g. reward augmentation of preference pairs)."""


# --------------------------------------------------------------------------- outcomes and text


def node_passed(node: Node) -> bool | None:
    """Passed when its tests passed and no verifier refused it; None when nothing judged it."""
    verdicts: list[bool] = []
    if node.exec_result is not None:
        verdicts.append(node.exec_result.passed)
    if node.verify_result is not None and node.verify_result.status is not VerifyStatus.INFRA_ERROR:
        verdicts.append(node.verify_result.status is VerifyStatus.VERIFIED)
    if not verdicts:
        return None if node.score is None else node.score >= 1.0
    return all(verdicts)


def node_score(node: Node) -> float:
    """The node's score, or 1/0 from its outcome when the agent gave none."""
    if node.score is not None:
        return float(node.score)
    return 1.0 if node_passed(node) else 0.0


def _messages(node: Node) -> list[dict[str, str]]:
    return [{"role": message.role, "content": message.content} for message in node.messages]


def _reply(node: Node) -> str | None:
    if node.completion is not None and node.completion.text:
        return node.completion.text
    return node.code


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _token_ids(node: Node) -> list[int]:
    return list(node.completion.token_ids) if node.completion is not None else []


def _model(node: Node, run: Run) -> str:
    return node.completion.model if node.completion is not None and node.completion.model else run.model


def content_hash(value: Any) -> str:
    """sha256 of a value's canonical JSON: the deduplication key and the data hash of a checkpoint."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _provenance(run: Run, node: Node) -> Row:
    return {
        "run_id": run.id,
        "task_id": node.task_id,
        "suite": run.suite,
        "agent": run.agent,
        "model": _model(node, run),
        "created_at": node.created_at.isoformat(),
    }


# --------------------------------------------------------------------------- reading


@dataclass
class RunNodes:
    run: Run
    nodes: list[Node]


def read_runs(store: TrajectoryStore, run_ids: Sequence[str], filters: ExportFilter) -> list[RunNodes]:
    """The runs (ids or unique prefixes) and their nodes that pass the filters."""
    if not run_ids:
        raise ConfigError("an export needs at least one --run")
    found: list[RunNodes] = []
    for ident in run_ids:
        run = store.get_run(ident)
        if not filters.keeps_run(run):
            continue
        found.append(RunNodes(run, [node for node in store.list_nodes(run.id) if filters.keeps_node(node)]))
    return found


# --------------------------------------------------------------------------- row builders


def sft_rows(runs: Iterable[RunNodes]) -> list[Row]:
    rows = []
    for item in runs:
        for node in item.nodes:
            reply = _reply(node)
            if reply is None or not node.messages or node_passed(node) is not True:
                continue
            rows.append(
                {
                    "prompt": _messages(node),
                    "completion": _assistant(reply),
                    "completion_token_ids": _token_ids(node),
                    "node_id": node.id,
                    "score": node_score(node),
                    **_provenance(item.run, node),
                }
            )
    return rows


def verifier_rows(runs: Iterable[RunNodes]) -> list[Row]:
    rows = []
    for item in runs:
        for node in item.nodes:
            reply, passed = _reply(node), node_passed(node)
            if reply is None or not node.messages or passed is None:
                continue
            rows.append(
                {
                    "prompt": _messages(node),
                    "completion": _assistant(reply),
                    "label": passed,
                    "completion_token_ids": _token_ids(node),
                    "node_id": node.id,
                    "score": node_score(node),
                    **_provenance(item.run, node),
                }
            )
    return rows


def _groups(runs: Iterable[RunNodes]) -> dict[str, list[tuple[Run, Node]]]:
    """Nodes answering one prompt at one place in a tree: same suite, task, parent and messages."""
    groups: dict[str, list[tuple[Run, Node]]] = {}
    for item in runs:
        for node in item.nodes:
            if _reply(node) is None or not node.messages or node_passed(node) is None:
                continue
            key = content_hash([item.run.suite, node.task_id, node.parent_id, _messages(node)])
            groups.setdefault(key, []).append((item.run, node))
    return groups


def _pair_row(chosen: tuple[Run, Node], rejected: tuple[Run, Node], source: str) -> Row:
    (run_c, node_c), (run_r, node_r) = chosen, rejected
    reply_c, reply_r = _reply(node_c), _reply(node_r)
    assert reply_c is not None and reply_r is not None
    return {
        "prompt": _messages(node_c),
        "chosen": _assistant(reply_c),
        "rejected": _assistant(reply_r),
        "chosen_token_ids": _token_ids(node_c),
        "rejected_token_ids": _token_ids(node_r),
        "chosen_score": node_score(node_c),
        "rejected_score": node_score(node_r),
        "chosen_node_id": node_c.id,
        "rejected_node_id": node_r.id,
        "rejected_run_id": run_r.id,
        "rejected_model": _model(node_r, run_r),
        "pair_source": source,
        **_provenance(run_c, node_c),
        "created_at": max(node_c.created_at, node_r.created_at).isoformat(),
    }


def preference_rows(runs: Iterable[RunNodes], options: ExportOptions) -> list[Row]:
    rng = random.Random(options.seed)
    rows: list[Row] = []
    for members in _groups(runs).values():
        seen: set[tuple[str, str]] = set()
        if "siblings" in options.pairing:
            good = [member for member in members if node_passed(member[1])]
            bad = [member for member in members if not node_passed(member[1])]
            pairs = list(product(good, bad))
            if len(pairs) > options.max_pairs_per_group:
                pairs = rng.sample(pairs, options.max_pairs_per_group)
            for chosen, rejected in pairs:
                seen.add((chosen[1].id, rejected[1].id))
                rows.append(_pair_row(chosen, rejected, "siblings"))
        if "best_worst" in options.pairing and len(members) > 1:
            best = max(members, key=lambda member: (node_score(member[1]), node_passed(member[1]) is True))
            worst = min(members, key=lambda member: (node_score(member[1]), node_passed(member[1]) is True))
            better = (node_score(best[1]), bool(node_passed(best[1]))) > (
                node_score(worst[1]),
                bool(node_passed(worst[1])),
            )
            if better and (best[1].id, worst[1].id) not in seen:
                rows.append(_pair_row(best, worst, "best_worst"))
    return rows


def split_steps(text: str) -> list[str]:
    """A reply's steps: its blank-line-separated blocks (code paragraphs), empty ones dropped."""
    return [block for block in text.split("\n\n") if block.strip()]


def prm_rows(runs: Iterable[RunNodes]) -> list[Row]:
    rows = []
    for item in runs:
        by_id = {node.id: node for node in item.nodes}
        parents = {node.parent_id for node in item.nodes if node.parent_id}
        for leaf in item.nodes:
            if leaf.id in parents:
                continue
            path = [leaf]
            while path[-1].parent_id in by_id:
                path.append(by_id[str(path[-1].parent_id)])
            path.reverse()
            judged = [(node, _reply(node), node_passed(node)) for node in path]
            if any(reply is None or passed is None for _, reply, passed in judged) or not path[0].messages:
                continue
            if len(path) == 1:
                reply, passed = judged[0][1], judged[0][2]
                assert reply is not None
                steps = split_steps(reply) or [reply]
                labels = [bool(passed)] * len(steps)
            else:
                steps = [str(reply) for _, reply, _ in judged]
                labels = [bool(passed) for _, _, passed in judged]
            rows.append(
                {
                    "prompt": _messages(path[0]),
                    "completions": steps,
                    "labels": labels,
                    "node_ids": [node.id for node in path],
                    "node_id": leaf.id,
                    **_provenance(item.run, leaf),
                }
            )
    return rows


def _node_dict(node: Node) -> Row:
    return {
        "id": node.id,
        "parent_id": node.parent_id,
        "depth": node.depth,
        "role": node.role,
        "messages": _messages(node),
        "completion": node.completion.text if node.completion is not None else None,
        "token_ids": _token_ids(node),
        "code": node.code,
        "score": node.score,
        "passed": node_passed(node),
        "exec_status": node.exec_result.status.value if node.exec_result is not None else None,
        "verify_status": node.verify_result.status.value if node.verify_result is not None else None,
        "created_at": node.created_at.isoformat(),
    }


def tree_rows(runs: Iterable[RunNodes]) -> list[Row]:
    rows = []
    for item in runs:
        tasks: dict[str, list[Node]] = {}
        for node in item.nodes:
            tasks.setdefault(node.task_id, []).append(node)
        for task_id, nodes in tasks.items():
            rows.append(
                {
                    "run_id": item.run.id,
                    "task_id": task_id,
                    "suite": item.run.suite,
                    "agent": item.run.agent,
                    "model": item.run.model,
                    "created_at": min(node.created_at for node in nodes).isoformat(),
                    "nodes": [_node_dict(node) for node in nodes],
                }
            )
    return rows


CONTENT_COLUMNS = {
    "sft": ("prompt", "completion"),
    "preference": ("prompt", "chosen", "rejected"),
    "verifier": ("prompt", "completion", "label"),
    "prm": ("prompt", "completions", "labels"),
    "trees": ("run_id", "task_id", "nodes"),
}


def dedupe(rows: list[Row], kind: str) -> list[Row]:
    """Drop rows whose content (the training columns, not provenance) was seen before; first one wins."""
    seen: set[str] = set()
    kept = []
    for row in rows:
        key = content_hash([row[column] for column in CONTENT_COLUMNS[kind]])
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def build_rows(store: TrajectoryStore, kind: str, run_ids: Sequence[str], options: ExportOptions) -> list[Row]:
    """The rows of one export kind from these runs."""
    if kind not in EXPORT_KINDS:
        raise ConfigError(f"unknown export kind {kind!r}; choose one of: {', '.join(EXPORT_KINDS)}")
    runs = read_runs(store, run_ids, options.filters)
    if kind == "sft":
        rows = sft_rows(runs)
    elif kind == "preference":
        rows = preference_rows(runs, options)
    elif kind == "verifier":
        rows = verifier_rows(runs)
    elif kind == "prm":
        rows = prm_rows(runs)
    else:
        rows = tree_rows(runs)
    rows = dedupe(rows, kind) if options.dedupe else rows
    if options.filters.security == "mark":
        rows = mark_security(rows, runs)
    return options.transform(rows) if options.transform is not None else rows


def mark_security(rows: list[Row], runs: Sequence[RunNodes]) -> list[Row]:
    """Add each row's nodes' security findings: `security` (sft, verifier, trees) or `chosen_`/`rejected_security`."""
    findings = {node.id: list(node.metadata.get("security") or []) for item in runs for node in item.nodes}
    for row in rows:
        for column, target in (
            ("node_id", "security"),
            ("chosen_node_id", "chosen_security"),
            ("rejected_node_id", "rejected_security"),
            ("id", "security"),
        ):
            if column in row and target not in row:
                row[target] = findings.get(str(row[column]), [])
    return rows


# --------------------------------------------------------------------------- writing


def datasets_module() -> Any:
    """The `datasets` package, imported on use (it has no type information, and JSONL needs none of it)."""
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise ConfigError("parquet and hf exports need the datasets package: pip install datasets") from None


def write_rows(rows: list[Row], out: Path, fmt: str) -> Path:
    """Write rows as JSON lines, a Parquet file or a `datasets` folder (`save_to_disk`); returns the path.

    JSONL is written directly (no `datasets` import); Parquet and `hf` go through `datasets`, so the
    Arrow schema is the one `load_dataset` infers.
    """
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of: {', '.join(EXPORT_FORMATS)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        tmp = out.with_name(out.name + ".partial")
        with tmp.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(out)
        return out
    Dataset = datasets_module().Dataset
    dataset = Dataset.from_list(rows) if rows else Dataset.from_dict({})
    if fmt == "parquet":
        dataset.to_parquet(str(out))
    else:
        dataset.save_to_disk(str(out))
    return out


def load_rows(path: Path) -> list[Row]:
    """Rows of an export in any of the three formats (by suffix: .jsonl, .parquet, else a `datasets` folder)."""
    if not path.exists():
        raise ConfigError(f"dataset {path} does not exist")
    if path.is_file() and path.suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    datasets = datasets_module()
    if path.is_file() and path.suffix == ".parquet":
        return list(datasets.Dataset.from_parquet(str(path)))
    if path.is_dir():
        loaded = datasets.load_from_disk(str(path))
        if not isinstance(loaded, datasets.Dataset):
            raise ConfigError(f"{path} holds several splits; give one split's folder")
        return list(loaded)
    raise ConfigError(f"cannot tell the format of {path}: use .jsonl, .parquet or a datasets folder")


def export(
    store: TrajectoryStore,
    kind: str,
    run_ids: Sequence[str],
    out: Path,
    fmt: str = "jsonl",
    options: ExportOptions | None = None,
) -> dict[str, Any]:
    """Build and write one export; returns a summary (rows, path, content hash)."""
    rows = build_rows(store, kind, run_ids, options or ExportOptions())
    path = write_rows(rows, out, fmt)
    return {"kind": kind, "format": fmt, "rows": len(rows), "path": str(path), "data_hash": content_hash(rows)}
