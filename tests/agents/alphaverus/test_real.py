"""AlphaVerus with the real parts: the embedded model, the real Dafny, a real store, through the run executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.agents.runner import create_run, execute_run
from veriloop.config import Settings, load_settings
from veriloop.records import RunStatus, VerifyStatus
from veriloop.search.tree import load_tree
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite

pytestmark = [
    pytest.mark.slow,
    pytest.mark.model,
    pytest.mark.dafny,
]


async def test_one_round_on_two_dafnybench_programs(model_home: Path, tmp_path: Path) -> None:
    settings: Settings = load_settings(
        paths={"home": model_home, "data_dir": None},
        llm={"backend": "embedded", "torch_threads": 1},
        store={"url": f"sqlite:///{tmp_path / 'veriloop.db'}"},
    )
    suite = load_suite("dafnybench-hints", settings)
    chosen = [task.id for task in sorted(suite.tasks, key=lambda task: len(task.prompt))[:2]]
    options = {
        "iterations": 1,
        "explore_samples": 2,
        "width": 2,
        "depth": 1,
        "exploit_samples": 1,
        "judge_votes": 1,
        "max_tokens": 192,
    }
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store, settings, agent="alphaverus", suite="dafnybench-hints", options=options, task_ids=chosen
        )
        finished, attempts = await execute_run(settings, store, run.id)
        assert finished.status is RunStatus.FINISHED and [a.task_id for a in attempts] == chosen
        for attempt in attempts:
            assert attempt.status in ("passed", "failed") and attempt.budget["llm_calls"] >= 2 and attempt.tokens > 0
            nodes = store.get_tree(run.id, attempt.task_id)
            explored = [node for node in nodes if node.metadata.get("phase") == "explore"]
            assert len(explored) == 2
            ran_dafny = 0
            for node in explored:
                result = node.verify_result
                assert result is not None and result.tool == "dafny" and node.completion is not None
                assert node.completion.model and result.status is not VerifyStatus.INFRA_ERROR
                if result.status is VerifyStatus.REJECTED:  # the original's rule filters: no tool run, reason given
                    assert node.score == -1.0 and node.metadata["feedback"].startswith("dafny: rejected")
                else:
                    assert result.version.startswith("2.")
                    ran_dafny += 1
            assert attempt.budget["verifier_calls"] >= ran_dafny
            graph = load_tree(store, run.id, attempt.task_id)
            assert graph.number_of_nodes() == len(nodes)
