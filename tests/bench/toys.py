"""Toy tasks whose verdicts are known, for the training benches' tests."""

from __future__ import annotations

from veriloop.records import Task


def add_task(index: int) -> Task:
    """`add{index}(a, b)` with two asserts: `a + b` passes both, `a * b` only the second."""
    return Task(
        id=f"toy/{index}",
        suite="toy",
        prompt=f"def add{index}(a, b):\n",
        tests=f"assert add{index}(1, 2) == 3\nassert add{index}(0, 0) == 0\n",
        entry_point=f"add{index}",
    )
