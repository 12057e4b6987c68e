"""`veriloop bench revise --shapes-only`'s measurement with a scripted scoring model and the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.bench import revise
from veriloop.config import load_settings
from veriloop.records import Prompt
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedScoringBackend


def prose_then_code(prompt: Prompt) -> str:
    """A first attempt in prose, a refinement as code that does not parse."""
    assert isinstance(prompt, str)
    return "```python\ndef add(x, y):\n    return (\n```" if prompt.endswith("[refine]") else "It adds x and y."


@pytest.mark.bwrap
def test_shapes_report_counts_both_runs(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted"})
    tasks = load_suite("humaneval", settings).select(ids=["HumanEval/53"]).tasks
    backend = ScriptedScoringBackend([prose_then_code])  # equal scores: [eos] wins ties, so nothing is refined
    options = {"samples": 2, "max_refinements": 1, "checkpoint": False}
    with TrajectoryStore.from_settings(settings) as store:
        report = revise.shapes_report(settings, store, backend, tasks, options)
        assert report["tasks"] == 1
        for label in ("structured", "unstructured"):
            side = report[label]
            assert side["replies"] == 2 and side["without_code_block"] == 1.0 and side["without_function"] == 1.0
            assert side["pass_at_1"]["confidence_aware"] == 0.0 and side["refined_share"] == 0.0
            assert store.get_run(side["run"]).settings["options"]["structured"] is (label == "structured")
    assert [params.constraint is not None for _, params in backend.requests] == [True, False]


def test_committed_reply_shapes_are_shares_of_both_runs() -> None:
    path = Path(__file__).resolve().parents[3] / "bench" / "results" / "revise.json"
    shapes = json.loads(path.read_text())["reply_shapes"]
    assert shapes["tasks"] >= 10 and "--shapes-only" in shapes["command"]
    for label in ("structured", "unstructured"):
        side = shapes[label]
        assert side["replies"] >= shapes["tasks"]
        for key in ("without_code_block", "several_blocks", "unparseable", "without_function"):
            assert 0.0 <= side[key] <= 1.0


def test_before_and_after_are_compared_task_by_task() -> None:
    ids = [f"t{i}" for i in range(6)]
    before = {"solved_tasks": ["t0", "t1", "t2"]}
    after = {"solved_tasks": ["t0", "t3", "t4", "t5"]}
    result = revise.paired(before, after, ids)
    assert result["difference"] == pytest.approx(1 / 6, abs=1e-4)
    assert (result["wins"], result["losses"]) == (3, 2)
    assert result["mcnemar_p"] == 1.0  # 3 against 2 discordant tasks: no evidence either way
    low, high = result["paired_bootstrap_95"]
    assert low < 0 < result["difference"] < high


def test_a_stored_run_stands_in_only_for_the_same_model_tasks_and_options(tmp_path: Path) -> None:
    """`--train-run`/`--before-run` reuse stored M0 runs; a run of other tasks, options or model, or one that did
    not finish, is refused with every difference named, so a bench never mixes two configurations."""
    from veriloop.agents.runner import create_run
    from veriloop.errors import ConfigError
    from veriloop.records import RunStatus

    settings = load_settings(paths={"home": tmp_path}, llm={"backend": "scripted", "model": "m0"})
    options = {"samples": 2, "temperature": 0.7, "max_tokens": 64, "max_refinements": 1, "seed": 0}
    ids = ["HumanEval/0", "HumanEval/5"]
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="revise", suite="humaneval", options=options, task_ids=ids)
        with pytest.raises(ConfigError, match="status 'pending', not 'finished'"):
            revise.stored_run(store, run.id, "m0", ids, options)
        store.finish_run(run.id)
        assert revise.stored_run(store, run.id, "m0", ids, options).id == run.id
        with pytest.raises(ConfigError, match="model 'm0', not 'm1'"):
            revise.stored_run(store, run.id, "m1", ids, options)
        with pytest.raises(ConfigError, match="task ids"):
            revise.stored_run(store, run.id, "m0", ids[:1], options)
        with pytest.raises(ConfigError, match="options"):
            revise.stored_run(store, run.id, "m0", ids, {**options, "samples": 4})
        failed = create_run(store, settings, agent="revise", suite="humaneval", options=options, task_ids=ids)
        store.finish_run(failed.id, RunStatus.FAILED)
        with pytest.raises(ConfigError, match="status 'failed'"):
            revise.stored_run(store, failed.id, "m0", ids, options)
