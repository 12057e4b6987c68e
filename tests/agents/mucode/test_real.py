"""μCode on the real parts: the embedded model, the bwrap sandbox and a SQLite store, three HumanEval tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.agents.runner import create_run, execute_run
from veriloop.config import Settings
from veriloop.records import ExecStatus
from veriloop.store import TrajectoryStore

ENTRY_POINTS = {"HumanEval/23": "strlen", "HumanEval/28": "concatenate", "HumanEval/2": "truncate_number"}
TASKS = list(ENTRY_POINTS)


@pytest.mark.slow
@pytest.mark.model
async def test_multi_turn_best_of_two_on_three_tasks(tmp_path: Path, model_settings: Settings) -> None:
    settings = model_settings.model_copy(
        update={"store": model_settings.store.model_copy(update={"url": f"sqlite:///{tmp_path / 'real.db'}"})}
    )
    options = {"turns": 2, "n": 2, "temperature": 0.3, "max_tokens": 96, "history": "latest"}
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="mucode", suite="humaneval-test", options=options, task_ids=TASKS)
        finished, attempts = await execute_run(settings, store, run.id)
        assert finished.status.value == "finished" and [a.task_id for a in attempts] == TASKS
        for attempt in attempts:
            nodes = store.get_tree(run.id, attempt.task_id)
            candidates = [node for node in nodes if node.role in ("generate", "refine")]
            [final] = [node for node in nodes if node.role == "final"]
            assert attempt.best_node_id == final.id and attempt.tokens > 0
            assert final.exec_result is not None and final.exec_result.status is not ExecStatus.INFRA_ERROR
            assert (attempt.status == "passed") == final.exec_result.passed
            turns = final.metadata["turn"]
            assert len(candidates) == 2 * turns  # two candidates a turn, every one stored with its public result
            assert all(node.exec_result is not None and node.completion is not None for node in candidates)
            entry = f"def {ENTRY_POINTS[attempt.task_id]}("
            for node in candidates:  # `structured` (on by default): one python block holding the task's function
                assert node.completion is not None and node.completion.text.startswith("```python\n")
                assert node.completion.finish_reason == "length" or entry in node.code, node.completion.text
            chosen = {node.id for node in candidates if node.metadata["selected"]}
            assert final.parent_id in chosen and len(chosen) == turns
            if turns == 2:
                second = [node for node in candidates if node.metadata["turn"] == 2]
                assert all(node.parent_id in chosen for node in second)
                assert "Feedback:" in second[0].messages[-1].content
