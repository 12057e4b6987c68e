"""The direct agent end to end with a scripted model, the real sandbox and a real SQLite store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from veriloop.agents import direct
from veriloop.agents.context import AgentContext
from veriloop.cli import main
from veriloop.config import load_settings
from veriloop.records import Run, RunStatus
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedBackend

CORRECT_ADD = "Sure!\n```python\ndef add(x: int, y: int):\n    return x + y\n```\nDone."


def test_program_from_reply_keeps_a_whole_function() -> None:
    task = load_suite("humaneval", load_settings()).select(ids=["HumanEval/53"]).tasks[0]
    assert direct.program_from_reply(task, CORRECT_ADD) == "def add(x: int, y: int):\n    return x + y"


def test_program_from_reply_prepends_the_prompt_to_a_bare_body() -> None:
    task = load_suite("humaneval", load_settings()).select(ids=["HumanEval/53"]).tasks[0]
    code = direct.program_from_reply(task, "```python\n    return x + y\n```")
    assert code.startswith(task.prompt) and code.endswith("return x + y")


@pytest.mark.bwrap
async def test_solve_stores_node_and_attempt(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    suite = load_suite("humaneval", settings).select(ids=["HumanEval/53", "HumanEval/0"])
    store = TrajectoryStore.from_settings(settings)
    sandbox = get_sandbox(settings)
    run = store.create_run(Run(agent="direct", suite="humaneval", model="scripted", status=RunStatus.RUNNING))
    store.upsert_tasks(suite.tasks)
    ctx = AgentContext(settings, ScriptedBackend([CORRECT_ADD]), sandbox, store, run)
    try:
        passed = await direct.solve(suite.tasks[0], ctx)
        failed = await direct.solve(suite.tasks[1], ctx)  # the same reply does not define has_close_elements
    finally:
        await sandbox.aclose()
    assert passed.status == "passed" and passed.score == 1.0
    assert failed.status == "failed"
    [node] = store.get_tree(run.id, "HumanEval/53")
    assert node.exec_result is not None and node.exec_result.passed
    assert node.completion is not None and node.completion.text == CORRECT_ADD.split(direct.CLOSING_FENCE)[0]
    assert node.messages[0].content.startswith("Complete the following Python function.")
    store.close()


@pytest.mark.slow
def test_demo_cli_with_scripted_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--home", str(tmp_path), "--backend", "scripted", "demo", "--limit", "2", "--no-treefinement", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["total"] == 2 and report["passed"] == 0 and report["treefinement"] is None
    assert [a["task_id"] for a in report["attempts"]] == ["HumanEval/0", "HumanEval/1"]
    assert main(["--home", str(tmp_path), "runs", "show", report["run_id"]]) == 0


@pytest.mark.slow
@pytest.mark.model
def test_demo_with_the_embedded_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], model_home: Path) -> None:
    """The real main job: the embedded model, the default sandbox, Dafny, SQLite; stored and shown by run id."""
    code = main(["--home", str(model_home), "--database", f"sqlite:///{tmp_path / 'demo.db'}", "demo", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["total"] == 5
    assert all(attempt["tokens"] > 0 for attempt in report["attempts"])
    tree = report["treefinement"]
    if shutil.which("dafny") is not None:  # CI installs Dafny; the step is skipped with a note without it
        assert tree["programs"] == 2 and tree["width"] == 4 and tree["depth"] == 2
        assert tree["llm_calls"] > 0 and tree["nodes"] > 0 and tree["verifier_calls"] > 0
    assert (
        main(
            [
                "--home",
                str(model_home),
                "--database",
                f"sqlite:///{tmp_path / 'demo.db'}",
                "runs",
                "show",
                report["run_id"],
                "--json",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert json.dumps(shown).count("HumanEval/") >= 5
