"""Competitive-programming formats with stdin/stdout tests: APPS, CodeContests, LiveCodeBench.

Each becomes a task with `cases` (the public ones shown as feedback). Function-call tests (APPS's
`fn_name` problems) become asserts. LiveCodeBench's compressed private tests (base64, zlib, pickle)
are decoded with an unpickler that refuses every global, so only plain strings, lists and dicts load.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from typing import Any

from veriloop.tasks.formats import Context, Format, Row

PYTHON3 = 3
"""CodeContests' language code of Python 3 solutions."""


def _json(value: Any, field: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except ValueError:
            raise ValueError(f"{field} is not valid JSON") from None
    return value


def _text(value: Any) -> str:
    return "\n".join(str(item) for item in value) if isinstance(value, list) else str(value)


def _cases(inputs: list[Any], outputs: list[Any], *, public: int) -> list[dict[str, Any]]:
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return [
        {"stdin": _text(stdin), "stdout": _text(stdout), "public": index < public}
        for index, (stdin, stdout) in enumerate(zip(inputs, outputs, strict=True))
    ]


CALL_HELPER = """def _veriloop_same(actual, expected):
    if actual == expected:
        return True
    if isinstance(actual, tuple):
        actual = list(actual)
    return actual == expected or [actual] == expected
"""


def _call_tests(fn_name: str, inputs: list[Any], outputs: list[Any]) -> tuple[str, str]:
    """(all tests, the first one) for function-call problems."""
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    asserts = [
        f"assert _veriloop_same({fn_name}(*{list(args) if isinstance(args, list) else [args]!r}), {expected!r})"
        for args, expected in zip(inputs, outputs, strict=True)
    ]
    return CALL_HELPER + "\n".join(asserts) + "\n", CALL_HELPER + asserts[0] + "\n"


# --------------------------------------------------------------------------- APPS


def _apps_detect(row: Row) -> bool:
    return "question" in row and "input_output" in row


def _apps_convert(row: Row, _: Context) -> dict[str, Any]:
    io_spec = _json(row["input_output"], "input_output")
    if not isinstance(io_spec, dict) or not io_spec.get("inputs"):
        raise KeyError("input_output")
    solutions = _json(row.get("solutions") or "[]", "solutions") or []
    prompt = str(row["question"])
    starter = str(row.get("starter_code") or "")
    spec: dict[str, Any] = {
        "id": f"apps/{row.get('problem_id', row.get('id', ''))}",
        "prompt": prompt + (f"\n\n{starter}" if starter else ""),
        "reference": solutions[0] if solutions else None,
        "metadata": {"difficulty": row.get("difficulty"), "url": row.get("url")},
    }
    if io_spec.get("fn_name"):
        tests, public = _call_tests(str(io_spec["fn_name"]), io_spec["inputs"], io_spec["outputs"])
        return {**spec, "entry_point": io_spec["fn_name"], "tests": tests, "public_tests": public}
    return {**spec, "cases": _cases(io_spec["inputs"], io_spec["outputs"], public=1)}


APPS = Format(
    "apps",
    _apps_detect,
    _apps_convert,
    "APPS (Hendrycks et al. 2021): HF `codeparrot/apps`, github.com/hendrycks/apps",
)


# --------------------------------------------------------------------------- CodeContests


def _codecontests_detect(row: Row) -> bool:
    return "description" in row and "public_tests" in row and "private_tests" in row


def _io(value: Any, field: str) -> tuple[list[Any], list[Any]]:
    value = _json(value, field) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be an object with input and output lists")
    return list(value.get("input") or []), list(value.get("output") or [])


def _codecontests_convert(row: Row, _: Context) -> dict[str, Any]:
    public_in, public_out = _io(row["public_tests"], "public_tests")
    private_in, private_out = _io(row["private_tests"], "private_tests")
    if not public_in and not private_in:
        raise ValueError("the problem has no public or private tests")
    solutions = _json(row.get("solutions") or {}, "solutions") or {}
    reference = None
    for language, code in zip(solutions.get("language") or [], solutions.get("solution") or [], strict=False):
        if language == PYTHON3:
            reference = code
            break
    return {
        "id": f"codecontests/{row.get('name', '')}",
        "prompt": str(row["description"]),
        "cases": _cases(public_in + private_in, public_out + private_out, public=len(public_in)),
        "reference": reference,
        "metadata": {"source": row.get("source"), "difficulty": row.get("difficulty")},
    }


CODECONTESTS = Format(
    "codecontests",
    _codecontests_detect,
    _codecontests_convert,
    "CodeContests (Li et al. 2022): HF `deepmind/code_contests`; generated_tests are not used",
)


# --------------------------------------------------------------------------- LiveCodeBench


class _PlainUnpickler(pickle.Unpickler):
    """Loads only what needs no global: strings, numbers, lists, dicts (no code runs)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}: only plain data is read")


def _lcb_cases(value: Any, field: str) -> list[dict[str, Any]]:
    if isinstance(value, str) and value.strip() and not value.lstrip().startswith("["):
        try:
            value = _PlainUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
        except Exception as exc:
            raise ValueError(f"{field} is neither JSON nor LiveCodeBench's compressed form: {exc}") from None
    cases = _json(value, field) or []
    if not isinstance(cases, list):
        raise ValueError(f"{field} must be a list of test cases")
    return cases


def _lcb_detect(row: Row) -> bool:
    return "question_content" in row and "public_test_cases" in row


def _lcb_convert(row: Row, _: Context) -> dict[str, Any]:
    public = _lcb_cases(row["public_test_cases"], "public_test_cases")
    private = _lcb_cases(row.get("private_test_cases") or "[]", "private_test_cases")
    every = public + private
    if any(case.get("testtype") == "functional" for case in every):
        raise ValueError("functional (LeetCode-style) tests are not supported; only stdin problems")
    return {
        "id": f"livecodebench/{row.get('question_id', '')}",
        "prompt": str(row["question_content"]),
        "cases": _cases([c["input"] for c in every], [c["output"] for c in every], public=len(public)),
        "metadata": {
            "title": row.get("question_title"),
            "platform": row.get("platform"),
            "contest_date": str(row.get("contest_date") or ""),
            "difficulty": row.get("difficulty"),
        },
    }


LIVECODEBENCH = Format(
    "livecodebench",
    _lcb_detect,
    _lcb_convert,
    "LiveCodeBench code generation: HF `livecodebench/code_generation_lite` (stdin problems)",
)
