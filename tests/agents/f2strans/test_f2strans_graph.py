"""The F2STrans graph with scripted models, the real sandbox and a real SQLite store; one real-model run."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from veriloop.agents.base import make_agent
from veriloop.agents.checkpoint import open_checkpointer, thread_id
from veriloop.agents.f2strans import F2STransAgent, F2STransOptions
from veriloop.agents.f2strans.data import functional_rows, nodes_of_runs, style_rows, summarize
from veriloop.agents.f2strans.graph import sampling
from veriloop.agents.f2strans.prompts import kept_name
from veriloop.agents.runner import create_run, execute_run
from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.llm.codeblocks import fenced_block
from veriloop.records import Attempt, ExecStatus, Prompt, Task
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend, prompt_text, tiny_model_folder

ADD_ONE = "transcoder/ADD_1_TO_A_GIVEN_NUMBER_1"
WRONG = "Here it is:\n```python\ndef addOne(x):\n    return x\n```\n"
RIGHT = "```python\ndef add_one(x):\n    return -(~x)\n```\n"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path, "data_dir": load_settings().paths.data_dir})


def _run(settings: Settings, backend: Any, options: dict[str, Any], ids: list[str]) -> tuple[str, list[Attempt]]:
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="f2strans", suite="transcoder", options=options, task_ids=ids)
        _, attempts = asyncio.run(execute_run(settings, store, run.id, backend=backend))
    return run.id, attempts


def test_options_check_the_direction() -> None:
    assert make_agent("f2strans", {"source": "java", "target": "cpp"}).options.target == "cpp"
    with pytest.raises(ConfigError, match="must differ"):
        F2STransOptions(source="python", target="python")
    with pytest.raises(ConfigError, match="unknown language 'cobol'"):
        make_agent("f2strans", {"source": "cobol"})


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_failed_translation_is_repaired_with_test_feedback(settings: Settings) -> None:
    backend = ScriptedBackend([WRONG, RIGHT])
    run_id, [attempt] = _run(settings, backend, {"turns": 3}, [ADD_ONE])
    assert attempt.status == "passed" and attempt.score == 1.0 and attempt.tokens > 0
    first_prompt, second_prompt = (prompt for prompt, _ in backend.requests)
    assert "Translate the following C++ function to idiomatic Python" in prompt_text(first_prompt)
    assert "int addOne ( int x )" in prompt_text(first_prompt)
    assert "0 of 10 test cases gave the expected result" in prompt_text(second_prompt)
    assert isinstance(second_prompt, list) and [m.role for m in second_prompt] == ["user", "assistant", "user"]
    with TrajectoryStore.from_settings(settings) as store:
        first, second = sorted(store.get_tree(run_id, ADD_ONE), key=lambda node: node.depth)
        assert (first.role, second.role) == ("translate", "repair") and second.parent_id == first.id
        assert first.exec_result is not None and first.exec_result.status is ExecStatus.FAILED and first.score == 0
        assert second.exec_result is not None and second.exec_result.passed and attempt.best_node_id == second.id
        for node in (first, second):
            style = node.metadata["style"]
            assert 0.0 <= style["score"] <= 1.0 and style["linter"] == "ruff" and style["syntax"] is not None
            assert node.metadata["source_language"] == "cpp" and node.metadata["target_language"] == "python"
        [exemplar] = store.list_exemplars(kind="translation", run_id=run_id)
        assert exemplar.payload["target"] == second.code and exemplar.payload["source_language"] == "cpp"
        summary = summarize(store, [attempt])
    assert summary["computational_accuracy"] == 1.0 and summary["style"] == second.metadata["style"]["score"]


def test_structured_asks_for_one_block_with_the_kept_function() -> None:
    task = Task(id="t/1", suite="t", prompt="int addOne(int x) { return x + 1; }", entry_point="f_filled")
    for turn, samples in ((0, 1), (0, 3), (1, 3)):
        options = F2STransOptions(samples=samples)
        params = sampling(options, turn, task, "addOne")
        assert params.constraint == fenced_block("python", "def addOne(")  # the prompt's name, not the slot's
        assert sampling(options.model_copy(update={"structured": False}), turn, task, "addOne").constraint is None
    to_cpp = F2STransOptions(source="python", target="cpp")
    assert sampling(to_cpp, 0, task, "add_one").constraint == fenced_block("cpp")  # no signature outside Python
    assert kept_name("") == "f_gold" and kept_name("addOne") == "addOne"


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
@pytest.mark.parametrize("structured", [True, False])
def test_every_turn_carries_the_constraint_or_none(settings: Settings, structured: bool) -> None:
    backend = ScriptedBackend([WRONG])
    options = {"turns": 2, "structured": structured, "checkpoint": False, "linter": False}
    _, [attempt] = _run(settings, backend, options, [ADD_ONE])
    assert attempt.status == "failed" and len(backend.requests) == 2  # translate, then one repair
    expected = fenced_block("python", "def addOne(") if structured else None
    assert [params.constraint for _, params in backend.requests] == [expected, expected]


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_turns_bound_the_repairs_and_the_graph_is_checkpointed(settings: Settings) -> None:
    backend = ScriptedBackend([WRONG])
    run_id, [attempt] = _run(settings, backend, {"turns": 2, "source": "java"}, [ADD_ONE])
    assert attempt.status == "failed" and len(backend.requests) == 2
    assert "static int addOne" in prompt_text(backend.requests[0][0])

    async def saved() -> Any:
        async with open_checkpointer(settings) as saver:
            config: Any = {"configurable": {"thread_id": thread_id(run_id, ADD_ONE, "f2strans")}}
            return await saver.aget_tuple(config)

    checkpoint = asyncio.run(saved())
    assert checkpoint is not None and checkpoint.checkpoint["channel_values"]["turn"] == 2


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_samples_are_stored_as_siblings_and_feed_both_training_sets(settings: Settings) -> None:
    other = "transcoder/ADD_1_TO_A_GIVEN_NUMBER"

    def reply(prompt: Prompt) -> str:
        return RIGHT if "return ( - ( ~ x ) )" in prompt_text(prompt) else WRONG

    backend = ScriptedBackend([reply])
    run_id, attempts = _run(settings, backend, {"turns": 1, "samples": 3, "checkpoint": False}, [ADD_ONE, other])
    assert {a.task_id: a.status for a in attempts} == {ADD_ONE: "passed", other: "failed"}
    assert backend.requests[0][1].n == 3 and backend.requests[0][1].temperature == 0.8
    with TrajectoryStore.from_settings(settings) as store:
        roots = store.get_tree(run_id, ADD_ONE)
        assert len(roots) == 3 and all(node.parent_id is None and node.depth == 0 for node in roots)
        nodes = nodes_of_runs(store, [run_id])
        tasks = [store.get_task(ADD_ONE), store.get_task(other)]
    sft = functional_rows(tasks, "cpp", "python", nodes)
    assert [row["origin"] for row in sft].count("reference") == 2
    assert [row["origin"] for row in sft].count("model") == 1  # three equal passing samples, one row
    pairs = style_rows(tasks, "cpp", "python", nodes)
    by_task = {row["task_id"]: row for row in pairs}
    assert by_task[other]["pair_source"] == "function"  # the reference beats the failing samples
    assert (
        by_task[other]["chosen_node_id"] is None and by_task[other]["chosen_score"] > by_task[other]["rejected_score"]
    )
    assert by_task[ADD_ONE]["pair_source"] == "style"  # both pass: the better-styled one is preferred
    assert by_task[ADD_ONE]["chosen_score"] > by_task[ADD_ONE]["rejected_score"] + 0.05
    assert by_task[other]["chosen"][0]["content"].startswith("```python\ndef ")
    assert by_task[other]["rejected"][0]["content"].endswith("return x\n```")


@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_tasks_without_the_direction_are_errors_not_crashes(settings: Settings) -> None:
    from veriloop.tasks import load_suite

    suite = load_suite("transcoder", settings)
    missing = next(task for task in suite.tasks if "python" not in task.metadata["tests"])
    _, [attempt] = _run(settings, ScriptedBackend([RIGHT]), {"checkpoint": False}, [missing.id])
    assert attempt.status == "error" and "no python test program" in (attempt.error or "")


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_cli_reports_accuracy_and_style(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(settings.paths.home)
    code = main(
        [
            "--home",
            home,
            "--backend",
            "scripted",
            "run",
            "f2strans",
            "--from",
            "cpp",
            "--to",
            "python",
            "--limit",
            "2",
            "--turns",
            "1",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["direction"] == "cpp->python" and report["n"] == 2
    assert report["computational_accuracy"] == 0.0 and 0.0 <= report["style"] <= 1.0
    assert all(attempt["style"] is not None for attempt in report["attempts"])
    assert main(["--home", home, "run", "f2strans", "--from", "cpp", "--to", "cpp"]) != 0
    assert "must differ" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_cli_train_runs_a_functional_and_style_round(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tiny_model_folder(tmp_path / "tiny")
    home = str(settings.paths.home)
    code = main(
        [
            "--home",
            home,
            "--model",
            str(folder),
            "run",
            "f2strans",
            "--from",
            "cpp",
            "--to",
            "python",
            "--limit",
            "2",
            "--turns",
            "1",
            "--samples",
            "2",
            "--temperature",
            "0.8",
            "--max-tokens",
            "24",
            "--train",
            "--sft-steps",
            "1",
            "--dpo-steps",
            "1",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["n"] == 2
    # the references are SFT rows; the tiny model's failing samples lose to them in the style pairs
    [counts] = re.findall(r"training: (\d+) functional rows, (\d+) style pairs", captured.err)
    assert int(counts[0]) == 2 and 2 <= int(counts[1]) <= 4  # at least one pair per function
    ids = [line.split("checkpoint:", 1)[1] for line in captured.err.splitlines() if line.startswith(("sft:", "dpo:"))]
    with TrajectoryStore.from_settings(settings) as store:
        sft, dpo = (store.get_model(model_id) for model_id in ids)
    assert (sft.method, dpo.method) == ("sft", "dpo") and dpo.base == f"checkpoint:{sft.id}"


def test_agent_class_is_registered() -> None:
    assert isinstance(make_agent("f2strans"), F2STransAgent)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_real_model_translates_three_functions(tmp_path: Path, model_settings: Settings) -> None:
    """The embedded model, the bwrap sandbox and SQLite on three functions, then one tiny training round."""
    data = load_settings().paths.data_dir
    assert data is not None
    from veriloop.agents.f2strans.training import RoundSpec, train_round

    settings = model_settings.model_copy(
        update={
            "paths": model_settings.paths.model_copy(update={"data_dir": data}),
            "store": model_settings.store.model_copy(update={"url": f"sqlite:///{tmp_path / 'f2s.db'}"}),
        }
    )
    ids = [
        "transcoder/ADD_1_TO_A_GIVEN_NUMBER_1",
        "transcoder/HEXAGONAL_NUMBER",
        "transcoder/CHECK_WHETHER_GIVEN_NUMBER_EVEN_ODD",
    ]
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store, settings, agent="f2strans", suite="transcoder", task_ids=ids, options={"turns": 2, "max_tokens": 160}
        )
        _, attempts = asyncio.run(execute_run(settings, store, run.id))
        assert [a.status in ("passed", "failed") for a in attempts] == [True, True, True]
        assert all(a.tokens > 0 for a in attempts)
        nodes = nodes_of_runs(store, [run.id])
        assert all(node.completion is not None and node.exec_result is not None for node in nodes)
        assert all(0.0 <= node.metadata["style"]["score"] <= 1.0 for node in nodes)
        for node in nodes:  # `structured` (on by default): one python block holding the source's function name
            assert node.completion is not None and node.completion.text.startswith("```python\n")
            name = kept_name(str(store.get_task(node.task_id).metadata["names"]["cpp"]))
            assert node.completion.finish_reason == "length" or f"def {name}(" in node.completion.text
        tasks = [store.get_task(task_id) for task_id in ids]
    sft = functional_rows(tasks, "cpp", "python", nodes)
    pairs = style_rows(tasks, "cpp", "python", nodes)
    assert len(sft) >= 3
    report = train_round(
        settings, sft, pairs, tmp_path / "round", RoundSpec(sft_steps=1, dpo_steps=1, batch_size=2, max_length=192)
    )
    assert report["model"].startswith("checkpoint:") and report["sft"]["steps"] == 1


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_an_interrupted_episode_resumes_from_its_checkpoint(settings: Settings) -> None:
    from veriloop.errors import BackendError

    calls = {"n": 0}

    def flaky(prompt: Prompt) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise BackendError("the server went away")
        return WRONG if calls["n"] == 1 else RIGHT

    backend = ScriptedBackend([flaky])
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(
            store, settings, agent="f2strans", suite="transcoder", options={"turns": 3}, task_ids=[ADD_ONE]
        )
        with pytest.raises(BackendError):
            asyncio.run(execute_run(settings, store, run.id, backend=backend))
        assert len(store.get_tree(run.id, ADD_ONE)) == 1
        _, [attempt] = asyncio.run(execute_run(settings, store, run.id, backend=backend))
        tree = store.get_tree(run.id, ADD_ONE)
    assert attempt.status == "passed" and calls["n"] == 3
    assert sorted(node.role for node in tree) == ["repair", "translate"]  # the first turn was not repeated
