"""The `tests` verifier: the task's tests run against the candidate in the sandbox; the ExecResult decides.

Python tasks use assert-style tests (HumanEval `check(candidate)`, MBPP asserts); other languages paste the
candidate into the task's harness program. Each test case is one `verified` or `errors` count.
"""

from __future__ import annotations

import asyncio
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Candidate, Diagnostic, ExecResult, ExecStatus, Task, VerifyResult, VerifyStatus
from veriloop.sandbox import Sandbox, default_limits, get_sandbox
from veriloop.sandbox.job import Limits
from veriloop.sandbox.languages import harness_job, prompt_helpers, python_tests_job
from veriloop.verifiers.base import RegisteredVerifier, infra_error, node_score
from veriloop.verifiers.target import VerifierTarget

STATUS = {
    ExecStatus.PASSED: VerifyStatus.VERIFIED,
    ExecStatus.FAILED: VerifyStatus.FAILED,
    ExecStatus.RUNTIME_ERROR: VerifyStatus.FAILED,
    ExecStatus.MEMORY_LIMIT: VerifyStatus.FAILED,
    ExecStatus.OUTPUT_LIMIT: VerifyStatus.FAILED,
    ExecStatus.COMPILE_ERROR: VerifyStatus.SYNTAX_ERROR,
    ExecStatus.TIMEOUT: VerifyStatus.TIMEOUT,
    ExecStatus.INFRA_ERROR: VerifyStatus.INFRA_ERROR,
}


def result_from_exec(result: ExecResult) -> VerifyResult:
    """Map an ExecResult onto the verifier vocabulary: one diagnostic per failed test. A run that says `passed` with
    no test outcome is not verified: zero tests are no evidence (an infra error, like a task without tests)."""
    if result.status is ExecStatus.PASSED and not result.tests:
        message = f"{result.stderr}\nthe tests ran no test, so they say nothing of the program".lstrip("\n")
        result = result.model_copy(update={"status": ExecStatus.INFRA_ERROR, "stderr": message})
    status = STATUS[result.status]
    passed = sum(test.passed for test in result.tests)
    failed = len(result.tests) - passed
    if not result.tests:
        passed, failed = (1, 0) if status is VerifyStatus.VERIFIED else (0, 1)
    diagnostics = [
        Diagnostic(severity="error", kind="test", message=f"{test.name}: {test.message}".strip(": "))
        for test in result.tests
        if not test.passed
    ]
    if status is not VerifyStatus.VERIFIED and not diagnostics:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        kind = "syntax" if status is VerifyStatus.SYNTAX_ERROR else result.status.value
        diagnostics.append(Diagnostic(severity="error", kind=kind, message="\n".join(tail) or result.status.value))
    return VerifyResult(
        status=status,
        verified=passed,
        errors=failed,
        diagnostics=diagnostics,
        score=node_score(status, passed, failed) if status is not VerifyStatus.FAILED else passed / (passed + failed),
        tool="tests",
        version=f"{result.sandbox} {result.sandbox_version}".strip(),
        duration_s=result.wall_s,
        reason=None if status is not VerifyStatus.INFRA_ERROR else (result.stderr.strip()[-300:] or None),
    )


class TestsVerifier:
    """Runs the task's tests in a sandbox (bubblewrap by default)."""

    __test__ = False  # not a pytest class
    name = "tests"
    target = VerifierTarget("tests", title="tests")

    def __init__(self, sandbox: Sandbox, limits: Limits | None = None) -> None:
        self.sandbox = sandbox
        self.limits = limits or Limits()
        self._ready = False
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> TestsVerifier:
        return cls(get_sandbox(settings), default_limits(settings))

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return settings.sandbox.backend  # what `version()` says: the sandbox the tests run in

    def options(self) -> dict[str, Any]:
        return {"limits": self.limits.model_dump(mode="json")}

    async def version(self) -> str:
        return self.sandbox.name

    async def _prepare(self) -> None:
        async with self._lock:
            if not self._ready:
                prepare = getattr(self.sandbox, "prepare", None)
                if prepare is not None:
                    await prepare()
                self._ready = True

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        if not task.tests.strip():
            return infra_error(self.name, self.sandbox.name, f"task {task.id} has no tests")
        await self._prepare()
        toolchain = self.sandbox.toolchain
        try:
            if candidate.language == "python":
                job = python_tests_job(
                    toolchain,
                    candidate.code,
                    task.tests,
                    entry_point=task.entry_point,
                    limits=self.limits,
                    helpers=prompt_helpers(task.prompt, task.entry_point),
                )
            else:
                job = harness_job(candidate.language, toolchain, candidate.code, task.tests, limits=self.limits)
        except ConfigError as exc:
            return infra_error(self.name, self.sandbox.name, str(exc))
        return result_from_exec(await self.sandbox.run(job))

    async def aclose(self) -> None:
        await self.sandbox.aclose()


_CHECKED: type[RegisteredVerifier] = TestsVerifier
"""mypy checks here that the class has every member of the protocol the registry uses."""
