"""`veriloop bench f2strans` argument handling (the measured run itself is committed as bench/results/f2strans.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.bench import f2strans
from veriloop.config import load_settings
from veriloop.errors import ConfigError


def test_directions_parse() -> None:
    assert f2strans._directions("cpp->python, java->python") == [("cpp", "python"), ("java", "python")]
    with pytest.raises(ConfigError, match="cpp->python"):
        f2strans._directions("cpp-python")


@pytest.mark.data("transcoder_unitrans_cleaned")
def test_too_few_functions_is_a_config_error(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path, "data_dir": load_settings().paths.data_dir})
    with pytest.raises(ConfigError, match="functions with every direction"):
        f2strans.main(settings, ["--n", "100000", "--work", str(tmp_path / "work")])


def test_committed_results_have_the_issue_keys() -> None:
    path = Path(__file__).resolve().parents[3] / "bench" / "results" / "f2strans.json"
    assert path.is_file(), "bench/results/f2strans.json is committed; `veriloop bench f2strans --out ...` makes it"
    results = json.loads(path.read_text())
    for direction in ("cpp->python", "java->python"):
        assert results[direction]["n"] >= 40
        for phase in ("before", "after"):
            assert 0.0 <= results[direction][phase]["computational_accuracy"] <= 1.0
            assert 0.0 <= results[direction][phase]["style"] <= 1.0


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_shapes_only_translates_with_and_without_the_constraint(tmp_path: Path) -> None:
    """No training: the held-out functions once with `structured` and once without, reply shapes for each."""
    settings = load_settings(
        paths={"home": tmp_path, "data_dir": load_settings().paths.data_dir}, llm={"backend": "scripted"}
    )
    argv = ["--n", "2", "--turns", "1", "--directions", "cpp->python", "--shapes-only", "--work", str(tmp_path / "w")]
    report = f2strans.main(settings, argv)
    shapes = report["reply_shapes"]
    assert shapes["tasks"] == 2 and set(shapes["cpp->python"]) == {"structured", "unstructured"}
    for side in shapes["cpp->python"].values():
        # the scripted model echoes the prompt: prose around the C++ source, never a python block
        assert side["replies"] == 2 and side["without_code_block"] == 1.0 and side["unparseable"] == 1.0
        assert side["computational_accuracy"] == 0.0 and side["run"]
    assert "training" not in report


def test_committed_reply_shapes_are_shares_of_both_runs() -> None:
    path = Path(__file__).resolve().parents[3] / "bench" / "results" / "f2strans.json"
    shapes = json.loads(path.read_text())["reply_shapes"]
    assert shapes["tasks"] >= 10 and "--shapes-only" in shapes["command"]
    for direction in ("cpp->python", "java->python"):
        for label in ("structured", "unstructured"):
            side = shapes[direction][label]
            assert side["replies"] >= shapes["tasks"]
            for key in ("without_code_block", "several_blocks", "unparseable", "without_function"):
                assert 0.0 <= side[key] <= 1.0
