"""Every trainer's knobs are one typed, documented model from the `TRAINERS` registry; bad knobs are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.cli import main
from veriloop.errors import ConfigError
from veriloop.training import METHODS
from veriloop.training.common import TrainSpec
from veriloop.training.configs import TRAINERS, DPOConfig, GRPOConfig, ReviseStageConfig, config_for


def test_every_method_has_a_documented_config() -> None:
    assert set(METHODS) == set(TRAINERS)
    for name in TRAINERS:
        config_type = TRAINERS.load(name)
        assert config_type.summary == METHODS[name]
        assert all(field.description for field in config_type.model_fields.values()), name
    assert all(field.description for field in ReviseStageConfig.model_fields.values())


def test_text_options_become_typed_values(tmp_path: Path) -> None:
    spec = TrainSpec(
        method="dpo", data=tmp_path, out=tmp_path, options={"loss": "ns_dpo", "gamma": "0.9", "precompute_ref": "off"}
    )
    config = config_for(spec)
    assert isinstance(config, DPOConfig) and (config.gamma, config.precompute_ref) == (0.9, False)
    grpo = GRPOConfig.of(TrainSpec(method="grpo", data=tmp_path, out=tmp_path, options={"num_generations": "3"}))
    assert grpo.num_generations == 3 and grpo.reward == "all_pass"


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        ("dpo", {"gama": "0.9"}, "bad options for training method 'dpo': gama: Extra inputs are not permitted"),
        ("dpo", {"beta": "warm"}, "beta: Input should be a valid number"),
        ("grpo", {"num_generations": "1"}, "num_generations: Input should be greater than or equal to 2"),
        ("rm", {"loss": "hinge"}, "loss: Input should be 'bt' or 'bce'"),
        ("ppo", {}, "unknown training method 'ppo'"),
    ],
)
def test_bad_options_are_clear_errors(tmp_path: Path, method: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_for(TrainSpec(method=method, data=tmp_path, out=tmp_path, options=options))


def test_the_cli_refuses_a_misspelt_option_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    code = main(["--home", str(tmp_path), "train", "dpo", "--data", str(data), "--option", "gama=0.9"])
    assert code != 0 and "gama: Extra inputs are not permitted" in capsys.readouterr().err
