"""`veriloop run alphaverus` and the demo's Treefinement step, with a scripted model and the real Dafny."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.agents.alphaverus.demo import SUITE, treefinement_demo
from veriloop.cli import main
from veriloop.config import load_settings
from veriloop.records import VerifyStatus
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.store.figures import full_summary
from veriloop.testing import ScriptedBackend


def test_bad_search_and_missing_suite_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "run", "alphaverus", "--target", "dafny", "--search", "dfs"]) != 0
    assert "error: bad options for agent 'alphaverus': search: Input should be 'treefinement'" in (
        capsys.readouterr().err
    )  # the options model refuses it; the CLI does not re-check choices
    assert main(["--home", str(tmp_path), "run", "alphaverus"]) != 0
    assert "error: pass --suite" in capsys.readouterr().err


@pytest.mark.dafny
@pytest.mark.slow
def test_run_alphaverus_cli_with_a_scripted_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VERILOOP_PATHS__DATA_DIR", raising=False)  # the bundled subset: no first-load scan
    code = main(
        [
            "--home",
            str(tmp_path),
            "--backend",
            "scripted",
            "run",
            "alphaverus",
            "--target",
            "dafny",
            "--limit",
            "1",
            "--explore",
            "2",
            "--width",
            "2",
            "--depth",
            "1",
            "--exploit-samples",
            "1",
            "--judge-votes",
            "1",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["agent"] == "alphaverus" and report["suite"] == "dafnybench-hints"
    [attempt] = report["attempts"]
    # the scripted model echoes the prompt, whose code block is the hints-removed program: partial, never solved
    assert attempt["status"] == "failed" and 0 <= attempt["score"] < 1
    assert attempt["budget"]["llm_calls"] == 4  # 2 explored + a width-2, depth-1 tree


@pytest.mark.slow
@pytest.mark.dafny
async def test_demo_treefinement_summary(tmp_path: Path) -> None:
    settings = load_settings(
        paths={"home": tmp_path, "data_dir": None}, llm={"backend": "scripted", "model": "scripted"}
    )
    sandbox = get_sandbox(settings)
    with TrajectoryStore.from_settings(settings) as store:
        summary = await treefinement_demo(settings, store, ScriptedBackend(), sandbox, programs=1, width=2, depth=1)
        shown = full_summary(store, summary["run_id"])
    await sandbox.aclose()
    # the demo's run records its provenance as a runner-made run does: `runs show` never says "not recorded"
    found = shown.provenance
    assert found is not None and shown.provenance_note is None
    assert (found.suite.name, found.suite.tasks, found.suite.version) == (SUITE, 1, summary["suite_version"])
    assert found.suite.content_hash.startswith("sha256:") and (found.model, found.backend) == ("scripted", "scripted")
    assert found.options["width"] == 2 and found.options["depth"] == 1 and found.options["target"] == "dafny"
    assert list(found.prompt_hashes) == ["veriloop.agents.alphaverus.prompts"] and "dafny" in found.verifiers
    assert shown.run.settings["demo"] is True and shown.run.settings["options"] == found.options
    assert summary["programs"] == 1 and summary["solved"] == 0 and summary["nodes"] == 2
    assert summary["llm_calls"] == 2 and summary["width"] == 2 and "dafny==" in summary["suite_version"]
    assert sum(summary["verdicts"].values()) == 2  # one Dafny (or rule) verdict per node, counted by status
    assert set(summary["verdicts"]) <= {status.value for status in VerifyStatus}
