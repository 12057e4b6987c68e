"""μCode's Algorithm 1: relabelling and expert rules with plain data; one real round on the embedded model."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.agents.context import AgentContext
from veriloop.agents.mucode import MuCodeAgent, MuCodeOptions, prompts
from veriloop.agents.mucode.training import (
    ITERATION_KIND,
    Expert,
    Trajectory,
    experts,
    loop_key,
    relabelled_rows,
    verifier_samples,
)
from veriloop.agents.runner import create_run, execute_run
from veriloop.config import Settings, load_settings
from veriloop.records import Task
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedBackend
from veriloop.training.verifier import preference_pairs

GOOD = "def add(x: int, y: int):\n    return x + y"
BAD = "def add(x: int, y: int):\n    return x - y"
WORSE = "def add(x: int, y: int):\n    return 0"


def _task() -> Task:
    return load_suite("humaneval", load_settings()).select(ids=["HumanEval/53"]).tasks[0]


def _data() -> list[Trajectory]:
    return [
        Trajectory("HumanEval/53", 0, [BAD, WORSE, BAD], ["AssertionError", "AssertionError", "AssertionError"], False),
        Trajectory("HumanEval/53", 1, [WORSE, GOOD], ["AssertionError", prompts.PASSED], True, final_node_id="n1"),
        Trajectory("HumanEval/53", 2, [WORSE], ["AssertionError"], False),
    ]


class LengthVerifier:
    """Scores a reply by its length: enough to tell ties broken by the verifier from the oracle's weight."""

    def __init__(self) -> None:
        self.scored = 0

    async def score(self, task: Task, replies: list[str]) -> list[float]:
        self.scored += len(replies)
        return [float(len(reply)) for reply in replies]


def test_verifier_samples_mark_intermediate_turns_negative_and_keep_the_final_label() -> None:
    samples = verifier_samples([_task()], _data())
    labels = [sample.label for sample in samples]
    assert labels == [False, False, False, False, True, False]
    assert all(
        sample.prompt == [{"role": "user", "content": prompts.first_turn(_task()).content}] for sample in samples
    )
    pairs = preference_pairs(samples, per_prompt=5, seed=1)
    assert len(pairs) == 5
    assert all(pair["chosen"][0]["content"] == prompts.as_reply(GOOD) for pair in pairs)
    assert not preference_pairs([sample for sample in samples if not sample.label])  # one class only: no pairs


async def test_expert_is_the_oracle_winner_and_the_verifier_breaks_ties() -> None:
    chosen = await experts([_task()], _data(), LengthVerifier())
    assert chosen["HumanEval/53"].code == GOOD and chosen["HumanEval/53"].label  # 100 x oracle beats any length
    failing_only = [trajectory for trajectory in _data() if not trajectory.label]
    chosen = await experts([_task()], failing_only, LengthVerifier())
    assert chosen["HumanEval/53"].code == BAD and not chosen["HumanEval/53"].label  # the longest failing code
    counting = LengthVerifier()
    chosen = await experts([_task()], _data(), counting, failing_experts=False)
    assert chosen["HumanEval/53"].code == GOOD and counting.scored == 1  # failing codes cannot win: not scored
    assert await experts([_task()], failing_only, counting, failing_experts=False) == {} and counting.scored == 1


def test_relabelling_points_every_state_of_failed_rollouts_at_the_expert() -> None:
    options = MuCodeOptions(relabel=1, history="full")
    expert = {"HumanEval/53": Expert(code=GOOD, label=True, score=100.0)}
    rows = relabelled_rows([_task()], _data(), expert, options)
    targets = {row["completion"][0]["content"] for row in rows}
    assert targets == {prompts.as_reply(GOOD)}
    # the successful rollout: 2 states; the first failed one (relabel=1): 3 states; its first state
    # (the bare problem) is the same prompt as the successful rollout's first, so it is kept once.
    assert len(rows) == 2 + 3 - 1
    assert [len(row["prompt"]) for row in rows] == [1, 3, 3, 5]
    assert rows[-1]["prompt"][-1]["content"].startswith("Feedback: ")
    refused = relabelled_rows([_task()], _data()[::2], {"HumanEval/53": Expert(BAD, False, 1.0)}, options)
    assert refused == []  # the expert fails the tests: nothing to imitate
    paper = relabelled_rows(
        [_task()], _data()[::2], {"HumanEval/53": Expert(BAD, False, 1.0)}, MuCodeOptions(expert_must_pass=False)
    )
    assert paper and all(row["completion"][0]["content"] == prompts.as_reply(BAD) for row in paper)


def _round_parts(model_settings: Settings, home: Path, db: Path) -> tuple[Settings, ScriptedBackend]:
    """A scratch home and store, and a scripted model whose rollouts alternate passing and failing replies."""
    settings = model_settings.model_copy(
        update={
            "paths": model_settings.paths.model_copy(update={"home": home}),
            "store": model_settings.store.model_copy(update={"url": f"sqlite:///{db}"}),
        }
    )
    replies = iter([f"```python\n{GOOD}\n```", f"```python\n{BAD}\n```"] * 50)
    return settings, ScriptedBackend([lambda _prompt: next(replies)], model=settings.llm.model)


@pytest.mark.slow
@pytest.mark.model
async def test_one_training_round_trains_registers_and_resumes(
    tmp_path: Path, model_settings: Settings, scratch_model_home: Path
) -> None:
    """Scripted rollouts (both labels), then a real verifier and a real SFT of the embedded model; a rerun skips."""
    settings, backend = _round_parts(model_settings, scratch_model_home, tmp_path / "train.db")
    options = {
        "train": True,
        "rollouts": 2,
        "turns": 2,
        "verifier_steps": 2,
        "sft_steps": 2,
        "pairs_per_task": 4,
        "train_max_length": 256,
    }
    sandbox = get_sandbox(settings)
    try:
        with TrajectoryStore.from_settings(settings) as store:
            run = create_run(
                store, settings, agent="mucode", suite="humaneval", options=options, task_ids=["HumanEval/53"]
            )
            _, attempts = await execute_run(settings, store, run.id, backend=backend, sandbox=sandbox)
            [record] = store.list_exemplars(kind=ITERATION_KIND)
            assert attempts[0].status == "passed"
            payload = record.payload
            assert payload["verifier"].startswith("checkpoint:") and payload["generator"].startswith("checkpoint:")
            assert payload["metrics"]["pairs"] == 4 and payload["metrics"]["sft_rows"] >= 1
            assert {model.method for model in store.list_models()} == {"rm", "sft"}
            assert store.get_tree(run.id, "HumanEval/53")  # rollouts are stored as nodes
            again = create_run(
                store, settings, agent="mucode", suite="humaneval", options=options, task_ids=["HumanEval/53"]
            )
            seen = len(backend.requests)
            await execute_run(settings, store, again.id, backend=backend, sandbox=sandbox)
            assert len(backend.requests) == seen  # the finished round is skipped, not rolled out again
            assert len(store.list_models()) == 2
            verifier = MuCodeAgent(MuCodeOptions(select="lv", verifier_model=payload["verifier"])).verifier(
                AgentContext(settings, backend, sandbox, store, run)
            )
            assert verifier is not None
            scores = await verifier.score(_task(), [prompts.as_reply(GOOD), prompts.as_reply(BAD)])
            assert len(scores) == 2 and all(isinstance(score, float) for score in scores)
    finally:
        await sandbox.aclose()


def test_lora_names_its_own_loop_and_keeps_earlier_keys() -> None:
    tasks = [_task()]
    plain = loop_key(MuCodeOptions(train=True), tasks, "base")
    assert loop_key(MuCodeOptions(train=True, lora=False, lora_learning_rate=3e-4), tasks, "base") == plain
    assert loop_key(MuCodeOptions(train=True, lora=True), tasks, "base") != plain
    assert loop_key(MuCodeOptions(train=True, train_threads=2), tasks, "base") == plain  # speed, not what is learned
    assert loop_key(MuCodeOptions(train=True, train_bf16=False), tasks, "base") == plain
    assert loop_key(MuCodeOptions(train=True, train_bf16=True), tasks, "base") != plain  # rounds what is learned


@pytest.mark.slow
@pytest.mark.model
async def test_a_lora_round_trains_adapters_for_the_verifier_and_the_generator(
    tmp_path: Path, model_settings: Settings, scratch_model_home: Path
) -> None:
    """--lora, train_threads and train_bf16 reach both trainings: each reports them and saves merged weights the method
    can load."""
    settings, backend = _round_parts(model_settings, scratch_model_home, tmp_path / "lora.db")
    options = {"train": True, "lora": True, "rollouts": 2, "turns": 2, "verifier_steps": 2, "sft_steps": 2}
    options |= {"train_threads": 2, "train_bf16": True}
    options |= {"pairs_per_task": 4, "train_max_length": 256}
    sandbox = get_sandbox(settings)
    try:
        with TrajectoryStore.from_settings(settings) as store:
            run = create_run(
                store, settings, agent="mucode", suite="humaneval", options=options, task_ids=["HumanEval/53"]
            )
            await execute_run(settings, store, run.id, backend=backend, sandbox=sandbox)
            [record] = store.list_exemplars(kind=ITERATION_KIND)
            metrics = record.payload["metrics"]
            assert metrics["verifier"]["lora"] is True and metrics["sft"]["lora"] is True
            assert metrics["verifier"]["torch_threads"] == 2 and metrics["sft"]["torch_threads"] == 2
            assert metrics["verifier"]["bf16"] is True and metrics["sft"]["bf16"] is True
            assert record.payload["generator"].startswith("checkpoint:")
            verifier = MuCodeAgent(MuCodeOptions(select="lv", verifier_model=record.payload["verifier"])).verifier(
                AgentContext(settings, backend, sandbox, store, run)
            )
            assert verifier is not None
            scores = await verifier.score(_task(), [prompts.as_reply(GOOD), prompts.as_reply(BAD)])
            assert len(scores) == 2
    finally:
        await sandbox.aclose()
