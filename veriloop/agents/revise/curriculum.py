"""ReVISE's training curriculum as preference learning, built from stored runs (correctness from the tests).

    M0 = base model + [eos]/[refine] tokens (embedding resized)
    stage 1, learn to verify:  x + y right -> chosen [eos],    rejected [refine]
                               x + y wrong -> chosen [refine], rejected [eos]                  -> M1
    stage 2, learn to correct: x + y right -> as in stage 1
                               x + y wrong -> chosen [refine] + fix + [eos], rejected [eos]     -> M2
                               (fix: a stored refinement of y that passed, else the reference);
                               and a stored refinement that failed loses to the fix

Each stage trains L_SFT(chosen) + lambda * L_DPO + anchor * L_SFT(right attempts' code)
(`training.revise.train_sft_dpo`); L_SFT weighs a row's decision tokens apart from its other tokens, so the
[refine] that opens a fix counts as much as a lone [eos]. Every attempt of a stored trajectory (first or refined)
is a row: its prefix is the turn up to and including it (the attempt itself is kept as `attempt`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from veriloop.agents.revise.prompts import DECISION_TOKENS, EOS_TOKEN, REFINE_TOKEN, attempt_segment, gold_segment
from veriloop.agents.revise.state import ReviseOptions
from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Node, Run, Task
from veriloop.store import TrajectoryStore
from veriloop.store.exports import Row, content_hash, write_rows
from veriloop.training.common import Progress, TrainResult, TrainSpec

ATTEMPT_ROLES = ("generate", "refine")


def _split(node: Node) -> tuple[list[dict[str, str]], str]:
    """(the conversation, the assistant text written before this attempt)."""
    before = node.messages[-1].content if node.messages and node.messages[-1].role == "assistant" else ""
    turns = [{"role": m.role, "content": m.content} for m in node.messages if m.role != "assistant"]
    return turns, before


def _row(node: Node, stage: int, kind: str, chosen: str, rejected: str) -> Row:
    assert node.completion is not None and node.exec_result is not None
    turns, before = _split(node)
    return {
        "prompt": turns,
        "prefix": before + attempt_segment(node.completion.text),
        "attempt": attempt_segment(node.completion.text),
        "chosen": chosen,
        "rejected": rejected,
        "passed": node.exec_result.passed,
        "stage": stage,
        "kind": kind,
        "task_id": node.task_id,
        "node_id": node.id,
        "run_id": node.run_id,
    }


def task_rows(nodes: Sequence[Node], task: Task, stage: int) -> list[Row]:
    """The preference rows of one task's stored trajectories for curriculum `stage` (1 or 2)."""
    if stage not in (1, 2):
        raise ValueError(f"ReVISE has stages 1 and 2, not {stage}")
    children: dict[str, list[Node]] = {}
    for node in nodes:
        if node.parent_id is not None:
            children.setdefault(node.parent_id, []).append(node)
    rows: list[Row] = []
    for node in nodes:
        if node.role not in ATTEMPT_ROLES or node.completion is None or node.exec_result is None:
            continue
        if node.exec_result.passed:
            rows.append(_row(node, stage, "verify_right", EOS_TOKEN, REFINE_TOKEN))
            continue
        if stage == 1:
            rows.append(_row(node, stage, "verify_wrong", REFINE_TOKEN, EOS_TOKEN))
            continue
        refinements = [
            child
            for decision in children.get(node.id, [])
            if decision.role == "verify"
            for child in children.get(decision.id, [])
            if child.role == "refine" and child.completion is not None and child.exec_result is not None
        ]
        fixes = [child for child in refinements if child.exec_result is not None and child.exec_result.passed]
        if fixes and fixes[0].completion is not None:
            fix, source = attempt_segment(fixes[0].completion.text), "refinement"
        elif task.reference:
            fix, source = gold_segment(task.reference), "reference"
        else:
            rows.append(_row(node, stage, "verify_wrong", REFINE_TOKEN, EOS_TOKEN))  # nothing to correct towards
            continue
        corrected = REFINE_TOKEN + fix + EOS_TOKEN
        row = _row(node, stage, "correct", corrected, EOS_TOKEN)
        row["fix"] = source
        rows.append(row)
        for failed in refinements:
            if failed.exec_result is not None and not failed.exec_result.passed and failed.completion is not None:
                worse = REFINE_TOKEN + attempt_segment(failed.completion.text) + EOS_TOKEN
                pair = _row(node, stage, "correct_over_failed_refinement", corrected, worse)
                pair["fix"] = source
                rows.append(pair)
    return rows


def balance(rows: Sequence[Row], max_factor: int = 4) -> list[Row]:
    """Repeat the rarer verdict's rows (after a right / a wrong attempt), at most `max_factor` times each.

    A small model is wrong far more often than right; without this, "always refine" fits the data.
    """
    right = [row for row in rows if row["passed"]]
    wrong = [row for row in rows if not row["passed"]]
    if not right or not wrong:
        return list(rows)
    few, many = (right, wrong) if len(right) < len(wrong) else (wrong, right)
    target = min(len(many), max_factor * len(few))
    return list(many) + [few[i % len(few)] for i in range(target)]


def rows_from_runs(store: TrajectoryStore, run_ids: Iterable[str], tasks: Mapping[str, Task], stage: int) -> list[Row]:
    """Rows of every task (that `tasks` knows) in the stored runs."""
    rows: list[Row] = []
    for run_id in run_ids:
        by_task: dict[str, list[Node]] = {}
        for node in store.list_nodes(run_id):
            by_task.setdefault(node.task_id, []).append(node)
        for task_id, nodes in by_task.items():
            if task_id in tasks:
                rows.extend(task_rows(nodes, tasks[task_id], stage))
    return rows


@dataclass
class CurriculumSpec:
    """How to train the two stages (few small steps with LoRA fit the CPU)."""

    base: str
    """M0: a model that already has the decision tokens (folder, or `checkpoint:ID`)."""
    out: Path
    steps: tuple[int, int] = (20, 20)
    batch_size: int = 4
    lora: bool = True
    lora_rank: int = 16
    learning_rate: float = 1e-4
    max_length: int = 512
    beta: float = 0.1
    dpo_weight: float = 0.1
    anchor_weight: float = 1.0
    """SFT on right attempts' own code beside the decisions (`training.revise`), to keep code writing in place
    while the LoRA learns the decisions."""
    balance: bool = True
    seed: int = 0
    threads: int | None = None
    """Torch threads while a stage trains (`TrainSpec.threads`): the curriculum runs alone, so it may take every
    core."""
    options: dict[str, Any] = field(default_factory=dict)


def stage_spec(spec: CurriculumSpec, base: str, stage: int) -> TrainSpec:
    """How a stage trains from `base` (its rows and folder are filled in by `train_stage`)."""
    return TrainSpec(
        method=f"revise-stage{stage}",
        data=spec.out,
        out=spec.out,
        model=base,
        lora=spec.lora,
        lora_rank=spec.lora_rank,
        steps=spec.steps[stage - 1],
        batch_size=spec.batch_size,
        learning_rate=spec.learning_rate,
        max_length=spec.max_length,
        seed=spec.seed,
        save_every=max(1, spec.steps[stage - 1]),
        threads=spec.threads,
        options={
            "beta": spec.beta,
            "dpo_weight": spec.dpo_weight,
            "anchor_weight": spec.anchor_weight,
            "train_tokens": list(DECISION_TOKENS),
            "decision_tokens": list(DECISION_TOKENS),
            **spec.options,
        },
    )


def stage_folder(spec: CurriculumSpec, base: str, stage: int, data: Sequence[Row]) -> Path:
    """Where a stage trains: named by every field of its `TrainSpec`, its rows and `STAGE_VERSION`, so a rerun
    with other settings or a changed trainer trains afresh instead of resuming an earlier run's folder (`run_id` only
    labels the checkpoint, and the thread count changes the speed, not the weights)."""
    from veriloop.training.revise import STAGE_VERSION

    unnamed = ("data", "out", "threads")
    fields = {key: value for key, value in asdict(stage_spec(spec, base, stage)).items() if key not in unnamed}
    fields["options"] = {key: value for key, value in fields["options"].items() if key != "run_id"}
    rows = [[row["prefix"], row["chosen"], row["rejected"]] for row in data]
    key = content_hash([fields, rows, STAGE_VERSION])
    return spec.out / f"stage{stage}-{key[:12]}"


def train_stage(
    settings: Settings, rows: Sequence[Row], base: str, stage: int, spec: CurriculumSpec, progress: Progress | None
) -> TrainResult:
    """Write the stage's rows as JSONL and train it from `base` in its `stage_folder`."""
    from veriloop.training.common import spec_threads
    from veriloop.training.revise import train_sft_dpo

    data = list(balance(rows)) if spec.balance else list(rows)
    if not data:
        raise ValueError(f"stage {stage} has no rows: the runs hold no tested attempts")
    out = stage_folder(spec, base, stage, data)
    path = write_rows(data, out / "rows.jsonl", "jsonl")
    train_spec = replace(stage_spec(spec, base, stage), data=path, out=out)
    with spec_threads(train_spec):  # the stage's trainer is called directly, not through `training.train`
        return train_sft_dpo(train_spec, settings, progress)


def run_curriculum(
    settings: Settings,
    store: TrajectoryStore,
    run_ids: Sequence[str],
    tasks: Mapping[str, Task],
    spec: CurriculumSpec,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Stage 1 then stage 2 on the stored runs' attempts; returns both stages' results and row counts.

    Both stages read the same stored samples of M0 (the paper samples stage 2's data from M1 again;
    on this CPU one sampling pass is what the budget allows).
    """
    report: dict[str, Any] = {}
    base = spec.base
    for stage in (1, 2):
        rows = rows_from_runs(store, run_ids, tasks, stage)
        result = train_stage(settings, rows, base, stage, spec, progress)
        kinds: dict[str, int] = {}
        for row in rows:
            kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        report[f"stage{stage}"] = {
            "rows": len(rows),
            "kinds": kinds,
            "model_id": result.model_id,
            "path": result.path,
            "metrics": result.metrics,
        }
        base = result.path
    report["model"] = base
    return report


def train_on_run(
    settings: Settings, store: TrajectoryStore, run: Run, tasks: Sequence[Task], options: ReviseOptions
) -> dict[str, Any]:
    """Both stages on a finished run's stored attempts (what `train=True` does after solving), from the run's model.

    The checkpoints are registered; their ids and the next command go to stderr (a worker's log).
    """
    import sys

    from veriloop.training.common import stderr_progress

    spec = CurriculumSpec(
        base=run.model or settings.llm.model,
        out=settings.paths.home / "checkpoints" / f"revise-{run.id[:12]}",
        steps=options.stage_steps,
        lora=options.lora,
        options={"run_id": run.id},
    )
    try:
        report = run_curriculum(settings, store, [run.id], {task.id: task for task in tasks}, spec, stderr_progress)
    except ValueError as error:
        raise ConfigError(f"ReVISE training: {error}") from None
    for stage in ("stage1", "stage2"):
        entry = report[stage]
        print(f"{stage}: {entry['rows']} rows {entry['kinds']} -> checkpoint:{entry['model_id']}", file=sys.stderr)
    print(f"use it with: veriloop --model checkpoint:{report['stage2']['model_id']} run revise ...", file=sys.stderr)
    return report


def ensure_decision_tokens(settings: Settings) -> Settings:
    """Settings whose embedded model has ReVISE's tokens: the configured model, or a prepared copy of it.

    Non-embedded backends are returned unchanged (they must serve a model that has the tokens).
    """
    if settings.llm.backend != "embedded":
        return settings
    from veriloop.llm.embedded import resolve_model
    from veriloop.training.common import load_tokenizer
    from veriloop.training.special_tokens import has_tokens, prepare_model

    if has_tokens(load_tokenizer(resolve_model(settings.llm.model, settings)), list(DECISION_TOKENS)):
        return settings
    folder, _ = prepare_model(settings, DECISION_TOKENS)
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": str(folder)})})
