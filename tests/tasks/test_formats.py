"""Readers for public task formats, each on a small file written here: detection, --format, and the tests they make."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.records import ExecStatus, Task
from veriloop.sandbox import default_limits, get_sandbox
from veriloop.sandbox.languages import python_tests_job
from veriloop.tasks import load_suite
from veriloop.tasks.files import TaskFileError
from veriloop.tasks.mbpp import MBPP_URL, data_file


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path / "home", "data_dir": None})


def _file(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


async def _run(settings: Settings, task: Task, code: str) -> ExecStatus:
    sandbox = get_sandbox(settings)
    try:
        job = python_tests_job(
            sandbox.toolchain, code, task.tests, entry_point=task.entry_point, limits=default_limits(settings)
        )
        return (await sandbox.run(job)).status
    finally:
        await sandbox.aclose()


HUMANEVAL_ROW = {
    "task_id": "HumanEval/900",
    "prompt": 'def inc(x: int) -> int:\n    """Return x + 1."""\n',
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n",
    "entry_point": "inc",
}
MBPP_ROW = {
    "task_id": 901,
    "text": "Write a function to double a number.",
    "code": "def dbl(x):\n  return 2 * x",
    "test_list": ["assert dbl(2) == 4", "assert dbl(0) == 0"],
    "test_setup_code": "",
    "challenge_test_list": [],
}
SANITIZED_ROW = {
    "source_file": "x",
    "task_id": 902,
    "prompt": "Write a function to negate.",
    "code": "def neg(x):\n  return -x",
    "test_imports": ["import math"],
    "test_list": ["assert neg(1) == -1", "assert neg(0) == 0"],
}


async def test_humaneval_and_mbpp_files(tmp_path: Path, settings: Settings) -> None:
    humaneval = load_suite(_file(tmp_path, "he.jsonl", [HUMANEVAL_ROW]), settings)
    [task] = humaneval.tasks
    assert humaneval.version.startswith("humaneval;") and task.id == "HumanEval/900" and task.entry_point == "inc"
    assert task.public_tests is not None and "candidate(-1)" not in task.public_tests
    assert await _run(settings, task, task.reference or "") is ExecStatus.PASSED
    mbpp = load_suite(_file(tmp_path, "mbpp.jsonl", [MBPP_ROW, SANITIZED_ROW]), settings)
    assert [t.id for t in mbpp.tasks] == ["MBPP/901", "MBPP/902"] and mbpp.version.startswith("mbpp;")
    assert mbpp.tasks[1].tests.startswith("import math") and mbpp.tasks[1].entry_point == "neg"
    assert await _run(settings, mbpp.tasks[1], "def neg(x):\n    return x\n") is ExecStatus.FAILED


def test_format_can_be_named_and_a_wrong_one_reports_rows(tmp_path: Path, settings: Settings) -> None:
    path = _file(tmp_path, "he.jsonl", [HUMANEVAL_ROW])
    assert load_suite(f"{path}#humaneval", settings).tasks[0].id == "HumanEval/900"
    with pytest.raises(TaskFileError, match="row 1, field 'test_list': missing"):
        load_suite(f"{path}#mbpp", settings)


async def test_evalplus_outputs_come_from_the_reference_run_in_the_sandbox(tmp_path: Path, settings: Settings) -> None:
    row = {
        **HUMANEVAL_ROW,
        "task_id": "HumanEval/903",
        "prompt": "def half(x):\n",
        "canonical_solution": "    if x == 7:\n        raise ValueError('no')\n    return x / 2\n",
        "entry_point": "half",
        "base_input": [[4]],
        "plus_input": [[3], [7], [1e9]],
        "atol": 1e-6,
        "contract": "",
    }
    suite = load_suite(_file(tmp_path, "plus.jsonl", [row]), settings)
    [task] = suite.tasks
    assert suite.version.startswith("evalplus;") and task.metadata["evalplus"]["dropped"] == 1  # 7 raises
    assert "half(*[3]), 1.5" in task.tests and "half(*[4]), 2.0" in (task.public_tests or "")
    assert await _run(settings, task, "def half(x):\n    return x / 2\n") is ExecStatus.PASSED
    assert await _run(settings, task, "def half(x):\n    return x // 2\n") is ExecStatus.FAILED
    cached = list((settings.paths.cache_dir / "suites" / "evalplus").glob("*.json"))
    assert len(cached) == 1 and load_suite(_file(tmp_path, "plus.jsonl", [row]), settings).tasks == suite.tasks
    hostile = {**row, "task_id": "HumanEval/904", "canonical_solution": "    import sys\n    sys.exit(3)\n"}
    with pytest.raises(ConfigError, match="fails on every input"):
        load_suite(_file(tmp_path, "hostile.jsonl", [hostile]), settings)


async def test_apps_codecontests_and_livecodebench(tmp_path: Path, settings: Settings) -> None:
    apps = [
        {
            "problem_id": 1,
            "question": "Print a+b.",
            "solutions": json.dumps(["print(sum(map(int, input().split())))"]),
            "input_output": json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}),
            "starter_code": "",
        },
        {
            "problem_id": 2,
            "question": "Return x*3.",
            "solutions": "[]",
            "starter_code": "def triple(x):",
            "input_output": json.dumps({"fn_name": "triple", "inputs": [[1], [2]], "outputs": [[3], [6]]}),
        },
    ]
    suite = load_suite(_file(tmp_path, "apps.jsonl", apps), settings)
    stdin_task, call_task = suite.tasks
    assert stdin_task.id == "apps/1" and stdin_task.metadata["stdio_cases"] == 2 and call_task.entry_point == "triple"
    solution = 'if __name__ == "__main__":\n    print(sum(map(int, input().split())))\n'
    assert await _run(settings, stdin_task, solution) is ExecStatus.PASSED
    assert await _run(settings, call_task, "def triple(x):\n    return 3 * x\n") is ExecStatus.PASSED
    contests = [
        {
            "name": "1_A",
            "description": "Echo the number.",
            "source": 2,
            "difficulty": 7,
            "public_tests": {"input": ["5\n"], "output": ["5\n"]},
            "private_tests": {"input": ["9\n"], "output": ["9\n"]},
            "generated_tests": {"input": [], "output": []},
            "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(input())"]},
        }
    ]
    [echo] = load_suite(_file(tmp_path, "cc.jsonl", contests), settings).tasks
    assert echo.reference == "print(input())" and echo.public_tests is not None
    assert echo.public_tests.count("assert ") == 1 and echo.tests.count("assert ") == 2
    private = json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}])
    packed = base64.b64encode(zlib.compress(pickle.dumps(private))).decode()
    lcb = {
        "question_title": "Twice",
        "question_content": "Print 2n.",
        "question_id": "abc1",
        "platform": "atcoder",
        "public_test_cases": json.dumps([{"input": "1\n", "output": "2\n", "testtype": "stdin"}]),
        "private_test_cases": packed,
        "starter_code": "",
        "difficulty": "easy",
        "contest_date": "2024-01-01",
    }
    [twice] = load_suite(_file(tmp_path, "lcb.jsonl", [lcb]), settings).tasks
    assert twice.id == "livecodebench/abc1" and twice.metadata["stdio_cases"] == 2
    hostile = base64.b64encode(zlib.compress(pickle.dumps(Path("/etc/passwd")))).decode()
    with pytest.raises(TaskFileError, match="row 1: private_test_cases is neither JSON"):
        load_suite(_file(tmp_path, "evil.jsonl", [{**lcb, "private_test_cases": hostile}]), settings)


def test_dafnybench_rows(tmp_path: Path, settings: Settings) -> None:
    row = {
        "test_ID": "007",
        "test_file": "Clover_abs_no_hints.dfy",
        "ground_truth": "method A() {}\n",
        "hints_removed": "method A() {}\n",
    }
    path = tmp_path / "test.json"
    path.write_text(json.dumps([row]))
    [task] = load_suite(str(path), settings).tasks
    assert task.id == "dafnybench/Clover_abs" and task.language == "dafny" and task.spec == row["hints_removed"]
    assert task.metadata["verifier"] == "dafny" and task.metadata["mode"] == "hints"


def test_transcoder_rows_with_test_programs_beside_the_file(tmp_path: Path, settings: Settings) -> None:
    script = "#TOFILL\nif __name__ == '__main__':\n    print('#Results: %d, %d' % (int(f_filled(1) == 2), 1))\n"
    folder = tmp_path / "transcoder_evaluation_gfg" / "python"
    folder.mkdir(parents=True)
    (folder / "ADD_ONE.py").write_text(script)
    rows = [
        {"id": "ADD_ONE", "cpp": "int addOne(int x) { return x + 1; }", "python": "def addOne(x):\n    return x + 1"},
        {
            "id": "INLINE",
            "cpp": "int f(int x) { return x; }",
            "java": "static int f(int x) { return x; }",
            "tests": {"python": script},
        },
    ]
    suite = load_suite(_file(tmp_path, "samples.jsonl", rows), settings)
    first, second = suite.tasks
    assert first.id == "transcoder/ADD_ONE" and first.metadata["tests"]["python"].startswith("#TOFILL")
    assert first.metadata["names"]["cpp"] == "addOne" and set(second.metadata["functions"]) == {"cpp", "java"}
    with pytest.raises(TaskFileError, match="row 1, field 'tests': missing"):
        load_suite(_file(tmp_path / "transcoder_evaluation_gfg", "lonely.jsonl", rows[:1]), settings)


def test_mbpp_without_the_data_folder_downloads_once(tmp_path: Path, settings: Settings) -> None:
    line = json.dumps({**MBPP_ROW, "task_id": 11}) + "\n"
    seen: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=line)

    path = data_file(settings, httpx.MockTransport(serve))
    assert seen == [MBPP_URL] and path.read_text() == line and path.is_relative_to(settings.paths.cache_dir)
    assert data_file(settings, httpx.MockTransport(serve)) == path and len(seen) == 1  # cached
    assert [t.id for t in load_suite("mbpp", settings).tasks] == ["MBPP/11"]


def test_mbpp_offline_says_what_to_do(settings: Settings) -> None:
    def offline(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no network", request=request)

    with pytest.raises(ConfigError, match=r"could not be fetched .* set paths\.data_dir"):
        data_file(settings, httpx.MockTransport(offline))
