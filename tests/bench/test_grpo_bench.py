"""The training benches' harness (`bench._held_out`) and `bench grpo`: statistics, held-out scoring through the real
judge, and how the harness joins before, training and after.

GRPO training itself runs for real in tests/training/test_grpo.py; here a scripted model answers the held-out
prompts so that the scores are known, and the real sandbox judges them.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.bench.toys import add_task
from veriloop.bench import _held_out as held_out
from veriloop.bench import grpo
from veriloop.config import Settings, load_settings
from veriloop.records import Task
from veriloop.testing import ScriptedBackend
from veriloop.training.rewards import JudgeReward, LocalJudge


def test_summary_reports_means_intervals_and_all_pass_shares() -> None:
    result = held_out.summary([[1.0, 0.5], [0.0, 0.0], [1.0, 1.0]])
    assert result["mean_reward"] == pytest.approx((0.75 + 0.0 + 1.0) / 3, abs=1e-4)
    assert result["all_pass_samples"] == 3 and result["samples"] == 6 and result["all_pass_share"] == 0.5
    assert result["prompts_with_any_pass"] == 2 and result["per_prompt_mean"] == [0.75, 0.0, 1.0]
    low, high = result["bootstrap_95"]
    assert 0.0 <= low <= result["mean_reward"] <= high <= 1.0
    w_low, w_high = result["all_pass_wilson_95"]
    assert 0.0 < w_low < 0.5 < w_high < 1.0  # Wilson: never collapses to a point


def test_summary_of_all_failures_keeps_an_interval() -> None:
    result = held_out.summary([[0.0, 0.0]] * 4)
    assert result["mean_reward"] == 0.0 and result["all_pass_wilson_95"][0] == 0.0
    assert result["all_pass_wilson_95"][1] > 0.2  # 0/8 is not "0% exactly"


@pytest.mark.parametrize(
    "argv",
    [["--num-generations", "1"], ["--steps", "0"], ["--samples", "0"], ["--eval-tasks", "0"], ["--reward", "x"]],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        grpo.parse(argv)
    assert raised.value.code == 2


def test_held_out_rewards_are_the_judges_verdicts_on_each_sample(
    judge: LocalJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    replies = ["    return a + b\n", "    return a * b\n", "    return (\n", "    return a + b\n\ndef extra():\n"]
    backend = ScriptedBackend(replies)
    monkeypatch.setattr("veriloop.llm.get_backend", lambda settings: backend)
    args = grpo.parse(["--samples", "2", "--max-tokens", "16", "--seed", "7"])
    settings = load_settings(paths={"home": tmp_path})
    scores = asyncio.run(
        held_out.held_out_rewards(settings, [add_task(0), add_task(1)], JudgeReward(judge, mode="pass_rate"), args)
    )
    # pass rate per sample: a + b passes both asserts, a * b only add(0, 0) == 0; a syntax error scores 0; the
    # completion is cut at HumanEval's stop sequences before the judge sees it
    assert scores == [[1.0, 0.5], [0.0, 1.0]]
    seeds = [params.seed for _, params in backend.requests]
    assert seeds == [7, 8] and all(params.n == 2 and params.max_tokens == 16 for _, params in backend.requests)


def test_main_pairs_before_and_after_on_the_same_prompts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tasks = {"humaneval-train": [add_task(i) for i in range(4)], "humaneval-test": [add_task(i) for i in range(10, 13)]}

    class Suite:
        def __init__(self, name: str) -> None:
            self.tasks = tasks[name]

    seen: list[tuple[str, bool]] = []
    sampled_scores = {False: [[0.0, 0.5], [0.0, 0.0], [1.0, 1.0]], True: [[1.0, 0.5], [0.0, 0.0], [1.0, 0.0]]}
    greedy_scores = {False: [[0.0], [1.0], [1.0]], True: [[1.0], [1.0], [0.0]]}

    async def rewards(
        settings: Settings, held: Sequence[Task], reward: Any, args: argparse.Namespace, *, greedy: bool = False
    ) -> Any:
        seen.append((settings.llm.model, greedy))
        return (greedy_scores if greedy else sampled_scores)[settings.llm.model == "checkpoint:trained"]

    def train(
        settings: Settings, train_tasks: Sequence[Task], args: argparse.Namespace, folder: Path, reward: Any
    ) -> Any:
        assert [task.id for task in train_tasks] == ["toy/0", "toy/1"] and folder.is_dir()
        return {"model_id": "trained", "train_rewards": [0.1, 0.3]}

    monkeypatch.setattr("veriloop.tasks.load_suite", lambda name, settings: Suite(name))
    monkeypatch.setattr(held_out, "held_out_rewards", rewards)
    monkeypatch.setattr(grpo, "train", train)
    settings = load_settings(paths={"home": tmp_path}, llm={"model": "smollm2-135m-instruct"})
    result = grpo.main(settings, ["--train-tasks", "2", "--eval-tasks", "3", "--samples", "2"])
    assert seen == [
        ("smollm2-135m-instruct", False),
        ("smollm2-135m-instruct", True),
        ("checkpoint:trained", False),
        ("checkpoint:trained", True),
    ]
    assert result["held_out_tasks"] == ["toy/10", "toy/11", "toy/12"]
    diff = result["after_minus_before"]
    assert diff["mean_reward"] == pytest.approx((0.75 + 0 + 0.5) / 3 - (0.25 + 0 + 1.0) / 3, abs=1e-4)
    assert diff["prompts_up"] == 1 and diff["prompts_down"] == 1
    low, high = diff["paired_bootstrap_95"]
    assert low <= diff["mean_reward"] <= high
    assert (Path(result["config"]["folder"]) / "result.json").exists()
    # greedy: prompt 0 gained, prompt 2 lost, prompt 1 solved both times
    greedy = result["greedy"]
    assert (greedy["before_solved"], greedy["after_solved"], greedy["prompts"]) == (2, 2, 3)
    assert (greedy["gained"], greedy["lost"], greedy["mcnemar_p"]) == (1, 1, 1.0)
    assert (greedy["gained_tasks"], greedy["lost_tasks"]) == (["toy/10"], ["toy/12"])
    assert greedy["before_wilson_95"][0] < 2 / 3 < greedy["before_wilson_95"][1]


def test_main_refuses_a_held_out_prompt_that_training_sees(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    suite = argparse.Namespace(tasks=[add_task(0), add_task(1)])
    monkeypatch.setattr("veriloop.tasks.load_suite", lambda name, settings: suite)
    with pytest.raises(RuntimeError, match="overlap"):
        grpo.main(load_settings(paths={"home": tmp_path}), ["--train-tasks", "2", "--eval-tasks", "2"])
