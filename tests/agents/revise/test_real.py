"""ReVISE end to end with the embedded model, the real sandbox and a SQLite store, on 3 HumanEval tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.agents.revise.curriculum import rows_from_runs
from veriloop.agents.revise.prompts import EOS_TOKEN, REFINE_TOKEN
from veriloop.cli import main
from veriloop.config import load_settings
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite


@pytest.mark.slow
@pytest.mark.model
def test_run_revise_with_the_embedded_model(
    tmp_path: Path, model_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = f"sqlite:///{tmp_path / 'revise.db'}"
    code = main(
        [
            "--home",
            str(model_home),
            "--database",
            database,
            "run",
            "revise",
            "--suite",
            "humaneval",
            "--task",
            "HumanEval/23",
            "--task",
            "HumanEval/28",
            "--task",
            "HumanEval/0",
            "--samples",
            "2",
            "--max-tokens",
            "96",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["status"] == "finished" and report["total"] == 3
    assert "/checkpoints/tokens-" in report["model"]  # the prepared copy with the decision tokens
    settings = load_settings(paths={"home": model_home}, store={"url": database})
    tasks = {task.id: task for task in load_suite("humaneval", settings).tasks}
    with TrajectoryStore.from_settings(settings) as store:
        for attempt in report["attempts"]:
            nodes = store.get_tree(report["run_id"], attempt["task_id"])
            first = [node for node in nodes if node.role == "generate"]
            decisions = [node for node in nodes if node.role == "verify"]
            [select] = [node for node in nodes if node.role == "select"]
            assert len(first) == 2 and all(node.exec_result is not None for node in first)
            entry = f"def {tasks[attempt['task_id']].entry_point}("
            for node in nodes:  # `structured` (on by default): every attempt is one python block with the function
                if node.role in ("generate", "refine"):
                    assert node.completion is not None and node.completion.text.startswith("```python\n")
                    assert node.completion.finish_reason == "length" or entry in node.completion.text
            assert len(decisions) >= 2
            for node in decisions:
                assert 0.0 < node.metadata["p_eos"] < 1.0 and 0.0 < node.metadata["p_refine"] < 1.0
                assert node.metadata["decision"] in (EOS_TOKEN, REFINE_TOKEN)
            assert select.metadata["selected_attempt_id"] == attempt["best_node_id"]
        rows = rows_from_runs(store, [report["run_id"]], tasks, 1)
    assert len(rows) >= 6 and {row["chosen"] for row in rows} <= {EOS_TOKEN, REFINE_TOKEN}


@pytest.mark.slow
@pytest.mark.model
def test_run_revise_train_with_the_embedded_model(
    tmp_path: Path, scratch_model_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = f"sqlite:///{tmp_path / 'revise-train.db'}"
    code = main(
        [
            "--home",
            str(scratch_model_home),
            "--database",
            database,
            "run",
            "revise",
            "--suite",
            "humaneval-train",
            "--task",
            "HumanEval/82",
            "--task",
            "HumanEval/85",
            "--samples",
            "2",
            "--refinements",
            "1",
            "--max-tokens",
            "64",
            "--train",
            "--stage-steps",
            "1",
            "1",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["total"] == 2
    ids = [line.rsplit("checkpoint:", 1)[1] for line in captured.err.splitlines() if line.startswith("stage")]
    settings = load_settings(paths={"home": scratch_model_home}, store={"url": database})
    with TrajectoryStore.from_settings(settings) as store:
        stage1, stage2 = (store.get_model(model_id) for model_id in ids)
    assert stage2.base == stage1.path and Path(stage2.path, "config.json").exists()
