"""`veriloop bench train` runs its configurations in child processes and reports step time, memory and ratios."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.bench import train as bench_train
from veriloop.config import Settings
from veriloop.errors import ConfigError


@pytest.mark.slow
@pytest.mark.model
def test_bench_train_smoke(demo_settings: Settings, base_model: Path, exports: dict[str, Path]) -> None:
    argv = ["--data", str(exports["preference"]), "--model", str(base_model), "--steps", "2"]
    report = bench_train.main(demo_settings, [*argv, "--configs", "full_live,lora_precomputed"])
    assert set(report["configs"]) == {"full_live", "lora_precomputed"}
    for values in report["configs"].values():
        assert "error" not in values, values
        assert values["steps"] == 2 and values["peak_rss_mb"] >= values["rss_after_load_mb"] > 0
    lora = report["configs"]["lora_precomputed"]
    assert lora["trainable_params"] < report["configs"]["full_live"]["trainable_params"]
    assert set(report["ratios"]["lora_precomputed"]) == {"step_time_vs_full_live", "peak_rss_vs_full_live"}


def test_bench_train_refuses_unknown_configs(demo_settings: Settings) -> None:
    with pytest.raises(ConfigError, match="unknown config"):
        bench_train.main(demo_settings, ["--configs", "turbo"])
