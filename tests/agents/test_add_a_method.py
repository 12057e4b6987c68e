"""CONTRIBUTING's "Add a method", in the files it states: a method written in one module of the test folder
(`toy_method.py`) plus its one registry line runs through the runner, and `veriloop run toy` exists with flags
generated from its options; no file of the package changes."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

import veriloop
from veriloop.agents import base
from veriloop.agents.runner import create_run, execute_run
from veriloop.cli import main
from veriloop.cli.app import app
from veriloop.config import Settings, load_settings
from veriloop.records import STEP_KEY, RunStatus
from veriloop.registry import Registry
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend

TOY = Path(__file__).with_name("toy_method.py")
WRONG_ADD = "```python\ndef add(x: int, y: int):\n    return x - y\n```"
RIGHT_ADD = "```python\ndef add(x: int, y: int):\n    return x + y\n```"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The toy module imported from the test folder, and registered: the recipe's one registry line."""
    assert not TOY.resolve().is_relative_to(Path(veriloop.__file__).resolve().parent)
    spec = importlib.util.spec_from_file_location("veriloop_toy_method", TOY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(base, "AGENTS", Registry("agent", dict(base.AGENTS)))  # undone after the test
    base.AGENTS.register("toy", f"{spec.name}:ToyAgent")
    return module


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path})


def test_a_registered_method_gets_its_run_flags_from_its_options(toy: ModuleType) -> None:
    env = {"COLUMNS": "250", "TERM": "dumb"}
    listing = CliRunner().invoke(app, ["run", "--help"], env=env)
    assert listing.exit_code == 0 and "toy" in listing.output and "Draw a few replies" in listing.output
    shown = CliRunner().invoke(app, ["run", "toy", "--help"], env=env)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", shown.output))
    assert {"--samples", "--pick", "--concurrency", "--suite", "--limit", "--task", "--executor", "--json"} <= flags
    assert "Replies drawn per task." in text and "1<=x<=4" in text and "[first|best]" in text


def test_a_registered_method_refuses_bad_flags_with_its_model_message(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(tmp_path), "run", "toy", "--pick", "worst"]) != 0
    assert "bad options for agent 'toy': pick: Input should be 'first' or 'best'" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "run", "toy", "--samples", "5"]) != 0
    assert "Invalid value for '--samples'" in capsys.readouterr().err


@pytest.mark.bwrap
async def test_a_registered_method_runs_through_the_runner(toy: ModuleType, settings: Settings) -> None:
    sandbox = get_sandbox(settings)
    try:
        with TrajectoryStore.from_settings(settings) as store:
            for pick, status in (("best", "passed"), ("first", "failed")):
                run = create_run(
                    store, settings, agent="toy", suite="humaneval", options={"pick": pick}, task_ids=["HumanEval/53"]
                )
                backend = ScriptedBackend([WRONG_ADD, RIGHT_ADD])
                finished, [attempt] = await execute_run(settings, store, run.id, backend=backend, sandbox=sandbox)
                assert finished.status is RunStatus.FINISHED and attempt.status == status
                assert finished.settings["options"] == {"concurrency": 8, "samples": 2, "pick": pick}
                nodes = store.get_tree(run.id, "HumanEval/53")
                scores = sorted(node.score or 0.0 for node in nodes)
                assert len(scores) == 2 and scores[0] < 1.0 == scores[1]  # share of tests passed
                assert all(node.metadata[STEP_KEY] == 0 for node in nodes)
    finally:
        await sandbox.aclose()


@pytest.mark.bwrap
def test_a_registered_method_runs_from_the_cli(
    toy: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--home", str(tmp_path), "--backend", "scripted", "run", "toy", "--task", "HumanEval/53", "--samples", "1"]
    assert main([*args, "--json"]) == 0  # the echo backend's reply fails the tests: the run still finishes
    report = json.loads(capsys.readouterr().out)
    assert report["agent"] == "toy" and report["status"] == "finished" and report["total"] == 1
