"""Dafny suites: DafnyBench hints-removed and Dafny-source translation suites, filtered by the installed Dafny."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.records import VerifyStatus
from veriloop.tasks import load_suite
from veriloop.tasks.dafny import cached_filter, dafny_status

pytestmark = pytest.mark.skipif(shutil.which("dafny") is None, reason="dafny is not installed (Debian package dafny)")


def test_bundled_hints_suite_records_the_tool_version(tmp_path: Path) -> None:
    suite = load_suite("dafnybench-hints", load_settings(paths={"home": tmp_path}))
    assert len(suite.tasks) == 8 and "dafny==" in suite.version
    task = suite.tasks[0]
    assert task.language == "dafny" and task.spec == task.prompt and task.reference
    assert task.metadata["mode"] == "hints" and task.metadata["tool_version"] in suite.version


@pytest.mark.parametrize(
    ("name", "language"), [("alphaverus-dafny2nagini", "python"), ("alphaverus-dafny2verus", "rust")]
)
def test_translation_suites_carry_the_dafny_source(tmp_path: Path, name: str, language: str) -> None:
    suite = load_suite(name, load_settings(paths={"home": tmp_path}))
    assert suite.tasks and all(task.language == language for task in suite.tasks)
    task = suite.tasks[0]
    assert task.metadata["source"] == task.prompt and task.metadata["mode"] == "translate"
    assert task.metadata["verifier"] == name.removeprefix("alphaverus-dafny2")


def test_filter_verdicts_are_cached(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    items = [{"key": "a"}, {"key": "b"}, {"key": "c"}]
    seen: list[str] = []

    def keep(item: dict[str, Any]) -> str | None:
        seen.append(item["key"])
        return "dropped" if item["key"] == "b" else None

    kept, version = cached_filter(settings, "unit", items, keep)
    assert [item["key"] for item in kept] == ["a", "c"] and version
    again, _ = cached_filter(settings, "unit", items, keep)
    assert again == kept and sorted(seen) == ["a", "b", "c"]  # the second load ran nothing


@pytest.mark.slow
def test_hints_filter_on_the_real_tool(tmp_path: Path) -> None:
    """One program that needs its hints and one that verifies without them, through the real Dafny."""
    settings = load_settings(paths={"home": tmp_path})
    needs_hints = load_suite("dafnybench-hints", settings).tasks[0]
    assert dafny_status(settings, needs_hints.reference or "") is VerifyStatus.VERIFIED
    assert dafny_status(settings, needs_hints.prompt) is not VerifyStatus.VERIFIED
    from veriloop.tasks.dafny import _keep_hints

    trivial = "method Id(x: int) returns (y: int)\n  ensures y == x\n{\n  y := x;\n}\n"
    items: list[dict[str, Any]] = [
        {"key": "needs", "ground_truth": needs_hints.reference, "hints_removed": needs_hints.prompt},
        {"key": "trivial", "ground_truth": trivial, "hints_removed": trivial},
    ]
    kept, _ = cached_filter(settings, "real", items, _keep_hints(settings))
    assert [item["key"] for item in kept] == ["needs"]
