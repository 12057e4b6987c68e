"""The judge: verdicts and scalar rewards for candidates sent from outside (an RL trainer's rollouts).

Each candidate carries its own checks (assert tests, stdin/stdout cases or a harness; a spec and a formal
verifier) or names a stored task. Verdicts come from the same trusted helpers `veriloop exec --tests` and the
agents use (`sandbox.languages` jobs run by the configured sandbox; `verifiers.get_verifier` with the spec
guard always on), so the judge serves whatever those judge. What the judge adds:

- a scalar reward per verdict: all tests pass (1/0) or the pass rate; for formal verifiers, optionally
  AlphaVerus's node score as partial credit; `infra_error` gives `None` (no signal), never 0, because a
  broken or overloaded sandbox says nothing about the candidate;
- bandit's security findings per Python candidate, with an optional reward penalty per finding;
- bounded work: at most `concurrency` candidates run at once; one that waits longer than
  `queue_timeout_s` for a slot is answered `infra_error` (overloaded), not `failed`.

The service (`service/judge.py`) adds HTTP, per-token limits, jobs and storage on top; the GRPO reward
function uses this in-process or through `veriloop.judge.client` remotely.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator
from pydantic.config import JsonDict

from veriloop.config import Settings
from veriloop.errors import ConfigError, VeriloopError
from veriloop.judge.security import Finding, Severity, counted, scan_python
from veriloop.records import (
    Candidate,
    ExecResult,
    ExecStatus,
    Task,
    TestOutcome,
    VerifyResult,
    VerifyStatus,
)
from veriloop.sandbox import Limits, Sandbox, StdioCase, default_limits, get_sandbox
from veriloop.sandbox import languages as langs
from veriloop.search.score import alphaverus_score
from veriloop.tasks.base import SUITE_NAME
from veriloop.verifiers.target import VerifierChoice, formal_verifiers, proof_verifier

MAX_CODE = 200_000
"""Characters of code, tests or spec per candidate at most."""
SUITE_PREFIXES = {"HumanEval/": "humaneval", "MBPP/": "mbpp"}
"""Where a bare `task_id` is looked up when the candidate names no suite."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StdioTest(Strict):
    """One stdin/stdout case: the program's stdout must equal `expected` (trailing whitespace ignored)."""

    name: str | None = Field(None, max_length=200)
    stdin: str = Field("", max_length=MAX_CODE)
    expected: str = Field(max_length=MAX_CODE)


class JudgeLimits(Strict):
    """Per-candidate limits; the server's defaults fill what is left out and cap what is asked."""

    wall_s: float | None = Field(None, gt=0, le=60, description="Wall-clock seconds per run step.")
    memory_mb: int | None = Field(None, ge=32, le=4096, description="Memory of the whole job, in MiB.")


def _tests_kind(value: Any) -> str:
    return "program" if isinstance(value, str) else "cases"


Tests = Annotated[
    Annotated[Annotated[str, Field(max_length=MAX_CODE)], Tag("program")]
    | Annotated[Annotated[list[StdioTest], Field(min_length=1, max_length=1000)], Tag("cases")],
    Discriminator(_tests_kind),
]
"""A test program (assert tests or a harness) or 1 to 1000 stdin/stdout cases."""
NULL: JsonDict = {"type": "null"}
ONE_JUDGE: JsonDict = {
    "oneOf": [
        {
            "required": ["tests"],
            "properties": {"tests": {"not": NULL}, "spec": NULL, "verifier": NULL, "task_id": NULL},
        },
        {
            "required": ["spec", "verifier"],
            "properties": {"spec": {"type": "string"}, "verifier": {"type": "string"}, "tests": NULL, "task_id": NULL},
        },
        {"required": ["task_id"], "properties": {"task_id": {"type": "string"}, "tests": NULL, "spec": NULL}},
    ]
}
"""The JSON schema of `JudgeCandidate._one_judge`: tests, or spec with verifier, or task_id (the others null)."""


class JudgeCandidate(Strict):
    """A program and what judges it: `tests`, or `spec` + `verifier`, or a stored `task_id`."""

    model_config = ConfigDict(json_schema_extra=ONE_JUDGE)

    language: str = Field("python", max_length=32, description="python, c, cpp, java, javascript, rust, go, dafny.")
    code: str = Field(max_length=MAX_CODE, description="The candidate program.")
    tests: Tests | None = Field(
        None,
        description="Python: assert tests (HumanEval check(candidate), MBPP asserts); other languages: a harness "
        "program; a list: 1 to 1000 stdin/stdout cases.",
    )
    spec: str | None = Field(None, max_length=MAX_CODE, description="Formal specification the candidate must keep.")
    verifier: VerifierChoice = Field(None, description="Formal verifier for `spec` (dafny, nagini, verus, ...).")
    task_id: str | None = Field(None, max_length=200, description="A task of a registered suite.")
    suite: str | None = Field(
        None,
        max_length=100,
        pattern=SUITE_NAME,
        description="Suite of `task_id` (inferred for HumanEval/MBPP); no `hf:` dataset or `module:attr` path.",
    )
    entry_point: str | None = Field(None, max_length=200, description="Function the Python tests call.")
    prompt: str | None = Field(None, max_length=MAX_CODE, description="What the model was asked (kept with store).")
    limits: JudgeLimits | None = None

    @model_validator(mode="after")
    def _one_judge(self) -> JudgeCandidate:
        given = [self.tests is not None, self.spec is not None, self.task_id is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of tests, spec (with verifier) or task_id")
        if self.spec is not None and self.verifier is None:
            raise ValueError(f"spec needs a verifier: {', '.join(formal_verifiers())}")
        if self.verifier is not None and self.tests is not None:
            raise ValueError("tests are run, not verified: drop verifier")
        return self


class RewardOptions(Strict):
    """How a verdict becomes a scalar reward."""

    mode: Literal["all_pass", "pass_rate"] = Field(
        "all_pass", description="all_pass: 1 when every test passes, else 0; pass_rate: the share of tests passed."
    )
    partial_credit: bool = Field(
        False, description="Formal verifiers: AlphaVerus's node score (v/(v+e) less error penalties; -1 rejected)."
    )
    security_weight: float = Field(0.0, ge=0, le=10, description="Subtracted from the reward per security finding.")
    security_min_severity: Severity = Field("medium", description="Findings below this severity are not penalised.")


class Verdict(Strict):
    """One candidate's verdict: status, scalar reward, per-test outcomes and the full result it came from."""

    index: int = Field(description="Position of the candidate in the request.")
    kind: Literal["tests", "verify"]
    status: str = Field(description="ExecResult status (passed, failed, ...) or VerifyResult status (verified, ...).")
    passed: bool = Field(description="passed or verified.")
    reward: float | None = Field(description="Scalar reward; null for infra_error (no signal about the candidate).")
    pass_rate: float | None = Field(None, description="Tests passed / tests run (tests only).")
    tests: list[TestOutcome] = Field(default_factory=list)
    execution: ExecResult | None = None
    verification: VerifyResult | None = None
    security: list[Finding] = Field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = Field(None, description="Why the judge could not judge (infra_error only).")


# --------------------------------------------------------------------------- rewards


def without_evidence(result: ExecResult) -> ExecResult:
    """A test run's result, or an infra error where it says `passed` with no test outcome: zero tests passed of zero
    say nothing of the program (the sandbox's checks never report that; this keeps any other path from doing so)."""
    if result.status is not ExecStatus.PASSED or result.tests:
        return result
    message = f"{result.stderr}\nthe tests ran no test, so they say nothing of the program".lstrip("\n")
    return result.model_copy(update={"status": ExecStatus.INFRA_ERROR, "stderr": message})


def exec_reward(result: ExecResult, options: RewardOptions) -> tuple[float | None, float | None]:
    """(reward, pass rate) of a test run; infra errors give (None, None)."""
    if result.status is ExecStatus.INFRA_ERROR:
        return None, None
    total, good = len(result.tests), sum(t.passed for t in result.tests)
    rate = good / total if total else (1.0 if result.passed else 0.0)
    if not result.passed and rate >= 1.0:
        rate = good / (good + 1)  # every reported test passed, yet the run failed: count one unreported failure
    if options.mode == "pass_rate":
        return rate, rate
    return (1.0 if result.passed else 0.0), rate


def verify_reward(result: VerifyResult, options: RewardOptions) -> float | None:
    """1 verified, else 0 (or AlphaVerus's node score with partial credit); infra errors give None."""
    if result.status is VerifyStatus.INFRA_ERROR:
        return None
    if result.status is VerifyStatus.VERIFIED:
        return 1.0
    return alphaverus_score(result) if options.partial_credit else 0.0


def _runnable(language: str) -> bool:
    """A language the sandbox runs with tests (`sandbox.languages`)."""
    try:
        langs.language(language)
    except ConfigError:
        return False
    return True


def penalised(reward: float | None, findings: list[Finding], options: RewardOptions) -> float | None:
    if reward is None or not options.security_weight:
        return reward
    return reward - options.security_weight * counted(findings, options.security_min_severity)


# --------------------------------------------------------------------------- the judge


VerdictHook = Callable[[Verdict], Awaitable[None] | None]


class Judge:
    """Judges candidates with the configured sandbox and verifiers; never raises for what a candidate holds."""

    def __init__(
        self,
        settings: Settings,
        *,
        sandbox: Sandbox | None = None,
        concurrency: int | None = None,
        queue_timeout_s: float = 60.0,
        security: bool = True,
    ) -> None:
        self.settings = settings
        self._sandbox = sandbox
        self.concurrency = concurrency or max(1, settings.sandbox.warm_workers)
        self.queue_timeout_s = queue_timeout_s
        self.security = security
        self._slots = asyncio.Semaphore(self.concurrency)
        self._limits = default_limits(settings)
        self._verifiers: dict[str, Any] = {}
        self._tasks: dict[tuple[str, str], Task] = {}
        self._ready = False
        self._prepare_lock = asyncio.Lock()
        self.in_flight = 0

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox, built on first use (a sandbox that cannot even start gives infra_error verdicts)."""
        if self._sandbox is None:
            self._sandbox = get_sandbox(self.settings)
        return self._sandbox

    async def start(self) -> None:
        """Start the sandbox's warm workers before the first candidate (otherwise they start on demand)."""
        async with self._prepare_lock:
            if self._ready:
                return
            for name in ("start_warm", "prepare"):
                method = getattr(self.sandbox, name, None)
                if method is not None:
                    await method()
                    break
            self._ready = True

    async def aclose(self) -> None:
        for verifier in self._verifiers.values():
            await verifier.aclose()
        self._verifiers.clear()
        if self._sandbox is not None:
            await self._sandbox.aclose()

    # ----------------------------------------------------------------------- public

    async def judge_many(
        self,
        candidates: Sequence[JudgeCandidate],
        options: RewardOptions | None = None,
        on_verdict: VerdictHook | None = None,
        security: bool | None = None,
    ) -> list[Verdict]:
        """Verdicts in the candidates' order; cancelling this cancels (and kills) the work still running."""
        options = options or RewardOptions()

        async def one(index: int, candidate: JudgeCandidate) -> Verdict:
            verdict = await self.judge(candidate, index, options, security)
            if on_verdict is not None:
                maybe = on_verdict(verdict)
                if maybe is not None:
                    await maybe
            return verdict

        return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(candidates))))

    async def judge(
        self,
        candidate: JudgeCandidate,
        index: int = 0,
        options: RewardOptions | None = None,
        security: bool | None = None,
    ) -> Verdict:
        """One verdict; `security` (default: the judge's setting) runs bandit on Python candidates."""
        options = options or RewardOptions()
        security = self.security if security is None else security
        started = time.monotonic()
        kind: Literal["tests", "verify"] = "verify" if self._formal(candidate) else "tests"
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            return self._infra(index, kind, started, f"overloaded: no sandbox slot within {self.queue_timeout_s:g} s")
        self.in_flight += 1
        try:
            await self.start()
            scan = asyncio.ensure_future(self._scan(candidate, security))  # overlaps the sandbox run
            try:
                if kind == "verify":
                    verdict = await self._verify(candidate, index, options)
                else:
                    verdict = await self._run(candidate, index, options)
            finally:
                findings = await scan
            verdict.security = findings
            verdict.reward = penalised(verdict.reward, findings, options)
        except (VeriloopError, ValueError) as exc:
            return self._infra(index, kind, started, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a judge bug must not become a verdict about the candidate
            return self._infra(index, kind, started, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.in_flight -= 1
            self._slots.release()
        verdict.duration_s = round(time.monotonic() - started, 4)
        return verdict

    # ----------------------------------------------------------------------- parts

    def _formal(self, candidate: JudgeCandidate) -> bool:
        """Verified, not tested: a verifier or spec is named, or the language is one no sandbox runs but a formal
        verifier proves (Dafny's: a stored Dafny task is proved; Nagini's Python and Verus's Rust are run)."""
        if candidate.verifier is not None or candidate.spec is not None:
            return True
        return not _runnable(candidate.language) and proof_verifier(candidate.language) is not None

    @staticmethod
    def _infra(index: int, kind: Literal["tests", "verify"], started: float, message: str) -> Verdict:
        return Verdict(
            index=index,
            kind=kind,
            status="infra_error",
            passed=False,
            reward=None,
            error=message,
            duration_s=round(time.monotonic() - started, 4),
        )

    async def _scan(self, candidate: JudgeCandidate, security: bool) -> list[Finding]:
        if not security or candidate.language != "python":
            return []
        return await asyncio.to_thread(scan_python, candidate.code)

    def _limits_for(self, candidate: JudgeCandidate) -> Limits:
        asked = candidate.limits
        if asked is None:
            return self._limits
        update: dict[str, Any] = {}
        if asked.wall_s is not None:
            update["wall_s"] = min(asked.wall_s, self._limits.wall_s * 6)
        if asked.memory_mb is not None:
            update["memory_mb"] = asked.memory_mb
        return self._limits.model_copy(update=update)

    def task_of(self, candidate: JudgeCandidate) -> Task:
        """The stored task a candidate names (suites load once per judge)."""
        assert candidate.task_id is not None
        suite = candidate.suite or next(
            (name for prefix, name in SUITE_PREFIXES.items() if candidate.task_id.startswith(prefix)), None
        )
        if suite is None:
            raise ConfigError(f"task {candidate.task_id!r}: name its suite")
        key = (suite, candidate.task_id)
        if key not in self._tasks:
            from veriloop.tasks import load_suite

            for task in load_suite(suite, self.settings).tasks:
                self._tasks[(suite, task.id)] = task
            if key not in self._tasks:
                raise ConfigError(f"suite {suite} has no task {candidate.task_id!r}")
        return self._tasks[key]

    def job_for(self, candidate: JudgeCandidate) -> Any:
        """The sandbox job, built by the same helpers as `veriloop exec --tests`."""
        toolchain = self.sandbox.toolchain
        limits = self._limits_for(candidate)
        tests, entry = candidate.tests, candidate.entry_point
        if isinstance(tests, str):  # `check(f)` or the prompt's stub names it: then the prompt's names are protected
            entry = langs.tests_entry_point(tests, entry)
            if entry is None and candidate.prompt:
                entry = langs.prompt_entry_point(candidate.prompt, tests)
        helpers = langs.prompt_helpers(candidate.prompt, entry) if candidate.prompt else None
        if candidate.task_id is not None:
            task = self.task_of(candidate)
            tests, entry = task.tests, entry or task.entry_point
            helpers = langs.prompt_helpers(task.prompt, entry)
        lang = langs.language(candidate.language).name
        if isinstance(tests, list):
            cases = [
                StdioCase(name=t.name or f"case_{i + 1}", stdin=t.stdin, expected=t.expected)
                for i, t in enumerate(tests)
            ]
            return langs.stdio_job(lang, toolchain, candidate.code, cases, limits=limits)
        if not tests or not tests.strip():
            raise ConfigError("the candidate's task has no tests")
        if lang == "python":
            return langs.python_tests_job(
                toolchain, candidate.code, tests, entry_point=entry, limits=limits, helpers=helpers
            )
        return langs.harness_job(lang, toolchain, candidate.code, tests, limits=limits)

    async def _run(self, candidate: JudgeCandidate, index: int, options: RewardOptions) -> Verdict:
        job = self.job_for(candidate)
        result = without_evidence(await self.sandbox.run(job))
        reward, rate = exec_reward(result, options)
        return Verdict(
            index=index,
            kind="tests",
            status=result.status.value,
            passed=result.passed,
            reward=reward,
            pass_rate=rate,
            tests=result.tests,
            execution=result,
            error=result.stderr.strip()[-500:] or None if result.status is ExecStatus.INFRA_ERROR else None,
        )

    def _verifier(self, name: str) -> Any:
        if name not in self._verifiers:
            from veriloop.verifiers import get_verifier

            self._verifiers[name] = get_verifier(self.settings, name, guard=True, cache=False)
        return self._verifiers[name]

    async def _verify(self, candidate: JudgeCandidate, index: int, options: RewardOptions) -> Verdict:
        if candidate.task_id is not None:
            task = self.task_of(candidate)
            name = candidate.verifier or str(task.metadata.get("verifier") or "")
        else:
            task = Task(
                id="judge",
                suite="judge",
                prompt=candidate.prompt or "",
                language=candidate.language,
                entry_point=candidate.entry_point,
                spec=candidate.spec,
            )
            name = candidate.verifier or candidate.language
        formal = formal_verifiers()
        name = name if name in formal else (proof_verifier(name) or "")
        if name not in formal:
            raise ConfigError(f"no formal verifier for {candidate.language!r}; name one of {', '.join(formal)}")
        result: VerifyResult = await self._verifier(name).verify(
            Candidate(task_id=task.id, code=candidate.code, language=candidate.language), task
        )
        return Verdict(
            index=index,
            kind="verify",
            status=result.status.value,
            passed=result.status is VerifyStatus.VERIFIED,
            reward=verify_reward(result, options),
            verification=result,
            error=result.reason if result.status is VerifyStatus.INFRA_ERROR else None,
        )
