"""Verus: `verus FILE --multiple-errors N [--output-json]`, its summary, its error/note blocks, and the node score.

Two output formats are read (Verus's own; AlphaVerus's `verus_utils.py` parses the first the same way): the plain one,
where stdout carries `verification results:: N verified, M errors` and stderr rustc-style blocks (`error: TITLE`,
`  --> file:l:c`, `   |` message lines), and the JSON one (`--output-json`), where stdout is one JSON object with
`verification-results.{verified,errors,success}`. The score is AlphaVerus's: v/(v+e) minus 0.1 per error block (the
final `aborting due to` block excluded) and 0.04 per note, over v+e.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.records import Candidate, Diagnostic, Task, VerifyResult, VerifyStatus
from veriloop.sandbox.tools import DEFAULT as DEFAULT_SANDBOX
from veriloop.sandbox.tools import ToolSandbox
from veriloop.verifiers.base import FormalVerifier, infra_error, node_score, run_tool, tool_sandbox, tool_version
from veriloop.verifiers.spec import rust_comments
from veriloop.verifiers.target import VerifierTarget
from veriloop.verifiers.verus_dialect import VERUS

SOURCE = "program.rs"
VERSION = r"[Vv]erus\S*\s+(?:[Vv]ersion\s*)?:?\s*(\S+)"
"""The version in what `verus --version` prints (one spelling for the verifier and for a run's provenance)."""
_BLOCK = re.compile(r"^(error|warning|note)(?:\[\w+\])?: (.+)$")
_LOCATION = re.compile(r"^\s*--> (.+):(\d+):(\d+)$")
_SOURCE_LINE = re.compile(r"^\s*(\d+)\s*\|")
_VERIFIED = re.compile(r"(\d+) verified")
_ERRORS = re.compile(r"(\d+) errors?")

CLASSES: tuple[tuple[str, str], ...] = (
    ("postcondition", "postcondition"),
    ("precondition", "precondition"),
    ("invariant not satisfied before loop", "invariant"),
    ("invariant not satisfied at end of loop body", "invariant"),
    ("invariant", "invariant"),
    ("decreases", "decreases"),
    ("assertion", "assertion"),
    ("arithmetic underflow/overflow", "arithmetic"),
    ("recommendation not met", "recommendation"),
    ("unclosed delimiter", "parse"),
    ("expected", "parse"),
    ("cannot find", "resolution"),
    ("mismatched types", "type"),
    ("unreachable", "unreachable"),
)


def classify(title: str) -> str:
    lowered = title.lower()
    for needle, kind in CLASSES:
        if needle in lowered:
            return kind
    return "other"


@dataclass
class ErrorBlock:
    """One `error:`/`note:` block of Verus's stderr (AlphaVerus's ErrorBlock)."""

    type: str
    title: str
    message: list[str] = field(default_factory=list)
    file: str | None = None
    start_line: int | None = None
    column: int | None = None
    end_line: int | None = None


def parse_blocks(stderr: str) -> list[ErrorBlock]:
    blocks: list[ErrorBlock] = []
    for line in stderr.splitlines():
        start = _BLOCK.match(line)
        if start:
            blocks.append(ErrorBlock(type=start.group(1), title=start.group(2).strip()))
            continue
        if not blocks:
            continue
        block = blocks[-1]
        location = _LOCATION.match(line)
        if location and block.file is None:
            block.file, block.start_line, block.column = (
                location.group(1),
                int(location.group(2)),
                int(location.group(3)),
            )
            continue
        numbered = _SOURCE_LINE.match(line)
        if numbered:
            block.end_line = int(numbered.group(1))
        if line.strip():
            block.message.append(line)
    return blocks


@dataclass
class VerusReport:
    verified: int
    errors: int
    blocks: list[ErrorBlock]
    summary: bool

    @property
    def n_err(self) -> int:
        """Error blocks, the final `aborting due to N previous errors` excluded (AlphaVerus's `[:-1]`)."""
        errors = [b for b in self.blocks if b.type == "error"]
        return len(errors[:-1]) if errors and errors[-1].title.startswith("aborting due to") else len(errors)

    @property
    def n_note(self) -> int:
        return sum(b.type == "note" for b in self.blocks)


def parse_output(stdout: str, stderr: str) -> VerusReport:
    """Counts from the JSON object or the summary line; blocks from rustc-style text or JSON diagnostic lines."""
    verified = errors = 0
    summary = False
    stripped = stdout.strip()
    if stripped.startswith("{"):
        try:
            data: Any = json.loads(stripped)
            results = data.get("verification-results", {})
            verified, errors, summary = int(results.get("verified", 0)), int(results.get("errors", 0)), True
        except (ValueError, AttributeError):
            summary = False
    if not summary:
        line = next((row for row in stdout.splitlines() if "verified" in row and "error" in row), "")
        found_v, found_e = _VERIFIED.search(line), _ERRORS.search(line)
        if found_v and found_e:
            verified, errors, summary = int(found_v.group(1)), int(found_e.group(1)), True
    blocks = _json_blocks(stderr) or parse_blocks(stderr)
    return VerusReport(verified, errors, blocks, summary)


def _json_blocks(stderr: str) -> list[ErrorBlock]:
    """rustc JSON diagnostics (`--error-format=json`), one object per line."""
    blocks = []
    for line in stderr.splitlines():
        if not line.startswith("{"):
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        level = str(item.get("level", ""))
        if level not in ("error", "warning", "note"):
            continue
        spans = item.get("spans") or [{}]
        span = next((s for s in spans if s.get("is_primary")), spans[0])
        blocks.append(
            ErrorBlock(
                type=level,
                title=str(item.get("message", "")),
                message=[str(s.get("label") or "") for s in spans],
                file=span.get("file_name"),
                start_line=span.get("line_start"),
                column=span.get("column_start"),
                end_line=span.get("line_end"),
            )
        )
    return blocks


def verus_version(command: str, cache_dir: Path | None = None) -> str:
    """The version `command` reports, memoised per binary ('' when it is not installed)."""
    return tool_version(command, ["--version"], VERSION, cache_dir)


def judge(returncode: int | None, timed_out: bool, stdout: str, stderr: str) -> VerifyResult:
    report = parse_output(stdout, stderr)
    diagnostics = [
        Diagnostic(
            severity="note" if b.type == "note" else "warning" if b.type == "warning" else "error",
            kind=classify(b.title),
            message=b.title,
            line=b.start_line,
            column=b.column,
            file=b.file,
        )
        for b in report.blocks
        if not b.title.startswith("aborting due to")
    ]
    reason = None
    if timed_out:
        status, reason = VerifyStatus.TIMEOUT, "the verifier ran past its time limit"
    elif not report.summary or (report.verified == 0 and report.errors == 0):
        has_errors = any(d.severity == "error" for d in diagnostics)
        status = VerifyStatus.SYNTAX_ERROR if has_errors else VerifyStatus.INFRA_ERROR
        if status is VerifyStatus.INFRA_ERROR:
            reason = (stderr or stdout).strip()[-300:] or f"verus exited with {returncode}"
    elif report.errors:
        status = VerifyStatus.FAILED
    elif returncode == 0:
        status = VerifyStatus.VERIFIED
    else:
        status = VerifyStatus.FAILED
    return VerifyResult(
        status=status,
        verified=report.verified,
        errors=report.errors,
        diagnostics=diagnostics,
        score=node_score(status, report.verified, report.errors, report.n_err, report.n_note),
        tool="verus",
        reason=reason,
    )


TARGET = VerifierTarget(
    "verus",
    language="rust",
    title="Verus (Rust)",
    fence="rust",
    dialect=VERUS,
    comments=rust_comments,
    ensures=r"\bensures\b",
    declarations=r"^\s*(use|verus!|fn|pub|spec|proof)\b",
    exploit_kinds=("fn",),
    shape="Include the use statements, the proper start of code using verus!, and an empty fn main() {}.",
    exploit_example=("fn ident(x: u32) -> (result: u32)\n    ensures result == result\n{", "    0\n}"),
    rules=((r"&mut(?!\s*Vec\b)", "Mutables for non-vec type are not allowed"),),
    suite="alphaverus-dafny2verus",
)


class VerusVerifier:
    """Runs Verus when a `verus` binary is on PATH or configured."""

    name = "verus"
    target = TARGET

    def __init__(
        self,
        command: str = "verus",
        *,
        timeout_s: float = 60.0,
        multiple_errors: int = 100,
        cache_dir: Path | None = None,
        sandbox: ToolSandbox | None = DEFAULT_SANDBOX,
    ) -> None:
        self.command = command
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.multiple_errors = multiple_errors
        self.cache_dir = cache_dir
        self._version = ""
        self._json: bool | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> VerusVerifier:
        section = settings.verifiers
        found = shutil.which(section.verus)
        return cls(
            section.verus,
            timeout_s=section.timeout_s,
            multiple_errors=section.verus_multiple_errors,
            cache_dir=settings.paths.cache_dir,
            sandbox=tool_sandbox(settings, *([Path(found).resolve().parent] if found else [])),
        )

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return verus_version(settings.verifiers.verus, settings.paths.cache_dir)

    @property
    def available(self) -> bool:
        return shutil.which(self.command) is not None

    def options(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s, "multiple_errors": self.multiple_errors}

    async def version(self) -> str:
        if not self._version:
            self._version = await asyncio.to_thread(verus_version, self.command, self.cache_dir)
        return self._version

    async def _json_supported(self) -> bool:
        if self._json is None:
            run = await asyncio.to_thread(run_tool, [self.command, "--help"], {}, timeout_s=60)
            self._json = "--output-json" in run.output
        return self._json

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await self.check(candidate.code)

    async def check(self, code: str) -> VerifyResult:
        if not self.available:
            return infra_error(self.name, "", f"{self.command} is not on PATH; install Verus or set verifiers.verus")
        version = await self.version()
        argv = [self.command, SOURCE, "--multiple-errors", str(self.multiple_errors)]
        if await self._json_supported():
            argv.append("--output-json")
        run = await asyncio.to_thread(run_tool, argv, {SOURCE: code}, timeout_s=self.timeout_s, sandbox=self.sandbox)
        if run.returncode is None and not run.timed_out:
            return infra_error(self.name, version, run.stderr, run.wall_s)
        result = judge(run.returncode, run.timed_out, run.stdout, run.stderr)
        usage = {"cpu_s": run.cpu_s, "max_rss_mb": run.max_rss_mb}
        return result.model_copy(update={"version": version, "duration_s": run.wall_s, **usage})

    async def aclose(self) -> None:
        return None


_CHECKED: type[FormalVerifier] = VerusVerifier
"""mypy checks here that the class has every member of the protocols the guard and the registry use."""
