"""`veriloop bench alphaverus` end to end with a scripted model (the real run is committed under bench/results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.bench import alphaverus
from veriloop.config import load_settings
from veriloop.errors import ConfigError
from veriloop.search import SEARCHES
from veriloop.store import TrajectoryStore
from veriloop.store.summary import provenance_of


@pytest.mark.slow
@pytest.mark.dafny
def test_bench_reports_every_search_of_both_settings(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path, "data_dir": None}, llm={"backend": "scripted"})
    argv = [
        "--dafny-tasks",
        "1",
        "--humaneval-tasks",
        "1",
        "--width",
        "2",
        "--depth",
        "1",
        "--exploit-samples",
        "1",
        "--judge-votes",
        "1",
    ]
    report = alphaverus.main(settings, argv)
    for setting in ("dafny_hints", "humaneval_tests"):
        assert set(report[setting]) == set(SEARCHES)
        for row in report[setting].values():
            assert row["llm_calls"] <= row["llm_call_budget"] == 2 and row["tasks"] == 1
            assert "guard_rejected_nodes" in row["filters"]
        assert set(report["ratios"][setting]) == {f"{kind}_solved_over_treefinement" for kind in SEARCHES[1:]}
    assert "checked" in report["dafny_hints"]["treefinement"]["filters"]
    for row in report["dafny_hints"].values():  # pruning is counted apart from the model's samples
        assert row["solved"] == row["solved_by_search"] + row["solved_by_pruning"]
        assert row["nodes"] <= 2 and row["pruning_nodes"] >= 0
    with TrajectoryStore.from_settings(settings) as store:  # every search's stored run records its provenance
        runs = store.list_runs(agent="alphaverus", limit=100)
    found = [provenance_of(run) for run in runs]
    assert len(runs) == 2 * len(SEARCHES) and {p.suite.tasks if p else None for p in found} == {1}
    partial = json.loads((tmp_path / "bench" / "alphaverus.partial.json").read_text())
    assert set(partial["humaneval_tests"]) == set(SEARCHES)  # progress is saved search by search


def test_unknown_search_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown search 'dfs'"):
        alphaverus.main(load_settings(), ["--searches", "treefinement,dfs"])


@pytest.mark.slow
@pytest.mark.nagini
@pytest.mark.bwrap
def test_bench_runs_the_nagini_hints_setting(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path, "data_dir": None}, llm={"backend": "scripted"})
    argv = ["--settings", "nagini_hints", "--nagini-tasks", "1", "--searches", "treefinement"]
    report = alphaverus.main(settings, [*argv, "--width", "1", "--depth", "1", "--prune-steps", "0"])
    row = report["nagini_hints"]["treefinement"]
    assert row["tasks"] == 1 and row["llm_calls"] == 1 and row["verifier_calls"] >= 1 and row["solved"] == 0
    assert row["filters"] == {"guard_rejected_nodes": 0}  # the exploit model and the judge are Dafny-only
    assert set(report["nagini_summary"]["hints"]["treefinement"]) >= {"syntax_error_share", "verified_share"}
