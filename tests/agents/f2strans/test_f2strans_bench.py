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
