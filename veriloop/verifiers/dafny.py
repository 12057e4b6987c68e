"""Dafny: `dafny /compile:0 file.dfy`, judged by the exit code and every diagnostic it prints.

Exit codes (Dafny 2.x and 3+ alike): 0 verified, 2 parse/resolution/type errors, 3 compile errors,
4 verification errors. The summary `Dafny program verifier finished with N verified, M errors[, K time outs]`
gives the counts; `FILE(LINE,COL): Error ...: MESSAGE` lines the diagnostics.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.records import Candidate, Diagnostic, Task, VerifyResult, VerifyStatus
from veriloop.sandbox.tools import DEFAULT as DEFAULT_SANDBOX
from veriloop.sandbox.tools import ToolSandbox
from veriloop.verifiers.base import (
    FormalVerifier,
    ReadingVerifier,
    infra_error,
    node_score,
    run_tool,
    tool_sandbox,
    tool_version,
)
from veriloop.verifiers.dafny_dialect import DAFNY
from veriloop.verifiers.target import VerifierTarget

SOURCE = "program.dfy"
VERSION = r"Dafny\s+(\S+)"
"""The version in what `dafny /version` prints (one spelling for the verifier and for a run's provenance)."""

_DIAG = re.compile(
    r"^(?P<file>[^\s()][^()]*?)\((?P<line>\d+),(?P<col>\d+)\):\s*"
    r"(?P<sev>Error|Warning|Related location|Related message|Info|Timed out)(?:\s+(?P<code>[A-Z]{2}\d+))?:?\s*"
    r"(?P<msg>.*)$"
)
_SUMMARY = re.compile(
    r"finished with (?P<v>\d+) verified, (?P<e>\d+) errors?"
    r"(?:, (?P<t>\d+) time outs?)?(?:, (?P<m>\d+) out of memory)?(?:, (?P<i>\d+) inconclusive)?"
)
_FRONT = re.compile(r"(?P<n>\d+) (?P<what>parse|resolution/type) errors? detected in")
_PROVER_NOISE = re.compile(r"^(Prover error: .*unknown parameter.*|Legal parameters are:|  \S+ \(\w[\w ]*\).*)$")

CLASSES: tuple[tuple[str, str], ...] = (
    ("timed out", "timeout"),
    ("time out", "timeout"),
    ("postcondition", "postcondition"),
    ("precondition", "precondition"),
    ("invariant", "invariant"),
    ("decrease", "decreases"),
    ("termination", "decreases"),
    ("assertion", "assertion"),
    ("index out of range", "index"),
    ("division by zero", "division"),
    ("might be null", "null"),
    ("modifies clause", "frame"),
    ("assignment may update", "frame"),
    ("reads clause", "frame"),
    ("insufficient reads", "frame"),
    ("unresolved identifier", "resolution"),
)


def classify(message: str, front: str | None = None) -> str:
    lowered = message.lower()
    for needle, kind in CLASSES:
        if needle in lowered:
            return kind if front is None or kind == "resolution" else front
    return front or "other"


@dataclass
class DafnyReport:
    """Dafny's output, parsed."""

    verified: int
    errors: int
    timeouts: int
    front_errors: int
    front_kind: str | None
    diagnostics: list[Diagnostic]
    summary: bool
    prover_errors: list[str]
    """`Prover error:` lines other than Z3's option noise: the prover gave up (`{:rlimit 1}` ends in `push canceled`
    and a summary of `0 errors`), so nothing was proved."""


def parse_output(text: str) -> DafnyReport:
    """Every diagnostic of a Dafny run (errors, related locations as notes), the summary and front-end counts."""
    front_kind: str | None = None
    front_errors = 0
    for found in _FRONT.finditer(text):
        front_errors += int(found.group("n"))
        front_kind = "parse" if found.group("what") == "parse" else "resolution"
    diagnostics: list[Diagnostic] = []
    prover_errors: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if _PROVER_NOISE.match(line):
            continue
        if line.startswith("Prover error:"):
            prover_errors.append(line)
            continue
        match = _DIAG.match(line)
        if not match:
            continue
        sev, message = match.group("sev"), match.group("msg").strip()
        if sev in ("Related location", "Related message"):
            kind = diagnostics[-1].kind if diagnostics else classify(message)
            diagnostics.append(_diag("note", kind, f"{sev}: {message}", match))
        elif sev == "Warning":
            diagnostics.append(_diag("warning", "warning", message, match))
        elif sev == "Info":
            continue
        elif sev == "Timed out":
            diagnostics.append(_diag("error", "timeout", message or "verification timed out", match))
        else:
            diagnostics.append(_diag("error", classify(message, front_kind), message, match))
    summary = _SUMMARY.search(text)
    verified = int(summary.group("v")) if summary else 0
    errors = int(summary.group("e")) if summary else 0
    timeouts = int(summary.group("t") or 0) if summary else 0
    if summary and timeouts and not any(d.kind == "timeout" for d in diagnostics):
        diagnostics.append(Diagnostic(severity="error", kind="timeout", message=f"{timeouts} verification time outs"))
    if prover_errors:
        diagnostics.append(Diagnostic(severity="error", kind="prover", message=prover_errors[0]))
    return DafnyReport(
        verified, errors, timeouts, front_errors, front_kind, diagnostics, summary is not None, prover_errors
    )


def dafny_version(command: str, cache_dir: Path | None = None) -> str:
    """The version `command` reports, memoised per binary ('' when it does not run)."""
    return tool_version(command, ["/version"], VERSION, cache_dir)


def _diag(severity: Any, kind: str, message: str, match: re.Match[str]) -> Diagnostic:
    code = match.group("code")
    return Diagnostic(
        severity=severity,
        kind=kind,
        message=f"{code}: {message}" if code else message,
        line=int(match.group("line")),
        column=int(match.group("col")),
        file=match.group("file"),
    )


def judge(returncode: int | None, timed_out: bool, text: str) -> tuple[VerifyStatus, DafnyReport, str | None]:
    """Status from the exit code first, the parsed output second."""
    report = parse_output(text)
    if timed_out:
        return VerifyStatus.TIMEOUT, report, "the verifier ran past its time limit"
    if report.front_errors or returncode == 2:
        return VerifyStatus.SYNTAX_ERROR, report, None
    if report.errors or returncode in (3, 4):
        if report.errors == 0 and report.timeouts:
            return VerifyStatus.TIMEOUT, report, "the solver timed out"
        return VerifyStatus.FAILED, report, None
    if report.timeouts:
        return VerifyStatus.TIMEOUT, report, "the solver timed out"
    if report.prover_errors:
        return VerifyStatus.FAILED, report, f"the prover gave up: {report.prover_errors[0][:200]}"
    if returncode == 0 and report.summary:
        return VerifyStatus.VERIFIED, report, None
    return VerifyStatus.INFRA_ERROR, report, f"dafny exited with {returncode} and no summary: {text.strip()[-300:]}"


TARGET = VerifierTarget(
    "dafny",
    language="dafny",
    title="Dafny",
    fence="dafny",
    dialect=DAFNY,
    ensures=r"\bensures\b",
    declarations=r"^\s*(method|function|predicate|lemma|class|datatype|module|ghost|include|const)\b",
    exploit_kinds=("method",),
    exploit_example=("method Id(x: int) returns (r: int)\n  ensures r == r\n{", "  r := 0;\n}"),
    suite="dafnybench-hints",
    solve_mode="hints",
)


class DafnyVerifier:
    """Runs the Dafny CLI once per candidate (Debian's 2.3 here; the sandbox image carries a current one)."""

    name = "dafny"
    target = TARGET

    def __init__(
        self,
        command: str = "dafny",
        *,
        timeout_s: float = 60.0,
        time_limit_s: int = 20,
        cache_dir: Path | None = None,
        sandbox: ToolSandbox | None = DEFAULT_SANDBOX,
    ) -> None:
        self.command = command
        self.sandbox = sandbox
        self.cache_dir = cache_dir
        self.timeout_s = timeout_s
        self.time_limit_s = time_limit_s
        self._version: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> DafnyVerifier:
        section = settings.verifiers
        return cls(
            section.dafny,
            timeout_s=section.timeout_s,
            time_limit_s=section.dafny_time_limit_s,
            cache_dir=settings.paths.cache_dir,
            sandbox=tool_sandbox(settings),
        )

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return dafny_version(settings.verifiers.dafny, settings.paths.cache_dir)

    def options(self) -> dict[str, Any]:
        return {"time_limit_s": self.time_limit_s, "timeout_s": self.timeout_s}

    def argv(self) -> list[str]:
        argv = [self.command, "/compile:0", "/nologo", "/errorTrace:0"]
        if self.time_limit_s:
            argv.append(f"/timeLimit:{self.time_limit_s}")
        return [*argv, SOURCE]

    async def version(self) -> str:
        async with self._lock:
            if not self._version:
                self._version = await asyncio.to_thread(dafny_version, self.command, self.cache_dir)
            return self._version

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await self.check(candidate.code)

    async def check(self, code: str) -> VerifyResult:
        version = await self.version()
        if not version:
            return infra_error(self.name, "", f"{self.command} is not installed or does not run")
        run = await asyncio.to_thread(
            run_tool, self.argv(), {SOURCE: code}, timeout_s=self.timeout_s, sandbox=self.sandbox
        )
        if run.returncode is None and not run.timed_out:
            return infra_error(self.name, version, run.stderr, run.wall_s)
        status, report, reason = judge(run.returncode, run.timed_out, run.output)
        errors = report.errors + report.front_errors
        n_err = sum(d.severity == "error" for d in report.diagnostics)
        n_note = sum(d.severity == "note" for d in report.diagnostics)
        return VerifyResult(
            status=status,
            verified=report.verified,
            errors=errors,
            diagnostics=report.diagnostics,
            score=node_score(status, report.verified, errors, n_err, n_note),
            tool=self.name,
            version=version,
            duration_s=run.wall_s,
            reason=reason,
            cpu_s=run.cpu_s,
            max_rss_mb=run.max_rss_mb,
        )

    def reading_argv(self) -> list[str]:
        return [self.command, "/dprint:-", "/noResolve", "/nologo", SOURCE]

    async def parsed(self, code: str) -> str | None:
        """The program as Dafny's own parser read it (`/dprint`, no resolution, about 0.3 s): comments gone, every
        declaration, clause, statement and attribute printed. The guard looks for escapes in it after a `verified`,
        so a program its lexer reads otherwise than Dafny cannot pass. None where Dafny does not print it."""
        if not await self.version():
            return None
        run = await asyncio.to_thread(
            run_tool, self.reading_argv(), {SOURCE: code}, timeout_s=self.timeout_s, sandbox=self.sandbox
        )
        if run.returncode != 0 or run.timed_out:
            return None
        return run.stdout

    async def aclose(self) -> None:
        return None


_CHECKED: type[FormalVerifier] = DafnyVerifier
"""mypy checks here that the class has every member of the protocols the guard and the registry use."""
_READS: type[ReadingVerifier] = DafnyVerifier
