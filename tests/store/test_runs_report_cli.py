"""`veriloop runs show | compare | report | rerun` on runs made by the real runner, store and sandbox.

The model is scripted (it solves HumanEval/53 and echoes the prompt elsewhere); the embedded model's
run is `test_real_mucode_run_reports_pass_at_k_and_provenance` (slow).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from veriloop.agents.runner import create_run, execute_run
from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.records import Attempt, ExecResult, ExecStatus, Node, Prompt, Run
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend

SOLVES_53 = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
TASKS = ["HumanEval/53", "HumanEval/0"]


def cli(capsys: pytest.CaptureFixture[str], settings: Settings, *args: str) -> tuple[int, str, str]:
    code = main(["--database", str(settings.store.url), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def reply(prompt: Prompt) -> str:
    text = " ".join(message.content for message in prompt) if isinstance(prompt, list) else str(prompt)
    return SOLVES_53 if "def add(" in text else "no code here"


async def scripted_run(settings: Settings, agent: str, options: dict[str, Any]) -> str:
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent=agent, suite="humaneval", options=options, task_ids=TASKS)
        await execute_run(settings, store, run.id, backend=ScriptedBackend([reply]))
    return run.id


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("VERILOOP_PATHS__HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VERILOOP_LLM__BACKEND", "scripted")
    monkeypatch.setenv("VERILOOP_LLM__MODEL", "scripted")
    return load_settings(store={"url": f"sqlite:///{tmp_path / 'runs.db'}"})


@pytest.mark.slow
@pytest.mark.bwrap
def test_show_compare_report_and_rerun(capsys: pytest.CaptureFixture[str], settings: Settings, tmp_path: Path) -> None:
    mucode = asyncio.run(scripted_run(settings, "mucode", {"n": 3, "turns": 1, "seed": 7}))
    direct = asyncio.run(scripted_run(settings, "direct", {}))  # the CLI runs its own event loop: no test loop

    code, out, _ = cli(capsys, settings, "runs", "show", mucode, "--json")
    assert code == 0
    summary = json.loads(out)
    held, public = summary["figures"]["held_out"], summary["figures"]["public"]
    assert summary["figures"]["headline"] == "held_out" and held["label"] == "held-out tests"
    assert (held["tasks"], held["tasks_passed"]) == (2, 1) and public["label"] == "public tests"
    assert public["samples_per_task"] == 3 and [row["k"] for row in public["pass_at_k"]] == [1, 2, 3]
    assert all(row["low"] <= row["value"] <= row["high"] for row in public["pass_at_k"])
    provenance = summary["provenance"]
    assert provenance["suite"]["name"] == "humaneval" and provenance["suite"]["tasks"] == 2
    assert provenance["suite"]["content_hash"].startswith("sha256:") and provenance["seeds"] == {"seed": 7}
    assert provenance["options"]["samples"] == 3 and provenance["model"] == "scripted"
    assert list(provenance["prompt_hashes"]) == ["veriloop.agents.mucode.prompts"]
    assert provenance["sandbox"]["backend"] == "bwrap" and provenance["sandbox"]["version"]
    assert provenance["veriloop_version"] and "api_key" not in json.dumps(provenance["settings"])

    code, out, _ = cli(capsys, settings, "runs", "show", mucode[:8])
    assert code == 0
    assert "pass rate, held-out tests" in out and "pass rate, public tests" in out and "pass@3" in out
    assert "95% Wilson CI" in out and "1/2 tasks" in out and "humaneval" in out and "bwrap" in out

    code, out, _ = cli(capsys, settings, "runs", "compare", mucode, direct, "--json")
    compared = json.loads(out)
    assert code == 0 and compared["shared_tasks"] == 2 and compared["label"] == "held-out tests"
    assert (compared["wins"], compared["losses"], compared["both"], compared["neither"]) == (0, 0, 1, 1)
    assert compared["difference"] == 0.0 and compared["mcnemar_p"] == 1.0
    code, out, _ = cli(capsys, settings, "runs", "compare", mucode, direct)
    assert code == 0 and "McNemar exact p" in out and "A wins / B wins" in out and "+0.0 points" in out
    assert "95% paired bootstrap CI" in out

    code, out, _ = cli(capsys, settings, "runs", "report", mucode, "--format", "md")
    assert code == 0 and out.lstrip().startswith(f"# Run `{mucode}`")
    assert "| **Pass rate, held-out tests (headline)** | 50% (1/2 tasks) |" in out
    assert "## pass@k · public tests" in out and "| pass@3 |" in out and "## Provenance" in out
    svgs = re.findall(r"^<svg .*</svg>$", out, flags=re.M)
    assert len(svgs) >= 4  # pass@k and per turn for each check, the score histogram (one line each)
    report = tmp_path / "report.html"
    code, _, err = cli(capsys, settings, "runs", "report", mucode, "--format", "html", "--out", str(report))
    html = report.read_text()
    assert code == 0 and f"wrote {report}" in err
    assert html.startswith("<!doctype html>") and "<script" not in html and 'id="chart-passk-public"' in html
    assert "Pass rate · held-out tests (headline)" in html and 'id="provenance"' in html

    code, out, err = cli(capsys, settings, "runs", "rerun", mucode[:8], "--json")
    assert code == 0, err
    again = json.loads(out)
    assert f"rerun of {mucode}" in err and again["run_id"] != mucode and again["total"] == 2
    with TrajectoryStore.from_settings(settings) as store:
        old, new = store.get_run(mucode), store.get_run(again["run_id"])
    assert (new.agent, new.suite, new.model) == (old.agent, old.suite, old.model)
    assert new.settings["options"] == old.settings["options"] and new.settings["task_ids"] == TASKS
    assert new.settings["rerun_of"] == mucode
    assert new.settings["provenance"]["suite"] == old.settings["provenance"]["suite"]


def stored_outcomes(settings: Settings, passed: bool, tasks: int = 5) -> str:
    """A run stored straight into the store (no runner, so no provenance): one verdict a task, all alike."""
    with TrajectoryStore.from_settings(settings) as store:
        run = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
        result = ExecResult(status=ExecStatus.PASSED if passed else ExecStatus.FAILED)
        nodes = [Node(run_id=run.id, task_id=f"t{i}", exec_result=result) for i in range(tasks)]
        store.add_nodes(nodes)
        for node in nodes:
            status = "passed" if passed else "failed"
            store.add_attempt(Attempt(run_id=run.id, task_id=node.task_id, status=status, best_node_id=node.id))
        store.finish_run(run.id)
    return run.id


def test_show_prints_a_named_interval_that_does_not_collapse_at_none_or_all_passed(
    capsys: pytest.CaptureFixture[str], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one figure a line
    failed, passed = stored_outcomes(settings, False), stored_outcomes(settings, True)
    code, out, _ = cli(capsys, settings, "runs", "show", failed)
    assert code == 0 and "0.0% [95% Wilson CI 0.0%, 43.4%], 0/5 tasks" in out and "0.0%, 0.0%" not in out
    assert "pass@1 0.0% [95% Wilson CI 0.0%, 43.4%]" in out
    assert "not recorded for this run" in out and "before provenance" not in out
    code, out, _ = cli(capsys, settings, "runs", "show", passed, "--json")
    held = json.loads(out)["figures"]["held_out"]
    assert code == 0 and held["interval"] == "wilson" and held["high"] == 1.0
    assert held["low"] == pytest.approx(0.5655, abs=1e-4) and held["pass_at_k"][0]["interval"] == "wilson"
    assert json.loads(out)["provenance_note"] == "not recorded for this run"
    code, out, _ = cli(capsys, settings, "runs", "compare", failed, passed)
    assert code == 0 and "-100.0 points [95% paired bootstrap CI -100.0, -100.0]" in out  # every task a loss
    assert "McNemar exact p" in out


def test_report_and_compare_errors_are_one_line(capsys: pytest.CaptureFixture[str], settings: Settings) -> None:
    code, out, err = cli(capsys, settings, "runs", "compare", "nope-a", "nope-b")
    assert code != 0 and out == "" and err.startswith("error: ") and "Traceback" not in err
    code, out, err = cli(capsys, settings, "runs", "report", "nope", "--format", "pdf")
    assert code != 0 and "Traceback" not in err
    code, out, err = cli(capsys, settings, "runs", "rerun", "nope")
    assert code != 0 and err.startswith("error: ")


@pytest.mark.slow
@pytest.mark.model
def test_real_mucode_run_reports_pass_at_k_and_provenance(
    capsys: pytest.CaptureFixture[str], model_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded model, two samples a turn, one turn, two tasks; then the same run again with `runs rerun`."""
    monkeypatch.setenv("VERILOOP_PATHS__HOME", str(model_settings.paths.home))
    monkeypatch.setenv("VERILOOP_LLM__BACKEND", "embedded")
    settings = model_settings.model_copy(
        update={"store": model_settings.store.model_copy(update={"url": f"sqlite:///{tmp_path / 'real.db'}"})}
    )
    options = {"n": 2, "turns": 1, "temperature": 0.8, "max_tokens": 48, "history": "latest", "seed": 3}
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="mucode", suite="humaneval", options=options, task_ids=TASKS)
        finished, attempts = asyncio.run(execute_run(settings, store, run.id))
    assert finished.status.value == "finished" and len(attempts) == 2

    code, out, _ = cli(capsys, settings, "runs", "show", run.id, "--json")
    summary = json.loads(out)
    held, public = summary["figures"]["held_out"], summary["figures"]["public"]
    passed = sum(attempt.status == "passed" for attempt in attempts)
    assert code == 0 and (held["tasks"], held["tasks_passed"]) == (2, passed)  # whatever the model got, honestly
    assert public["samples_per_task"] == 2 and [row["k"] for row in public["pass_at_k"]] == [1, 2]
    provenance = summary["provenance"]
    assert provenance["model"] == "smollm2-135m-instruct" and provenance["backend"] == "embedded"
    assert provenance["checkpoint_hash"].startswith("sha256:") and provenance["seeds"] == {"seed": 3}

    code, out, _ = cli(capsys, settings, "runs", "report", run.id, "--format", "md")
    assert code == 0 and "## pass@k · public tests" in out and "| pass@2 |" in out
    assert provenance["checkpoint_hash"] in out

    code, out, err = cli(capsys, settings, "runs", "rerun", run.id, "--json")
    assert code == 0, err
    again = json.loads(out)
    with TrajectoryStore.from_settings(settings) as store:
        new = store.get_run(again["run_id"])
    assert again["status"] == "finished" and again["total"] == 2 and "differs" not in err
    assert new.settings["options"] == run.settings["options"]
    assert new.settings["provenance"]["checkpoint_hash"] == provenance["checkpoint_hash"]
