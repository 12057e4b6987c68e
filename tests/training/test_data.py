"""Reward-augmented preference pairs: goals, the swap of the negative copy, and the score filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.bench._sample_data import SampleRuns
from veriloop.cli import main
from veriloop.store.exports import Row, load_rows
from veriloop.training.data import RA_GOAL, goal_text, reward_augment, to_scale


def _row(chosen_score: float = 1.0, rejected_score: float = 0.0) -> Row:
    return {
        "prompt": [{"role": "user", "content": "write f"}],
        "chosen": [{"role": "assistant", "content": "good"}],
        "rejected": [{"role": "assistant", "content": "bad"}],
        "chosen_score": chosen_score,
        "rejected_score": rejected_score,
        "chosen_token_ids": [1],
        "rejected_token_ids": [2],
    }


def test_goal_text_is_the_papers_template_with_integral_scores() -> None:
    assert goal_text(10.0).endswith("Overall score: 10.")
    assert goal_text(5.5).endswith("Overall score: 5.5.")
    assert goal_text(1.0) == RA_GOAL.format(score=1)
    assert (to_scale(0.0), to_scale(1.0), to_scale(0.5)) == (1.0, 10.0, 5.5)


def test_positive_copy_keeps_and_negative_copy_swaps_the_responses() -> None:
    positive, negative = reward_augment([_row()])
    assert positive["prompt"][0] == {"role": "system", "content": goal_text(10)}
    assert positive["chosen"][0]["content"] == "good" and positive["rejected"][0]["content"] == "bad"
    assert negative["prompt"][0] == {"role": "system", "content": goal_text(1)}
    assert negative["chosen"][0]["content"] == "bad" and negative["rejected"][0]["content"] == "good"
    assert negative["chosen_token_ids"] == [2] and negative["chosen_score"] == 0.0
    assert negative["prompt"][1] == {"role": "user", "content": "write f"}  # the user turn is left alone


def test_goal_in_the_user_turn_still_swaps_the_assistant_responses() -> None:
    """The reference code's no-system variant swapped the user messages; ours swaps the responses."""
    positive, negative = reward_augment([_row()], system=False)
    assert len(negative["prompt"]) == 1 and negative["prompt"][0]["content"] == goal_text(1) + "\n\nwrite f"
    assert negative["chosen"][0]["content"] == "bad" and negative["rejected"][0]["content"] == "good"
    assert positive["prompt"][0]["content"].startswith(goal_text(10))


def test_pairs_with_a_lower_chosen_score_are_dropped_and_inputs_untouched() -> None:
    row = _row(0.2, 0.6)
    kept = _row()
    assert len(reward_augment([row, kept])) == 2
    assert kept["prompt"] == [{"role": "user", "content": "write f"}]


def test_export_with_reward_augment(
    demo_runs: SampleRuns, demo_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ra.jsonl"
    argv = ["--home", str(demo_home), "export", "preference", "--run", demo_runs.good_run, "--run", demo_runs.bad_run]
    assert main([*argv, "--out", str(out), "--reward-augment", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 10
    rows = load_rows(out)
    assert sorted(row["augmented"] for row in rows) == ["negative"] * 5 + ["positive"] * 5
    assert main([*argv[:2], "export", "sft", "--run", demo_runs.good_run, "--out", str(out), "--reward-augment"]) != 0
    assert "preference exports only" in capsys.readouterr().err
