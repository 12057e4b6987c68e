"""Judging a finished job's output into per-test outcomes and a status (tests run; the program did not crash).

Only channels the candidate cannot write are read for verdicts: the Python judge's verdict pipe (`results`, see
harness_py), the trusted side of a split test program (steps marked `trusted`, see split/), or the host's own
comparison of stdout for stdin/stdout cases. A test program that cannot be split is judged from its own output, which
the candidate shares, only where its caller asked for that (`harness_job(..., trust_program_output=True)`): see
docs/sandbox.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

from veriloop.records import ExecResult, ExecStatus, TestOutcome
from veriloop.sandbox.job import Job

RESULT_LINE = re.compile(r"^VERILOOP-TEST\s+(\S+)\s+(PASS|FAIL)\b ?(.*)$")
TRANSCODER = re.compile(r"^#Results:\s*(\d+)\s*,\s*(\d+)\s*$")


def normalise(text: str) -> str:
    """Compare outputs line by line, ignoring trailing whitespace and trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).rstrip()


def judge(job: Job, steps: list[dict[str, Any]], results: str | None, result: ExecResult) -> None:
    """Fill `result.tests` and set `result.status` for a job with checks (no limit was hit, nothing failed to build)."""
    assert job.checks is not None
    kind = job.checks.kind
    if kind == "stdio":
        _judge_stdio(job, steps, result)
    elif kind == "python_asserts":
        _judge_python(job, _judge_step(steps), results, result)
    elif any(step.judge for step in job.steps):  # a Python test program run by the judge
        _judge_python_program(_judge_step(steps), results, result)
    elif job.trusted is not None:
        _judge_split(steps, result)
    else:
        _judge_harness(steps[-1], result)


def _judge_step(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return next((step for step in steps if step.get("results") is not None), steps[-1])


def _judge_stdio(job: Job, steps: list[dict[str, Any]], result: ExecResult) -> None:
    assert job.checks is not None
    if not job.checks.cases:  # stdio_job refuses this; a job built by hand gets no verdict either
        result.status = ExecStatus.INFRA_ERROR
        result.stderr += "\nno stdin/stdout cases: nothing was compared"
        return
    runs = [step for step in steps if step["kind"] == "run"]
    crashed = False
    for case, step in zip(job.checks.cases, runs, strict=False):
        if step["exit_code"] != 0:
            crashed = True
            what = f"signal {step['signal']}" if step["signal"] else f"exit code {step['exit_code']}"
            result.tests.append(TestOutcome(name=case.name, passed=False, message=f"{what}: {step['stderr'][-2000:]}"))
        elif normalise(step["stdout"]) == normalise(case.expected):
            result.tests.append(TestOutcome(name=case.name, passed=True))
        else:
            message = f"expected {case.expected[:500]!r}, got {step['stdout'][:500]!r}"
            result.tests.append(TestOutcome(name=case.name, passed=False, message=message))
    if crashed:
        result.status = ExecStatus.RUNTIME_ERROR
    elif len(result.tests) < len(job.checks.cases) or not all(t.passed for t in result.tests):
        result.status = ExecStatus.FAILED
    else:
        result.status = ExecStatus.PASSED


def _judge_python(job: Job, step: dict[str, Any], results: str | None, result: ExecResult) -> None:
    """The judge's verdict records. A run that reported no test, or whose tests never called the program, is an
    infra error whatever else it says: it could not judge the program (never `passed`, nor a failure of it)."""
    assert job.checks is not None
    complete = False
    no_tests = ""
    for item in _json_lines(results or ""):
        if "name" in item:
            name, message = str(item.get("name", "?")), str(item.get("message", ""))
            result.tests.append(TestOutcome(name=name, passed=item.get("passed") is True, message=message))
        elif item.get("complete") is True:
            complete = True
        elif "no_tests" in item:
            no_tests = str(item["no_tests"])[:2000]
    if complete and (not result.tests or no_tests):
        result.tests = []  # outcomes that say nothing of the program are not a pass rate either
        result.status = ExecStatus.INFRA_ERROR
        result.stderr += f"\nthe tests ran no test, so they say nothing of the program: {no_tests or 'no assert ran'}"
        return
    if not complete:
        # The solution crashed before or between tests (its traceback is in stderr), or exited early.
        if step["exit_code"] != 0:
            result.status = ExecStatus.RUNTIME_ERROR
        else:
            result.status = ExecStatus.FAILED
            result.stderr += "\nthe program exited before its tests finished"
        return
    expected = job.checks.expected_tests
    if expected is not None and len(result.tests) != expected:
        result.status = ExecStatus.FAILED
        result.stderr += f"\nthe harness reported {len(result.tests)} of {expected} tests"
    elif all(t.passed for t in result.tests) and step["exit_code"] == 0:
        result.status = ExecStatus.PASSED
    else:
        result.status = ExecStatus.FAILED


def _json_lines(text: str) -> list[dict[str, Any]]:
    """The harness's results file: one JSON object per line (a torn last line is ignored)."""
    records = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def _judge_python_program(step: dict[str, Any], results: str | None, result: ExecResult) -> None:
    """A Python test program run by the judge: what it printed is in the verdict records, not in stdout."""
    records = _json_lines(results or "")
    printed = "".join(str(item.get("stdout", "")) for item in records if "stdout" in item)
    complete = any(item.get("complete") is True for item in records)
    if not complete:
        result.status = ExecStatus.RUNTIME_ERROR if step["exit_code"] != 0 else ExecStatus.FAILED
        if step["exit_code"] == 0:
            result.stderr += "\nthe program exited before its tests finished"
        return
    _judge_lines(printed, 0, result)


def _judge_split(steps: list[dict[str, Any]], result: ExecResult) -> None:
    """A split test program: the verdict is the trusted side's output; the candidate side only recorded values."""
    from veriloop.sandbox.split import BAD_VALUE_EXIT

    trusted = [step for step in steps if step.get("trusted")]
    if not trusted:  # the candidate's side did not finish (it crashed): the trusted side never ran
        ran = [step for step in steps if step["kind"] == "run"]
        result.status = ExecStatus.RUNTIME_ERROR if ran and ran[-1]["exit_code"] != 0 else ExecStatus.FAILED
        return
    last = trusted[-1]
    result.stdout, result.stderr = last.get("stdout", ""), last.get("stderr", "")
    result.exit_code, result.signal = last.get("exit_code"), last.get("signal")
    if last["exit_code"] == BAD_VALUE_EXIT:
        result.status = ExecStatus.FAILED
        result.tests.append(TestOutcome(name="values", passed=False, message=last.get("stderr", "")[-2000:]))
        return
    _judge_lines(last["stdout"], last["exit_code"], result)


def _judge_harness(step: dict[str, Any], result: ExecResult) -> None:
    _judge_lines(step["stdout"], step["exit_code"], result)


def _judge_lines(text: str, exit_code: int | None, result: ExecResult) -> None:
    """`VERILOOP-TEST name PASS|FAIL` lines, or TransCoder's `#Results: passed, total`, from a trusted output."""
    totals: tuple[int, int] | None = None
    for line in text.splitlines():
        line = line.strip()
        match = RESULT_LINE.match(line)
        if match:
            result.tests.append(TestOutcome(name=match[1], passed=match[2] == "PASS", message=match[3]))
            continue
        found = TRANSCODER.match(line)
        if found:
            totals = (int(found[1]), int(found[2]))
    if totals is not None and not result.tests:
        passed, total = totals
        result.tests = [TestOutcome(name=f"case_{i + 1}", passed=i < passed) for i in range(total)]
    if exit_code != 0:
        result.status = ExecStatus.RUNTIME_ERROR
    elif not result.tests:
        result.status = ExecStatus.FAILED
        result.stderr += "\nthe harness reported no test results"
    elif all(t.passed for t in result.tests):
        result.status = ExecStatus.PASSED
    else:
        result.status = ExecStatus.FAILED
