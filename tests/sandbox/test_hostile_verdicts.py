"""Issue 30, verdicts round three: three ways a wrong program came back `passed` from the Python judge.

1. A pass with no test: a test file that runs no test (a `check` never called, no assert, an exit before the asserts)
   gave zero tests expected and zero reported, which was `passed` for any program. Now such a file is refused before
   any job runs (ConfigError, naming the missing entry point), the judge in the sandbox refuses it too, a test passes
   only when one of its asserts ran, and zero tests is never `passed` (exec, the judge, the verifier).
2. The test's own inputs changed by the candidate: in-place changes to arguments were copied back into the test's
   objects, so `assert f(xs) == sorted(xs)` compared with what the candidate left in `xs`. Now the candidate gets
   copies, and only a call whose value the test drops (`f(xs)` as a statement) carries its changes back.
3. Prompt helpers were partial: the prompt's module-level constants came from the candidate. Now the whole prompt but
   the entry point runs in the judge, and no name it binds is taken from the candidate.

Every hostile case has an honest twin that must pass; all run against the real bubblewrap sandbox (warm workers).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.hostile import assert_not_passed, assert_passed
from veriloop.errors import ConfigError
from veriloop.records import ExecResult, ExecStatus, TestOutcome
from veriloop.sandbox import Limits
from veriloop.sandbox import languages as langs
from veriloop.sandbox.inside import harness_py
from veriloop.sandbox.job import Checks, Job

LIMITS = Limits(wall_s=3.0)
RIGHT_ADD = "def add(a, b):\n    return a + b\n"
WRONG_ADD = "def add(a, b):\n    return a - b\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-5, 5) == 0\n"


async def _run_all(sandbox: Any, jobs: list[Job]) -> list[ExecResult]:
    return list(await asyncio.gather(*[sandbox.run(job) for job in jobs]))


def _unchecked_job(toolchain: Any, code: str, tests: str, entry_point: str | None) -> Job:
    """The job python_tests_job builds, without the host's count: what the judge in the sandbox does on its own."""
    step = langs._judge_step(toolchain, "asserts", tests, entry_point)
    files = {"main.py": langs.JUDGE_MAIN, harness_py.SOLUTION: code}
    return Job(files=files, steps=[step], limits=LIMITS, language="python", checks=Checks(kind="python_asserts"))


# --------------------------------------------------------------------------- 1. a pass with no test


@dataclass(frozen=True)
class NoTest:
    """A test file that tests nothing (for any program), and its twin: the same file made to test `add`."""

    name: str
    tests: str
    twin: str
    entry_point: str | None = None
    twin_entry_point: str | None = None
    refused: bool = True  # the host refuses the file before any job runs (else the sandbox's verdict says no)
    code: str = "$answer"  # the program: $answer is the right or the wrong `add`


NO_TESTS = [
    NoTest("check_never_called", 'METADATA = {"author": "x"}\n\n' + CHECK, CHECK + "\ncheck(add)\n"),
    NoTest("check_called_by_a_misspelt_name", CHECK + "\nchek(add)\n", CHECK + "\ncheck(add)\n"),
    NoTest("empty_file", "", "assert add(1, 2) == 3\n"),
    NoTest("only_comments", "# assert add(1, 2) == 3\n# check(add)\n", "assert add(1, 2) == 3  # a test\n"),
    NoTest("only_a_docstring", '"""assert add(1, 2) == 3"""\n', '"""Tests."""\nassert add(1, 2) == 3\n'),
    NoTest(
        "metadata_only", 'METADATA = {"author": "x", "dataset": "test"}\n', "METADATA = {}\nassert add(2, 2) == 4\n"
    ),
    NoTest("check_with_no_assert", "def check(candidate):\n    candidate(1, 2)\n", CHECK, "add", "add"),
    NoTest(
        "last_check_is_empty",
        CHECK + "\n\ndef check(candidate):\n    pass\n\ncheck(add)\n",
        CHECK + "\n\ncheck(add)\n",
    ),
    NoTest(
        "check_is_a_generator",
        "def check(candidate):\n    assert candidate(1, 2) == 3\n    yield\n",
        CHECK,
        "add",
        "add",
    ),
    NoTest("check_is_a_coroutine", "async " + CHECK + "\ncheck(add)\n", CHECK + "\ncheck(add)\n"),
    NoTest(
        "check_returns_before_its_asserts",
        "def check(candidate):\n    return\n    assert candidate(1, 2) == 3\n",
        "def check(candidate):\n    assert candidate(1, 2) == 3\n    return\n",
        "add",
        "add",
    ),
    NoTest(
        "asserts_only_in_a_helper_never_called",
        "def check(candidate):\n    def helper():\n        assert candidate(1, 2) == 3\n    x = 1\n",
        "def check(candidate):\n    def helper():\n        assert candidate(1, 2) == 3\n    helper()\n",
        "add",
        "add",
    ),
    NoTest(
        "check_without_a_parameter_never_called",
        "def check():\n    assert add(1, 2) == 3\n",
        "def check():\n    assert add(1, 2) == 3\n\ncheck()\n",
    ),
    NoTest(
        "assert_on_a_tuple_is_always_true",
        'def check(candidate):\n    assert (candidate(1, 2) == 3, "adds")\n',
        'def check(candidate):\n    assert candidate(1, 2) == 3, "adds"\n',
        "add",
        "add",
    ),
    NoTest(
        "asserts_under_if_false",
        "if False:\n    assert add(1, 2) == 3\n",
        "if True:\n    assert add(1, 2) == 3\n",
        refused=False,
    ),
    NoTest(
        "a_loop_over_no_cases",
        "for a, b, want in []:\n    assert add(a, b) == want\n",
        "for a, b, want in [(1, 2, 3), (0, 0, 0)]:\n    assert add(a, b) == want\n",
        refused=False,
    ),
    NoTest(
        "system_exit_zero_before_the_asserts",
        "import sys\nsys.exit(0)\n" + CHECK + "\ncheck(add)\n",
        "import sys\n" + CHECK + "\ncheck(add)\n",
        refused=False,
    ),
    NoTest(
        "check_raises_system_exit_first",
        "def check(candidate):\n    raise SystemExit(0)\n    assert candidate(1, 2) == 3\n",
        CHECK,
        "add",
        "add",
        refused=False,
    ),
    NoTest(
        "os_exit_inside_check",
        "import os\n\ndef check(candidate):\n    os._exit(0)\n    assert candidate(1, 2) == 3\n",
        "import os\n\n" + CHECK,
        "add",
        "add",
        refused=False,
    ),
    NoTest(
        "os_exit_in_the_set_up",
        "import os\nos._exit(0)\nassert add(1, 2) == 3\n",
        "import os\nassert add(1, 2) == 3\n",
        refused=False,
    ),
    NoTest(
        "asserts_that_never_call_the_program",
        "assert True\nassert 1 + 2 == 3\n",
        "assert True\nassert add(1, 2) == 3\n",
        refused=False,
    ),
    NoTest(
        "program_exits_zero_on_import",
        CHECK,
        CHECK,
        "add",
        "add",
        refused=False,
        code="import os\nos._exit(0)\n$answer",
    ),
    NoTest(
        "program_raises_system_exit_zero_on_import",
        "assert add(1, 2) == 3\n",
        "assert add(1, 2) == 3\n",
        refused=False,
        code="raise SystemExit(0)\n$answer",
    ),
]


def _program(case: NoTest, answer: str, twin: bool) -> str:
    code = case.code if not twin else "$answer"
    return code.replace("$answer", answer)


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in NO_TESTS])
async def test_a_test_file_that_tests_nothing_passes_no_program(bwrap_warm: Any, case: NoTest) -> None:
    """Neither the wrong nor the right program passes a file that runs no test; the twin file passes the right one
    and fails the wrong one. A refused file names what is missing, and the sandbox refuses it on its own too."""
    toolchain = bwrap_warm.toolchain
    jobs = []
    for answer in (WRONG_ADD, RIGHT_ADD):
        code = _program(case, answer, twin=False)
        if case.refused:
            with pytest.raises(ConfigError, match="cannot judge a program"):
                langs.python_tests_job(toolchain, code, case.tests, entry_point=case.entry_point, limits=LIMITS)
            jobs.append(_unchecked_job(toolchain, code, case.tests, case.entry_point))
        else:
            jobs.append(
                langs.python_tests_job(toolchain, code, case.tests, entry_point=case.entry_point, limits=LIMITS)
            )
    for answer in (WRONG_ADD, RIGHT_ADD):
        code = _program(case, answer, twin=True)
        jobs.append(
            langs.python_tests_job(toolchain, code, case.twin, entry_point=case.twin_entry_point, limits=LIMITS)
        )
    wrong, right, twin_wrong, twin_right = await _run_all(bwrap_warm, jobs)
    assert_not_passed(wrong)
    assert_not_passed(right)
    if case.refused:
        assert right.status is ExecStatus.INFRA_ERROR and "ran no test" in right.stderr, right
    assert_not_passed(twin_wrong)
    assert_passed(twin_right)


SWALLOWED = [
    "def check(candidate):\n    try:\n        assert candidate(1, 2) == 3\n    except AssertionError:\n        pass\n",
    "for a, b, want in [(1, 2, 3), (2, 2, 4)]:\n    try:\n        assert add(a, b) == want\n"
    "    except:\n        pass\n",
    "import contextlib\nwith contextlib.suppress(Exception):\n    assert add(1, 2) == 3, 'adds'\n",
]


@pytest.mark.parametrize("tests", SWALLOWED, ids=["except_assertion_error", "bare_except_in_a_loop", "suppress"])
async def test_an_assert_the_test_catches_still_fails_it(bwrap_warm: Any, tests: str) -> None:
    """A failed assert is evidence against the program even where the test file swallows its AssertionError."""
    toolchain = bwrap_warm.toolchain
    jobs = [
        langs.python_tests_job(toolchain, code, tests, entry_point="add", limits=LIMITS)
        for code in (WRONG_ADD, RIGHT_ADD)
    ]
    wrong, right = await _run_all(bwrap_warm, jobs)
    assert_not_passed(wrong)
    assert "AssertionError was caught" in wrong.tests[0].message, wrong
    assert_passed(right)


def test_the_refusal_names_the_missing_entry_point() -> None:
    with pytest.raises(harness_py.TestFileError, match=r"check\(candidate\) but never call it .*entry point"):
        harness_py.count_tests("METADATA = {}\n\n" + CHECK)
    assert harness_py.count_tests(CHECK, "add") == 2
    assert harness_py.count_tests(CHECK + "\ncheck(add)\n") == 2
    assert harness_py.count_tests(CHECK + "\nif __name__ == '__main__':\n    check(candidate=add)\n") == 2
    loops = "def check(candidate):\n    for x in range(3):\n        assert candidate(x, 0) == x\n    assert True\n"
    assert harness_py.count_tests(loops, "add") == 2  # a loop of asserts is one test (HumanEval/32)


def test_zero_tests_never_pass_outside_the_sandbox_either() -> None:
    """The judge and the verifier never turn a `passed` with no test outcome into a pass (defence in depth)."""
    from veriloop.judge.engine import RewardOptions, exec_reward, without_evidence
    from veriloop.records import VerifyStatus
    from veriloop.verifiers.tests import result_from_exec

    empty = ExecResult(status=ExecStatus.PASSED)
    judged = without_evidence(empty)
    assert judged.status is ExecStatus.INFRA_ERROR and not judged.passed and "ran no test" in judged.stderr
    assert exec_reward(judged, RewardOptions()) == (None, None)
    assert result_from_exec(empty).status is VerifyStatus.INFRA_ERROR
    real = ExecResult(status=ExecStatus.PASSED, tests=[TestOutcome(name="t", passed=True)])
    assert without_evidence(real) is real and result_from_exec(real).status is VerifyStatus.VERIFIED


async def test_the_judge_answers_an_uncalled_check_with_an_error_not_a_pass(bwrap_warm: Any) -> None:
    """The judge behind POST /api/judge and the GRPO reward: no verdict, no reward, and the message says why."""
    from veriloop.config import load_settings
    from veriloop.judge.engine import Judge, JudgeCandidate

    judge = Judge(load_settings(None), sandbox=bwrap_warm, security=False)
    tests = "METADATA = {}\n\n" + CHECK
    verdicts = await judge.judge_many(
        [
            JudgeCandidate(code=WRONG_ADD, tests=tests),
            JudgeCandidate(code=RIGHT_ADD, tests=tests),
            JudgeCandidate(code=RIGHT_ADD, tests=tests, entry_point="add"),
            JudgeCandidate(code=WRONG_ADD, tests=tests, entry_point="add"),
        ]
    )
    for verdict in verdicts[:2]:
        assert (verdict.status, verdict.passed, verdict.reward) == ("infra_error", False, None), verdict
        assert verdict.error is not None and "entry point" in verdict.error, verdict
    assert (verdicts[2].passed, verdicts[2].reward, verdicts[3].passed, verdicts[3].reward) == (True, 1.0, False, 0.0)


@pytest.mark.bwrap
def test_post_api_judge_answers_an_error_and_stores_no_pass(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tests.service.test_judge import judge_settings
    from veriloop.service.app import create_app
    from veriloop.store import TrajectoryStore
    from veriloop.testing import ScriptedBackend

    settings = judge_settings(tmp_path)
    body = {"candidates": [{"code": WRONG_ADD, "tests": "METADATA = {}\n\n" + CHECK}], "store": True}
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        response = client.post("/api/judge", json=body)
    assert response.status_code == 200, response.text
    [verdict] = response.json()["results"]
    assert (verdict["status"], verdict["passed"], verdict["reward"]) == ("infra_error", False, None), verdict
    assert "entry point" in verdict["error"]
    store = TrajectoryStore(settings.store.url)
    try:
        assert [attempt.status for attempt in store.list_attempts(response.json()["run_id"])] == ["error"]
    finally:
        store.close()


@pytest.mark.bwrap
def test_veriloop_exec_refuses_an_uncalled_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veriloop.cli import main

    program, tests = tmp_path / "add.py", tmp_path / "tests.py"
    program.write_text(WRONG_ADD)
    tests.write_text("METADATA = {}\n\n" + CHECK)
    assert main(["exec", str(program), "--lang", "python", "--tests", str(tests)]) == 2
    refused = capsys.readouterr().err
    assert refused.startswith("error: ") and "--entry-point" in refused and "Traceback" not in refused
    assert main(["exec", str(program), "-l", "python", "--tests", str(tests), "--entry-point", "add"]) == 1
    assert "status: failed" in capsys.readouterr().out


def test_no_stdio_case_is_no_test() -> None:
    from veriloop.sandbox.base import Toolchain

    with pytest.raises(ConfigError, match="no stdin/stdout cases"):
        langs.stdio_job("python", Toolchain(paths={"python": "/usr/bin/python3"}), "print(1)\n", [])


# --------------------------------------------------------------------------- 2. the test's own data


@dataclass(frozen=True)
class Mutation:
    """Tests, a wrong program that changes its arguments so that the tests' comparisons agree with it, and a right
    program (which may change its arguments too: what it does to its copies is its own business)."""

    name: str
    tests: str
    hostile: str
    honest: str


MUTATIONS = [
    Mutation(
        "list_cleared",
        "xs = [3, 1, 2]\nassert sort(xs) == sorted(xs)\n",
        "def sort(xs):\n    xs.clear()\n    return []\n",
        "def sort(xs):\n    return sorted(xs)\n",
    ),
    Mutation(
        "dict_emptied",
        "d = {'a': 1, 'b': 2}\nassert size(d) == len(d)\nassert size({}) == 0\n",
        "def size(d):\n    d.clear()\n    return 0\n",
        "def size(d):\n    n = len(d)\n    d.clear()\n    return n\n",
    ),
    Mutation(
        "set_replaced",
        "s = {3, 1, 2}\nassert biggest(s) == max(s)\n",
        "def biggest(s):\n    s.clear()\n    s.add(-1)\n    return -1\n",
        "def biggest(s):\n    return max(s)\n",
    ),
    Mutation(
        "nested_rows_zeroed",
        "m = [[1, 2], [3, 4]]\nassert total(m) == sum(map(sum, m))\n",
        "def total(m):\n    for row in m:\n        row[:] = [0] * len(row)\n    return 0\n",
        "def total(m):\n    return sum(sum(row) for row in m)\n",
    ),
    Mutation(
        "result_kept_then_compared",
        "xs = [3, 1, 2]\ngot = sort(xs)\nassert got == sorted(xs)\n",
        "def sort(xs):\n    xs[:] = [9]\n    return [9]\n",
        "def sort(xs):\n    return sorted(xs)\n",
    ),
    Mutation(
        "same_object_returned",
        "xs = [1, 2, 3]\nassert rev(xs) == xs[::-1]\n",
        "def rev(xs):\n    xs[:] = [2, 2]\n    return xs\n",
        "def rev(xs):\n    xs.reverse()\n    return xs\n",
    ),
    Mutation(
        "aliases_inside_the_argument",
        "a = [5, 1]\ndata = [a, a]\nassert flat(data) == sorted(a + a)\n",
        "def flat(data):\n    for row in data:\n        row.clear()\n    return []\n",
        "def flat(data):\n    return sorted(x for row in data for x in row)\n",
    ),
    Mutation(
        "bytearray_truncated",
        "buf = bytearray(b'abc')\nassert upper(buf) == bytes(buf).upper()\nassert type(upper(buf)) is bytes\n",
        "def upper(buf):\n    buf[:] = b''\n    return b''\n",
        "def upper(buf):\n    out = bytes(buf).upper()\n    buf[:] = b''\n    return out\n",
    ),
    Mutation(
        "counter_rewritten",
        "import collections\nc = collections.Counter('aab')\nassert top(c) == c.most_common(1)[0][0]\n",
        "def top(c):\n    c.clear()\n    c['z'] = 5\n    return 'z'\n",
        "def top(c):\n    return c.most_common(1)[0][0]\n",
    ),
    Mutation(
        "keyword_argument_cleared",
        "xs = [3, 1, 2]\nassert sort(items=xs) == sorted(xs)\n",
        "def sort(items):\n    items.clear()\n    return []\n",
        "def sort(items):\n    return sorted(items)\n",
    ),
    Mutation(
        "generator_over_the_input",
        "xs = [1, 2, 3]\nassert double(xs) == list(x * 2 for x in xs)\n",
        "def double(xs):\n    xs.clear()\n    return []\n",
        "def double(xs):\n    return [x * 2 for x in xs]\n",
    ),
    Mutation(
        "cases_in_a_comprehension",
        "cases = [[3, 1], [2, 1, 0]]\nassert [sort(c) for c in cases] == [sorted(c) for c in cases]\n",
        "def sort(xs):\n    xs[:] = xs[:1]\n    return xs\n",
        "def sort(xs):\n    return sorted(xs)\n",
    ),
    Mutation(
        "inside_a_test_helper",
        "def run(xs):\n    return sort(xs), sorted(xs)\n\ngot, want = run([3, 1, 2])\nassert got == want\n",
        "def sort(xs):\n    del xs[1:]\n    return xs\n",
        "def sort(xs):\n    return sorted(xs)\n",
    ),
    Mutation(
        "expected_value_passed_along",
        "want = [1, 2, 3]\nassert merge([3], [1, 2], want) == want\n",
        "def merge(a, b, want):\n    want[:] = [0]\n    return [0]\n",
        "def merge(a, b, want):\n    return sorted(a + b)\n",
    ),
    Mutation(
        "list_in_a_tuple",
        "t = ([3, 1, 2],)\nassert first_sorted(t) == sorted(t[0])\n",
        "def first_sorted(t):\n    t[0].clear()\n    return []\n",
        "def first_sorted(t):\n    return sorted(t[0])\n",
    ),
    Mutation(
        "check_style_on_its_own_list",
        "def check(candidate):\n    xs = [4, 2, 9]\n    assert candidate(xs) == sorted(xs)\n"
        "    assert candidate([4, 2, 9]) == [2, 4, 9]\n",
        "CALLS = []\n\n\ndef sort(xs):\n    CALLS.append(1)\n    if len(CALLS) == 1:\n        xs.clear()\n"
        "        return []\n    return sorted(xs)\n",
        "def sort(xs):\n    xs.sort()\n    return list(xs)\n",
    ),
]

IN_PLACE = [
    Mutation(  # the honest in-place tests: a call whose value is dropped, then the argument checked
        "sorts_its_argument",
        "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]\n",
        "def sort_in_place(xs):\n    xs.reverse()\n",
        "def sort_in_place(xs):\n    xs.sort()\n",
    ),
    Mutation(
        "fills_a_dict",
        "d = {}\nfill(d, 3)\nassert d == {0: 0, 1: 1, 2: 4}\n",
        "def fill(d, n):\n    d[0] = 0\n",
        "def fill(d, n):\n    for i in range(n):\n        d[i] = i * i\n",
    ),
    Mutation(
        "keyword_target",
        "s = set()\nadd_all(target=s, items=[1, 2, 2])\nassert s == {1, 2}\n",
        "def add_all(target, items):\n    target.add(1)\n",
        "def add_all(target, items):\n    target.update(items)\n",
    ),
    Mutation(
        "nested_rows_in_a_loop",
        "m = [[3, 1], [2, 0]]\nfor row in m:\n    sort_in_place(row)\nassert m == [[1, 3], [0, 2]]\n",
        "def sort_in_place(xs):\n    xs[:] = [0, 0]\n",
        "def sort_in_place(xs):\n    xs.sort()\n",
    ),
    Mutation(
        "inside_a_check",
        "def check(candidate):\n    xs = [2, 1]\n    candidate(xs)\n    assert xs == [1, 2]\n",
        "def sort(xs):\n    pass\n",
        "def sort(xs):\n    xs.sort()\n",
    ),
    Mutation(
        "through_a_test_helper",
        "def sorted_by(f, xs):\n    f(xs)\n    return xs\n\nassert sorted_by(sort_in_place, [3, 1, 2]) == [1, 2, 3]\n",
        "def sort_in_place(xs):\n    xs.append(0)\n",
        "def sort_in_place(xs):\n    xs.sort()\n",
    ),
    Mutation(
        "bytearray_in_place",
        "buf = bytearray(b'abc')\nupper_in_place(buf)\nassert buf == bytearray(b'ABC')\n",
        "def upper_in_place(buf):\n    buf[:] = b'abc'\n",
        "def upper_in_place(buf):\n    buf[:] = bytes(buf).upper()\n",
    ),
    Mutation(
        "rows_in_a_dropped_comprehension",
        "m = [[3, 1, 2], [2, 0]]\n[sort_in_place(row) for row in m]\nassert m == [[1, 2, 3], [0, 2]]\n",
        "def sort_in_place(xs):\n    xs.reverse()\n",
        "def sort_in_place(xs):\n    xs.sort()\n",
    ),
    Mutation(
        "does_not_touch_what_it_should_not",  # an effect call shows what the candidate did to its input
        "xs = [3, 1, 2]\nsorted_copy(xs)\nassert xs == [3, 1, 2]\nassert sorted_copy(xs) == [1, 2, 3]\n",
        "def sorted_copy(xs):\n    xs.sort()\n    return xs\n",
        "def sorted_copy(xs):\n    return sorted(xs)\n",
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in MUTATIONS + IN_PLACE])
async def test_the_candidate_cannot_change_the_tests_data(bwrap_warm: Any, case: Mutation) -> None:
    toolchain = bwrap_warm.toolchain
    entry = "sort" if "def check(" in case.tests else None
    jobs = [
        langs.python_tests_job(toolchain, code, case.tests, entry_point=entry, limits=LIMITS)
        for code in (case.hostile, case.honest)
    ]
    hostile, honest = await _run_all(bwrap_warm, jobs)
    assert_not_passed(hostile)
    assert_passed(honest)


TRANSCODER_ALIASED = """
def f_gold(arr, n):
    return sorted(arr)[:n]


#TOFILL

if __name__ == '__main__':
    param = [([3, 1, 2], 2), ([9, 7, 8, 1], 3)]
    n_success = 0
    for i, parameters_set in enumerate(param):
        got = f_filled(*parameters_set)
        if got == sorted(parameters_set[0])[:parameters_set[1]]:
            n_success += 1
    print("#Results: %i, %i" % (n_success, len(param)))
"""


async def test_a_test_program_keeps_its_own_data_too(bwrap_warm: Any) -> None:
    """TransCoder-style programs (`program` mode) follow the same rule: a kept result leaves the arguments alone."""
    toolchain = bwrap_warm.toolchain
    hostile = "def f_filled(arr, n):\n    arr[:] = [0] * n\n    return [0] * n\n"
    honest = "def f_filled(arr, n):\n    arr.sort()\n    return arr[:n]\n"
    jobs = [
        langs.harness_job("python", toolchain, code, TRANSCODER_ALIASED, limits=LIMITS) for code in (hostile, honest)
    ]
    bad, good = await _run_all(bwrap_warm, jobs)
    assert_not_passed(bad)
    assert_passed(good)


# --------------------------------------------------------------------------- 3. the prompt's names


@dataclass(frozen=True)
class Constant:
    """A prompt that binds names the tests read. The hostile candidate (the prompt, a wrong body, then its own
    bindings of those names) makes the tests agree with the wrong body; the honest one is the prompt, a right body."""

    name: str
    prompt: str
    tests: str
    rebind: str
    wrong: str = "    return 0.0\n"
    right: str = "    return x * x\n"


def _entry(prompt: str) -> str:
    return prompt + "\n\ndef square(x):\n"


CHECK_TOL = "def check(candidate):\n    assert abs(candidate(3) - 9) <= TOL\n    assert abs(candidate(2) - 4) <= TOL\n"
CONSTANTS = [
    Constant("int", "TOL = 0", CHECK_TOL, "TOL = 10 ** 9"),
    Constant("float", "TOL = 1e-9", CHECK_TOL, "TOL = 1e9"),
    Constant("annotated", "TOL: float = 1e-9", CHECK_TOL, "TOL: float = 1e9"),
    Constant("annotated_then_assigned", "TOL: float\nTOL = 1e-9", CHECK_TOL, "TOL = float('inf')"),
    Constant("augmented", "TOL = 1e-3\nTOL /= 1e6", CHECK_TOL, "TOL += 1e9"),
    Constant("tuple_unpacking", "LOW, TOL = 0, 1e-9", CHECK_TOL, "LOW, TOL = 0, 1e9"),
    Constant("starred_unpacking", "TOL, *REST = (1e-9, 1, 2)", CHECK_TOL, "TOL, *REST = (1e9,)"),
    Constant("walrus", "(TOL := 1e-9)", CHECK_TOL, "(TOL := 1e9)"),
    Constant(
        "under_an_if", "import sys\nif sys.maxsize > 0:\n    TOL = 1e-9\nelse:\n    TOL = 1.0", CHECK_TOL, "TOL = 1e9"
    ),
    Constant("in_a_try", "try:\n    TOL = float('1e-9')\nexcept ValueError:\n    TOL = 1.0", CHECK_TOL, "TOL = 1e9"),
    Constant(
        "from_a_global_statement", "def _init():\n    global TOL\n    TOL = 1e-9\n\n\n_init()", CHECK_TOL, "TOL = 1e9"
    ),
    Constant(
        "computed_from_an_import", "import math\nTOL = math.sqrt(1e-18)", CHECK_TOL, "import math\nTOL = math.inf"
    ),
    Constant("globals_write_by_the_candidate", "TOL = 1e-9", CHECK_TOL, "globals()['TOL'] = 1e9"),
    Constant("globals_write_by_the_prompt", "globals()['TOL'] = 1e-9", CHECK_TOL, "TOL = 1e9"),
    Constant("import_as_the_name", "TOL = 1e-9", CHECK_TOL, "from sys import maxsize as TOL"),
    Constant(
        "prompt_imports_the_name",
        "from sys import maxsize as LIMIT",
        "def check(candidate):\n    assert abs(candidate(3) - 9) <= 1 / LIMIT\n",
        "LIMIT = 1e-9",
    ),
    Constant(
        "class_attribute",
        "class Config:\n    TOL = 1e-9",
        "def check(candidate):\n    assert abs(candidate(3) - 9) <= Config.TOL\n",
        "class Config:\n    TOL = 1e9",
    ),
    Constant(
        "dict_constant",
        "EXPECTED = {2: 4, 3: 9}",
        "def check(candidate):\n    for x, want in EXPECTED.items():\n        assert candidate(x) == want\n",
        "EXPECTED = {1: 0.0}",
    ),
    Constant(
        "tuple_of_cases",
        "CASES = ((2, 4), (3, 9))",
        "def check(candidate):\n    for x, want in CASES:\n        assert candidate(x) == want\n",
        "CASES = ((0, 0.0),)",
    ),
    Constant(
        "deleted_by_the_prompt",
        "LEGACY = 1.0\nTOL = 1e-9\ndel LEGACY",
        "try:\n    LIMIT = LEGACY\nexcept NameError:\n    LIMIT = TOL\n\n\ndef check(candidate):\n"
        "    assert abs(candidate(3) - 9) <= LIMIT\n",
        "LEGACY = 1e9",
    ),
    Constant(
        "star_import",
        "from math import *",
        "def check(candidate):\n    assert abs(candidate(pi) - pi ** 2) < 1e-9\n",
        "pi = 0.0",
    ),
    Constant(
        "for_loop_target",
        "for TOL in (1e-3, 1e-9):\n    pass",
        CHECK_TOL,
        "for TOL in (1e9,):\n    pass",
    ),
    Constant(
        "with_target", "import contextlib\nwith contextlib.nullcontext(1e-9) as TOL:\n    pass", CHECK_TOL, "TOL = 1e9"
    ),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.name) for case in CONSTANTS])
async def test_the_prompts_names_are_never_the_candidates(bwrap_warm: Any, case: Constant) -> None:
    toolchain = bwrap_warm.toolchain
    prompt = _entry(case.prompt) + '    """The square of x."""\n'
    assert langs.prompt_helpers(prompt, "square") == prompt
    hostile = f"{prompt}{case.wrong}\n\n{case.rebind}\n"
    honest = f"{prompt}{case.right}"
    jobs = [
        langs.python_tests_job(toolchain, code, case.tests, entry_point="square", limits=LIMITS, helpers=prompt)
        for code in (hostile, honest)
    ]
    bad, good = await _run_all(bwrap_warm, jobs)
    assert_not_passed(bad)
    assert_passed(good)


async def test_a_prompt_cut_after_the_signature_and_a_judge_without_an_entry_point(bwrap_warm: Any) -> None:
    """A raw code prefix (`def square(x):` for the model to continue, the GRPO reward's prompt) still protects its
    names, and the judge finds the entry point in `check(square)` when the request names none."""
    from veriloop.config import load_settings
    from veriloop.judge.engine import Judge, JudgeCandidate

    prompt = "TOL = 1e-9\n\n\ndef square(x):\n"
    assert langs.prompt_helpers(prompt, "square") == "TOL = 1e-9\n\n\ndef square(x):\n    pass\n"
    assert langs.prompt_helpers("Write a function as follows:", "square") is None
    tests = CHECK_TOL + "\n\ncheck(square)\n"
    hostile, honest = prompt + "    return 0.0\n\n\nTOL = 1e9\n", prompt + "    return x * x\n"
    judge = Judge(load_settings(None), sandbox=bwrap_warm, security=False)
    bad, good = await judge.judge_many(
        [JudgeCandidate(code=code, tests=tests, prompt=prompt) for code in (hostile, honest)]
    )
    assert (bad.status, bad.passed, good.status, good.passed) == ("failed", False, "passed", True), (bad, good)
    asserts = "assert abs(square(3) - 9) <= TOL\n"  # MBPP-style: the prompt's one stub is the entry point
    assert langs.prompt_entry_point(prompt, asserts) == "square"
    bad, good = await judge.judge_many(
        [JudgeCandidate(code=code, tests=asserts, prompt=prompt) for code in (hostile, honest)]
    )
    assert (bad.status, bad.passed, good.status, good.passed) == ("failed", False, "passed", True), (bad, good)


def test_helper_names_cover_every_binding_but_the_entry_point() -> None:
    prompt = (
        "import os.path\nfrom math import pi as PI, tau\nA = 1\nB: int = 2\nC: int\nD, (E, *F) = 1, (2, 3)\nG += 1\n"
        "del H\n(I := 3)\nfor J in []: pass\nwith open('x') as K: pass\ntry: pass\nexcept E as L: pass\n"
        "class M:\n    N = 1\ndef O():\n    global P\n    Q = 1\nif True:\n    R = [S for S in ()]\n"
        "def square(x):\n    return x\nsquare = 3\n"
    )
    names = harness_py.helper_names(prompt, "square")
    assert set("ABCDEFGHIJKLMOPR") | {"os", "PI", "tau"} <= names
    assert "square" not in names and "N" not in names and "Q" not in names
