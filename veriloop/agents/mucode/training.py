"""μCode's Algorithm 1 (expert iteration with a learned verifier), resumable round by round.

    for i = 1..M:
        D_i  <- rollouts of the generator in the multi-turn environment;  D <- D u D_i
        R_i  <- Bradley-Terry verifier on problem + code pairs from D
        expert(x) = argmax_{y in D(x)} 100 * oracle(x, y) + R_i(x, y)
        relabel failed trajectories of D_i so every state targets the expert's code
        generator <- SFT of the generator on the relabelled data (merged with earlier rounds')

Each round's files live in `<home>/mucode/<key>/iter-<i>/` (rollouts, pairs, SFT rows, verifier and
generator ids); the key hashes the suite slice, the base model and the training options, so a
rerun of the same command finds finished rounds (recorded in the store as `mucode-iteration`
exemplars) and skips them, and an interrupted round reuses what it had finished. Rollouts are
stored as nodes of the run, one tree per task and rollout.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from veriloop.agents.base import OnAttempt, notify
from veriloop.agents.common import finish_attempt, gather_as_finished
from veriloop.agents.context import AgentContext
from veriloop.agents.mucode import prompts
from veriloop.agents.mucode.graph import ORACLE_WEIGHT, Deps, Scorer, ThreadedVerifier, episode
from veriloop.agents.mucode.state import MuCodeOptions, MuCodeState
from veriloop.config import Settings
from veriloop.records import Attempt, Exemplar, Task
from veriloop.store.exports import Row

ITERATION_KIND = "mucode-iteration"
TRAINING_FIELDS = (
    "turns",
    "history",
    "max_tokens",
    "seed",
    "rollouts",
    "rollout_temperature",
    "pairs_per_task",
    "relabel",
    "expert_must_pass",
    "verifier_steps",
    "sft_steps",
    "sft_learning_rate",
    "train_max_length",
)


@dataclass
class Trajectory:
    """One rollout: the code of each turn, the public feedback it got, and whether the episode succeeded."""

    task_id: str
    rollout: int
    codes: list[str]
    feedbacks: list[str]
    label: bool
    final_node_id: str | None = None
    tokens: int = 0
    iteration: int = 1

    def exchanges(self) -> list[prompts.Exchange]:
        return [
            prompts.Exchange(reply=prompts.as_reply(code), code=code, feedback=feedback)
            for code, feedback in zip(self.codes, self.feedbacks, strict=True)
        ]


@dataclass
class Expert:
    """The local-search expert's action for one problem."""

    code: str
    label: bool
    score: float
    node_id: str | None = None


@dataclass
class Round:
    """What one finished round produced (the payload of its `mucode-iteration` exemplar)."""

    key: str
    iteration: int
    generator_in: str
    generator: str
    verifier: str | None
    folder: str
    metrics: dict[str, Any] = field(default_factory=dict)


def log(message: str) -> None:
    print(f"[mucode train] {message}", file=sys.stderr, flush=True)


def loop_key(options: MuCodeOptions, tasks: Sequence[Task], base: str) -> str:
    """Names a training loop by what it trains on and how, not by the run that started it."""
    chosen = {name: getattr(options, name) for name in TRAINING_FIELDS}
    if options.lora:  # named only when on, so the loops trained before the option keep their keys
        chosen |= {"lora": True, "lora_learning_rate": options.lora_learning_rate}
    if options.train_bf16:  # likewise
        chosen |= {"train_bf16": True}
    text = json.dumps([sorted(task.id for task in tasks), base, chosen], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def trajectory_of(task: Task, state: MuCodeState, rollout: int, iteration: int) -> Trajectory:
    played = state.get("played", [])
    final = state.get("final")
    return Trajectory(
        task_id=task.id,
        rollout=rollout,
        codes=[step.exchange.code for step in played],
        feedbacks=[step.exchange.feedback for step in played],
        label=final is not None and final.passed,
        final_node_id=state.get("final_node_id"),
        tokens=state.get("tokens", 0),
        iteration=iteration,
    )


async def rollouts(
    tasks: Sequence[Task], ctx: AgentContext, options: MuCodeOptions, iteration: int
) -> list[Trajectory]:
    """`options.rollouts` sampled episodes per task with the context's backend (the current generator)."""
    rollout_options = options.model_copy(
        update={
            "samples": 1,
            "selection": "pt",
            "temperature": options.rollout_temperature,
            "repair_temperature": None,
            "seed": options.seed + 1000 * iteration,
            "train": False,
        }
    )
    deps = Deps(ctx=ctx, options=rollout_options)
    gate = asyncio.Semaphore(options.concurrency)

    async def one(task: Task, rollout: int) -> Trajectory:
        async with gate:
            return trajectory_of(task, await episode(task, deps, rollout), rollout, iteration)

    jobs = [one(task, rollout) for task in tasks for rollout in range(options.rollouts)]
    done: list[Trajectory] = []

    def progress(trajectory: Trajectory) -> None:
        done.append(trajectory)
        if len(done) % 10 == 0 or len(done) == len(jobs):
            log(f"round {iteration}: {len(done)}/{len(jobs)} rollouts, {sum(t.label for t in done)} solved")

    await gather_as_finished(jobs, progress)
    done.sort(key=lambda trajectory: (trajectory.task_id, trajectory.rollout))
    return done


def verifier_samples(tasks: Sequence[Task], data: Sequence[Trajectory]) -> list[Any]:
    """Intermediate turns are negatives; the final turn keeps the episode's label (problem + code only)."""
    from veriloop.training.verifier import VerifierSample

    by_id = {task.id: task for task in tasks}
    samples = []
    for trajectory in data:
        task = by_id.get(trajectory.task_id)
        if task is None:
            continue
        prompt = [{"role": "user", "content": prompts.first_turn(task).content}]
        for index, code in enumerate(trajectory.codes):
            label = trajectory.label and index == len(trajectory.codes) - 1
            samples.append(VerifierSample(task.id, prompt, prompts.as_reply(code), label))
    return samples


async def experts(
    tasks: Sequence[Task], data: Sequence[Trajectory], verifier: Scorer | None, *, failing_experts: bool = True
) -> dict[str, Expert]:
    """Per problem, the best code seen in any turn of any rollout: the oracle's label first, the verifier's score
    breaking ties (the paper's 100 x oracle + verifier, for scores within 100 of each other).

    Only the codes with the best label are scored (about 3 s a code for a 0.5B verifier here). Without
    `failing_experts`, a problem that no rollout solved gets no expert and no scoring: nothing is relabelled
    towards a failing expert then (`expert_must_pass`)."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in data:
        by_task[trajectory.task_id].append(trajectory)
    chosen: dict[str, Expert] = {}
    for task in tasks:
        labels: dict[str, bool] = {}
        nodes: dict[str, str | None] = {}
        for trajectory in by_task.get(task.id, []):
            for index, code in enumerate(trajectory.codes):
                final = index == len(trajectory.codes) - 1
                passed = trajectory.label and final
                labels[code] = labels.get(code, False) or passed
                if passed:
                    nodes[code] = trajectory.final_node_id
        top = max(labels.values(), default=False)
        if not labels or not (top or failing_experts):
            continue
        codes = [code for code, label in labels.items() if label == top]
        learned = (
            await verifier.score(task, [prompts.as_reply(code) for code in codes]) if verifier else [0.0] * len(codes)
        )
        scores = [ORACLE_WEIGHT * labels[code] + value for code, value in zip(codes, learned, strict=True)]
        best = max(range(len(codes)), key=lambda index: (scores[index], -index))
        chosen[task.id] = Expert(codes[best], labels[codes[best]], scores[best], nodes.get(codes[best]))
    return chosen


def relabelled_rows(
    tasks: Sequence[Task], data: Sequence[Trajectory], chosen: dict[str, Expert], options: MuCodeOptions
) -> list[Row]:
    """SFT rows: every state of every successful rollout, and of up to `relabel` failed ones, targets a good code.

    Successful rollouts keep their own final code; failed ones get the expert's (skipped when the
    expert fails the tests and `expert_must_pass` is on). Identical rows are kept once.
    """
    by_id = {task.id: task for task in tasks}
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in data:
        by_task[trajectory.task_id].append(trajectory)
    rows: list[Row] = []
    seen: set[str] = set()
    for task_id, group in sorted(by_task.items()):
        task = by_id.get(task_id)
        if task is None:
            continue
        targets = [(trajectory, trajectory.codes[-1]) for trajectory in group if trajectory.label]
        expert = chosen.get(task_id)
        if expert is not None and (expert.label or not options.expert_must_pass):
            failed = [trajectory for trajectory in group if not trajectory.label][: options.relabel]
            targets += [(trajectory, expert.code) for trajectory in failed]
        for trajectory, code in targets:
            exchanges = trajectory.exchanges()
            for turn in range(len(exchanges)):
                messages = prompts.turn_messages(task, exchanges[:turn], options.history)
                row = {
                    "prompt": [message.model_dump() for message in messages],
                    "completion": [{"role": "assistant", "content": prompts.as_reply(code)}],
                    "task_id": task_id,
                }
                text = json.dumps(row, sort_keys=True)
                if text not in seen:
                    seen.add(text)
                    rows.append(row)
    return rows


def _write(rows: Sequence[dict[str, Any]], path: Path) -> None:
    from veriloop.training.verifier import write_jsonl

    write_jsonl(rows, path)


def _read(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _with_model(settings: Settings, model: str) -> Settings:
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": model})})


def finished_rounds(ctx: AgentContext, key: str) -> dict[int, Round]:
    rounds: dict[int, Round] = {}
    for exemplar in ctx.store.list_exemplars(kind=ITERATION_KIND):
        if exemplar.payload.get("key") == key:
            rounds[int(exemplar.payload["iteration"])] = Round(**exemplar.payload)
    return rounds


async def one_round(
    iteration: int,
    generator: str,
    key: str,
    folder: Path,
    tasks: Sequence[Task],
    ctx: AgentContext,
    options: MuCodeOptions,
    base: str,
) -> tuple[Round, list[Trajectory], dict[str, Expert]]:
    """Rollouts, verifier, expert, relabelling and SFT of round `iteration`; each stage reuses its saved output."""
    from veriloop.llm import get_backend
    from veriloop.training import train
    from veriloop.training.common import TrainSpec
    from veriloop.training.verifier import LearnedVerifier, preference_pairs, train_verifier

    settings = ctx.settings
    folder.mkdir(parents=True, exist_ok=True)
    rollout_file = folder / "rollouts.jsonl"
    if rollout_file.is_file():
        current = [Trajectory(**row) for row in _read(rollout_file)]
        log(f"round {iteration}: reusing {len(current)} rollouts from {rollout_file}")
    else:
        backend = ctx.backend if generator == ctx.backend.model_id else get_backend(_with_model(settings, generator))
        try:
            round_ctx = AgentContext(
                settings=settings,
                backend=backend,
                sandbox=ctx.sandbox,
                store=ctx.store,
                run=ctx.run,
                verifiers=ctx.verifiers,
            )
            current = await rollouts(tasks, round_ctx, options, iteration)
        finally:
            if backend is not ctx.backend:
                await backend.aclose()
        _write([asdict(trajectory) for trajectory in current], rollout_file)
    data = list(current)
    for earlier in range(1, iteration):
        earlier_file = folder.parent / f"iter-{earlier}" / "rollouts.jsonl"
        if earlier_file.is_file():
            data += [Trajectory(**row) for row in _read(earlier_file)]

    verifier_file = folder / "verifier.json"
    pairs = preference_pairs(verifier_samples(tasks, data), options.pairs_per_task, seed=options.seed + iteration)
    verifier_id: str | None = None
    verifier_metrics: dict[str, Any] = {}
    if verifier_file.is_file():
        saved = json.loads(verifier_file.read_text())
        verifier_id, verifier_metrics = saved["id"], saved["metrics"]
    elif pairs:
        log(f"round {iteration}: training the verifier on {len(pairs)} pairs")
        result = await asyncio.to_thread(
            train_verifier,
            pairs,
            folder / "verifier",
            settings,
            base=base,
            steps=options.verifier_steps,
            max_length=options.train_max_length,
            lora=options.lora,
            seed=options.seed,
            threads=options.train_threads,
            bf16=options.train_bf16,
        )
        verifier_id = f"checkpoint:{result.model_id}" if result.model_id else result.path
        verifier_metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float | str | None)}
        verifier_file.write_text(json.dumps({"id": verifier_id, "metrics": verifier_metrics}))
    else:
        log(f"round {iteration}: no problem has both a passing and a failing reply; no verifier this round")
    scorer: Scorer | None = None
    if verifier_id is not None:
        scorer = ThreadedVerifier(LearnedVerifier.load(verifier_id, settings, max_length=options.train_max_length))
    chosen = await experts(tasks, data, scorer, failing_experts=not options.expert_must_pass)
    del scorer  # the verifier's weights are not needed past this point; free them before fine-tuning
    gc.collect()

    generator_file = folder / "generator.json"
    rows = relabelled_rows(tasks, current, chosen, options)
    merged = list(rows)
    for earlier in range(1, iteration):
        earlier_rows = folder.parent / f"iter-{earlier}" / "sft.jsonl"
        if earlier_rows.is_file():
            merged += _read(earlier_rows)
    _write(rows, folder / "sft.jsonl")
    new_generator = generator
    sft_metrics: dict[str, Any] = {}
    if generator_file.is_file():
        saved = json.loads(generator_file.read_text())
        new_generator, sft_metrics = saved["id"], saved["metrics"]
    elif merged:
        _write(
            [{"prompt": row["prompt"], "completion": row["completion"]} for row in merged], folder / "sft-merged.jsonl"
        )
        log(f"round {iteration}: fine-tuning {generator} on {len(merged)} relabelled rows")
        spec = TrainSpec(
            method="sft",
            data=folder / "sft-merged.jsonl",
            out=folder / "sft",
            model=generator,
            steps=options.sft_steps,
            batch_size=2,
            learning_rate=options.lora_learning_rate if options.lora else options.sft_learning_rate,
            lora=options.lora,
            max_length=options.train_max_length,
            seed=options.seed,
            save_every=max(5, options.sft_steps // 4),
            threads=options.train_threads,
            bf16=options.train_bf16,
        )
        result = await asyncio.to_thread(train, spec, settings)
        new_generator = f"checkpoint:{result.model_id}" if result.model_id else result.path
        sft_metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float | str | None)}
        generator_file.write_text(json.dumps({"id": new_generator, "metrics": sft_metrics}))
    else:
        log(f"round {iteration}: no relabelled rows; the generator stays {generator}")
    tasks_solved = len({t.task_id for t in current if t.label})
    metrics = {
        "rollouts": len(current),
        "rollouts_solved": sum(trajectory.label for trajectory in current),
        "tasks_solved": tasks_solved,
        "tasks": len(tasks),
        "pairs": len(pairs),
        "experts_passing": sum(expert.label for expert in chosen.values()),
        "sft_rows": len(rows),
        "sft_rows_merged": len(merged),
        "verifier": verifier_metrics,
        "sft": sft_metrics,
    }
    record = Round(key, iteration, generator, new_generator, verifier_id, str(folder), metrics)
    return record, current, chosen


async def expert_iteration(
    options: MuCodeOptions, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
) -> list[Attempt]:
    """Run (or resume) M rounds on `tasks`; one Attempt per task: passed when some rollout solved it."""
    base = ctx.run.model or ctx.settings.llm.model
    key = loop_key(options, tasks, base)
    root = ctx.settings.paths.home / "mucode" / key
    done = finished_rounds(ctx, key)
    generator = base
    current: list[Trajectory] = []
    chosen: dict[str, Expert] = {}
    for iteration in range(1, options.iterations + 1):
        folder = root / f"iter-{iteration}"
        if iteration in done:
            generator = done[iteration].generator
            log(f"round {iteration} already finished (generator {generator}); skipped")
            continue
        record, current, chosen = await one_round(iteration, generator, key, folder, tasks, ctx, options, base)
        await asyncio.to_thread(
            ctx.store.add_exemplar,
            Exemplar(
                kind=ITERATION_KIND, language="python", payload=asdict(record), iteration=iteration, run_id=ctx.run.id
            ),
        )
        log(f"round {iteration} done: generator {record.generator}, verifier {record.verifier}, {record.metrics}")
        generator = record.generator
    if not current:
        last = root / f"iter-{options.iterations}" / "rollouts.jsonl"
        current = [Trajectory(**row) for row in _read(last)] if last.is_file() else []
    solved = {trajectory.task_id: trajectory for trajectory in current if trajectory.label}
    tokens: dict[str, int] = defaultdict(int)
    for trajectory in current:
        tokens[trajectory.task_id] += trajectory.tokens
    attempts = []
    for task in tasks:
        expert = chosen.get(task.id)
        winner = solved.get(task.id)
        attempt = await finish_attempt(
            ctx,
            task,
            passed=winner is not None,
            best_node_id=winner.final_node_id if winner is not None else None,
            score=expert.score if expert is not None else None,
            tokens=tokens[task.id],
        )
        attempts.append(attempt)
        await notify(on_attempt, attempt)
    return attempts


def rounds_of(ctx: AgentContext, options: MuCodeOptions, tasks: Sequence[Task]) -> list[Round]:
    """The finished rounds of the loop these options and tasks name (for reports)."""
    key = loop_key(options, tasks, ctx.run.model or ctx.settings.llm.model)
    return [record for _, record in sorted(finished_rounds(ctx, key).items())]
