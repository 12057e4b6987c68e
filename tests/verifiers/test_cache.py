"""The verification cache: keyed on everything that decides a verdict, kept in the store, shared by processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.store import TrajectoryStore
from veriloop.verifiers.cache import CachedVerifier, cache_key

DATA = Path(__file__).parent / "data"


class Counting:
    """A verifier double that counts its runs."""

    name = "counting"

    def __init__(self, status: VerifyStatus = VerifyStatus.FAILED, version: str = "1") -> None:
        self.runs = 0
        self.status = status
        self._version = version

    async def version(self) -> str:
        return self._version

    def options(self) -> dict[str, Any]:
        return {"timeout_s": 5}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        self.runs += 1
        return VerifyResult(status=self.status, verified=1, errors=2, tool=self.name, version=self._version)

    async def aclose(self) -> None:
        return None


def test_key_covers_version_options_candidate_and_spec() -> None:
    task, candidate = Task(id="t", suite="s", prompt="", spec="ensures x"), Candidate(task_id="t", code="a")
    base = cache_key("dafny", "2.3", {}, candidate, task)
    assert base == cache_key("dafny", "2.3", {}, candidate, task)
    assert base != cache_key("dafny", "2.4", {}, candidate, task)
    assert base != cache_key("dafny", "2.3", {"time_limit_s": 1}, candidate, task)
    assert base != cache_key("dafny", "2.3", {}, Candidate(task_id="t", code="b"), task)
    assert base != cache_key("dafny", "2.3", {}, candidate, task.model_copy(update={"spec": "ensures y"}))
    assert base != cache_key("nagini", "2.3", {}, candidate, task)


async def test_repeat_is_a_hit_and_infra_errors_are_not_stored(tmp_path: Path) -> None:
    store = TrajectoryStore(f"sqlite:///{tmp_path / 'v.db'}")
    try:
        inner = Counting()
        cached = CachedVerifier(inner, store)
        task, candidate = Task(id="t", suite="s", prompt=""), Candidate(task_id="t", code="x")
        first = await cached.verify(candidate, task)
        second = await cached.verify(candidate, task)
        assert inner.runs == 1 and not first.cache_hit and second.cache_hit
        volatile = {"cache_hit", "duration_s"}
        assert second.model_dump(exclude=volatile) == first.model_dump(exclude=volatile)
        broken = Counting(VerifyStatus.INFRA_ERROR)
        cached = CachedVerifier(broken, store)
        other = Candidate(task_id="t", code="y")
        await cached.verify(other, task)
        await cached.verify(other, task)
        assert broken.runs == 2
        assert store.cache_clear() == 1
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.dafny
def test_real_dafny_result_is_reused_by_another_process(tmp_path: Path) -> None:
    env = {**os.environ, "VERILOOP_PATHS__HOME": str(tmp_path)}
    program = str(DATA / "dafny" / "post_fail.dfy")
    argv = [sys.executable, "-m", "veriloop.cli", "verify", program, "--verifier", "dafny", "--json"]
    runs = [subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False) for _ in range(2)]
    first, second = (json.loads(run.stdout) for run in runs)
    assert [run.returncode for run in runs] == [1, 1]
    assert (first["cache_hit"], second["cache_hit"]) == (False, True)
    assert first["status"] == second["status"] == "failed"
    assert first["diagnostics"] == second["diagnostics"] and first["diagnostics"][0]["class"] == "postcondition"
    assert second["duration_s"] < first["duration_s"]
