"""Security findings of a Python candidate by bandit (PyCQA's maintained analyser), reported with every verdict.

Why: a reward that ignores insecure code teaches it (fine-tuning on insecure code without saying so causes
broad misalignment, "Emergent Misalignment", ICML 2025). The judge reports what bandit finds, the reward can
subtract a configured weight per finding, and exports can drop or mark such candidates. Bandit reads files, so
each scan writes the code to a private temp file; one scan of a short function costs about 3 ms.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["low", "medium", "high"]
RANK = {"low": 1, "medium": 2, "high": 3, "undefined": 0}
SKIPPED = frozenset({"B101"})
"""assert_used: asserts in a solution are not a vulnerability (bandit flags them for `python -O` only)."""

_LOCK = threading.Lock()
_CONFIG: object | None = None


class Finding(BaseModel):
    """One bandit issue: its test id (B602, ...), severity, confidence, line and message."""

    model_config = ConfigDict(extra="forbid")

    test_id: str
    severity: Severity
    confidence: Severity
    line: int | None = None
    message: str = Field(description="bandit's text, e.g. 'subprocess call with shell=True identified'.")


def counted(findings: list[Finding], min_severity: Severity) -> int:
    """Findings at or above `min_severity` (the ones the reward penalises and exports drop)."""
    return sum(RANK[f.severity] >= RANK[min_severity] for f in findings)


def _config() -> object:
    global _CONFIG
    if _CONFIG is None:
        from bandit.core import config

        logging.getLogger("bandit").setLevel(logging.ERROR)
        logging.getLogger("stevedore.extension").setLevel(logging.CRITICAL)  # optional formatters (sarif)
        _CONFIG = config.BanditConfig()
    return _CONFIG


def _level(value: str) -> Severity:
    level = value.lower()
    return level if level in ("low", "medium", "high") else "low"  # type: ignore[return-value]


def scan_python(code: str) -> list[Finding]:
    """bandit's findings on `code` (a candidate that does not parse has none: the verdict says why it fails)."""
    from bandit.core import manager

    with _LOCK:  # bandit's manager keeps module-level state; one scan at a time
        handle, path = tempfile.mkstemp(suffix=".py", prefix="veriloop-bandit-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(code)
            scanner = manager.BanditManager(_config(), "file", quiet=True)
            scanner.discover_files([path])
            scanner.run_tests()
            issues = scanner.get_issue_list()
        finally:
            Path(path).unlink()
    return [
        Finding(
            test_id=issue.test_id,
            severity=_level(issue.severity),
            confidence=_level(issue.confidence),
            line=issue.lineno if isinstance(issue.lineno, int) else None,
            message=issue.text,
        )
        for issue in issues
        if issue.test_id not in SKIPPED
    ]
