"""Security findings of a Python candidate by bandit (PyCQA's maintained analyser), reported with every verdict.

Why: a reward that ignores insecure code teaches it (fine-tuning on insecure code without saying so causes
broad misalignment, "Emergent Misalignment", ICML 2025). The judge reports what bandit finds, the reward can
subtract a configured weight per finding, and exports can drop or mark such candidates. One scan of a short
function costs about 2 ms.
"""

from __future__ import annotations

import io
import logging
import threading
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["low", "medium", "high"]
RANK = {"low": 1, "medium": 2, "high": 3, "undefined": 0}
SKIPPED = frozenset({"B101"})
"""assert_used: asserts in a solution are not a vulnerability (bandit flags them for `python -O` only)."""

_LOCK = threading.Lock()
_TEST_SET: object | None = None


class Finding(BaseModel):
    """One bandit issue: its test id (B602, ...), severity, confidence, line and message."""

    model_config = ConfigDict(extra="forbid")

    test_id: str
    severity: Severity
    confidence: Severity
    line: int | None = None
    message: str = Field(description="bandit's text, e.g. 'subprocess call with shell=True identified'.")


UNSCANNED = Finding(test_id="unscanned", severity="medium", confidence="high", message="bandit could not scan it")
"""Reported when bandit fails on code that parses: a report with no findings would pass it as clean."""


def counted(findings: list[Finding], min_severity: Severity) -> int:
    """Findings at or above `min_severity` (the ones the reward penalises and exports drop)."""
    return sum(RANK[f.severity] >= RANK[min_severity] for f in findings)


def _test_set() -> object:
    """bandit's plugins and blacklists, loaded once (building them is a tenth of a scan)."""
    global _TEST_SET
    if _TEST_SET is None:
        from bandit.core import config, test_set

        logging.getLogger("bandit").setLevel(logging.ERROR)
        logging.getLogger("stevedore.extension").setLevel(logging.CRITICAL)  # optional formatters (sarif)
        _TEST_SET = test_set.BanditTestSet(config.BanditConfig())
    return _TEST_SET


def _level(value: str) -> Severity:
    level = value.lower()
    return level if level in ("low", "medium", "high") else "low"  # type: ignore[return-value]


def scan_python(code: str) -> list[Finding]:
    """bandit's findings on `code`. `# nosec` comments are ignored: they are the candidate's words, and a policy
    would learn to write them. A candidate that does not parse has none (its verdict says why it fails); one that
    makes bandit itself fail gets an `unscanned` finding rather than a clean report."""
    from bandit.core import meta_ast, metrics, node_visitor

    with _LOCK:  # one scan at a time: bandit's visitors are pure Python, so threads would only contend
        visitor = node_visitor.BanditNodeVisitor(
            "<candidate>",
            io.BytesIO(code.encode()),
            meta_ast.BanditMetaAst(),
            _test_set(),
            debug=False,
            nosec_lines={},
            metrics=metrics.Metrics(),
        )
        try:
            visitor.process(code)
        except SyntaxError:
            return []
        except Exception as error:  # any failure of the analyser, on code that parses, leaves it unscanned
            return [UNSCANNED.model_copy(update={"message": f"bandit could not scan it: {type(error).__name__}"})]
        issues = visitor.tester.results
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
