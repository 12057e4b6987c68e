"""`veriloop bench mucode` end to end with the scripted backend: every key reported, runs stored, errors named."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.bench import mucode
from veriloop.config import load_settings
from veriloop.store import TrajectoryStore


@pytest.mark.slow
def test_bench_reports_every_key_with_a_scripted_model(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted"})
    partial = tmp_path / "partial.json"
    result = mucode.main(
        settings,
        [
            "--tasks",
            "2",
            "--train-suite",
            "humaneval-train",
            "--train-tasks",
            "2",
            "--rollouts",
            "1",
            "--partial",
            str(partial),
        ],
    )
    assert set(result["pass_at_1"]) == set(mucode.KEYS) and result["n_tasks"] == 2
    # echoed prompts never pass, so no verifier can be trained: its rules are reported as errors, not as zeros
    assert result["pass_at_1"]["bon_lv"] is None and "no verifier" in result["errors"]["bon_lv"]
    assert result["pass_at_1"]["single_turn"] == 0.0 and result["pass_at_1"]["bon_random"] == 0.0
    assert result["training_round"]["metrics"]["rollouts"] == 2 and partial.is_file()
    assert "single_turn" in result["table"] and result["bon_cache"]["hits"] > 0
    shapes = result["reply_shapes"]  # both runs report their replies' shapes, with and without the constraint
    assert set(shapes) == {"multi_turn", "multi_turn_unstructured"}
    shares = ("without_code_block", "several_blocks", "unparseable", "without_function")
    assert all(run["replies"] > 0 and all(0 <= run[key] <= 1 for key in shares) for run in shapes.values())
    with TrajectoryStore.from_settings(settings) as store:
        assert {run.id for run in store.list_runs()} >= set(result["runs"].values())
