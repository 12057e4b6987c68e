"""`nagini-hints`: small verified Nagini programs with their loop invariants removed, to fill in again.

The programs (`data/nagini_hints.json`) were written for this package: sums, searches, a copy, a fill and a
power, each verified by Nagini 1.2.0 with its ground-truth invariants (`tests/tasks/test_nagini_suite.py`
checks that every one verifies and fails once its invariants are removed). The task's program and spec are
the program without the `Invariant(...)` and `Decreases(...)` lines; the ground truth is the reference.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from veriloop.config import Settings
from veriloop.records import Task
from veriloop.tasks.base import Suite

BUNDLED = Path(__file__).with_name("data") / "nagini_hints.json"
HINT_LINE = re.compile(r"^[ \t]*(Invariant|Decreases)\(.*\)[ \t]*\n", re.M)


def remove_hints(program: str) -> str:
    """The program without its loop annotation lines (one `Invariant(...)` or `Decreases(...)` per line)."""
    return HINT_LINE.sub("", program)


def load_nagini_hints(settings: Settings) -> Suite:
    """The bundled programs as hints tasks for the verifier `nagini` (no Nagini run at load time)."""
    raw = BUNDLED.read_bytes()
    tasks = tuple(
        Task(
            id=f"nagini-hints/{row['key']}",
            suite="nagini-hints",
            prompt=remove_hints(row["ground_truth"]),
            language="python",
            spec=remove_hints(row["ground_truth"]),
            reference=row["ground_truth"],
            metadata={"verifier": "nagini", "mode": "hints"},
        )
        for row in json.loads(raw)["programs"]
    )
    return Suite("nagini-hints", f"nagini_hints.json@{hashlib.sha256(raw).hexdigest()[:12]}", tasks, str(BUNDLED))
