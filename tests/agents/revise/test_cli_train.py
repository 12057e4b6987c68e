"""`veriloop run revise --train`: sample on a train slice, then both curriculum stages, checkpoints registered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.cli import main
from veriloop.config import load_settings
from veriloop.store import TrajectoryStore
from veriloop.testing import tiny_model_folder


@pytest.mark.slow
def test_run_revise_train_registers_both_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tiny_model_folder(tmp_path / "tiny")
    home = tmp_path / "home"
    code = main(
        [
            "--home",
            str(home),
            "--model",
            str(folder),
            "run",
            "revise",
            "--suite",
            "humaneval",
            "--task",
            "HumanEval/23",
            "--task",
            "HumanEval/28",
            "--samples",
            "2",
            "--refinements",
            "1",
            "--max-tokens",
            "16",
            "--train",
            "--stage-steps",
            "1",
            "1",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0 and report["status"] == "finished" and report["total"] == 2
    lines = [line for line in captured.err.splitlines() if line.startswith(("stage1:", "stage2:"))]
    assert [line.split(":")[0] for line in lines] == ["stage1", "stage2"]
    ids = [line.rsplit("checkpoint:", 1)[1] for line in lines]
    with TrajectoryStore.from_settings(load_settings(paths={"home": home})) as store:
        stage1, stage2 = (store.get_model(model_id) for model_id in ids)
    assert (stage1.method, stage2.method) == ("revise-stage1", "revise-stage2")
    assert stage2.base == stage1.path  # stage 2 starts from stage 1
    assert "use it with: veriloop --model checkpoint:" + ids[1] in captured.err


def test_run_revise_train_refuses_a_run_without_tested_attempts(tmp_path: Path) -> None:
    from veriloop.agents.revise.curriculum import CurriculumSpec, run_curriculum

    settings = load_settings(paths={"home": tmp_path})
    with TrajectoryStore.from_settings(settings) as store, pytest.raises(ValueError, match="no rows"):
        run_curriculum(settings, store, [], {}, CurriculumSpec(base="unused", out=tmp_path / "out"))


def test_bad_options_fail_before_the_model_is_prepared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--home", str(tmp_path), "run", "revise", "--selection", "loudest", "--limit", "1"])
    assert code != 0 and "selection: Input should be 'confidence', 'majority' or 'first'" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
async def test_a_run_created_like_the_api_does_gets_the_model_with_decision_tokens(tmp_path: Path) -> None:
    from veriloop.agents.runner import create_run, execute_run

    settings = load_settings(paths={"home": tmp_path / "home"}, llm={"model": str(tiny_model_folder(tmp_path / "t"))})
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store,
            settings,
            agent="revise",
            suite="humaneval",
            options={"samples": 1, "max_tokens": 16},
            task_ids=["HumanEval/23"],
        )
        assert "/checkpoints/tokens-" in run.model  # the prepared copy, recorded on the run
        finished, [attempt] = await execute_run(settings, store, run.id)  # the base model in settings: run's wins
        decisions = [node for node in store.get_tree(run.id, "HumanEval/23") if node.role == "verify"]
    assert finished.status.value == "finished" and attempt.status in ("passed", "failed")
    assert decisions and all(0.0 < node.metadata["p_eos"] < 1.0 for node in decisions)
