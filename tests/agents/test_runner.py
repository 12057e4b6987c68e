"""The agent seam: option validation, run creation, resumable execution and failure accounting."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.agents.base import AGENTS, Agent, AgentOptions, make_agent
from veriloop.agents.context import AgentContext
from veriloop.agents.direct import DirectAgent
from veriloop.agents.runner import create_run, execute_run
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError, UnknownNameError
from veriloop.records import Attempt, RunStatus, Task
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend

CORRECT_ADD = "```python\ndef add(x: int, y: int):\n    return x + y\n```"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path})


def test_every_registered_agent_name_is_a_method_folder() -> None:
    assert set(AGENTS) == {"direct", "mucode", "alphaverus", "f2strans", "revise"}
    assert isinstance(make_agent("direct"), DirectAgent)


def test_bad_options_and_unknown_agents_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="bad options for agent 'direct': concurency: Extra inputs"):
        make_agent("direct", {"concurency": 2})
    with pytest.raises(ConfigError, match="concurrency"):
        make_agent("direct", {"concurrency": 0})
    with pytest.raises(UnknownNameError, match="choose one of"):
        make_agent("nope")


def test_create_run_records_the_slice_and_validated_options(settings: Settings) -> None:
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="direct", suite="humaneval", options={"concurrency": 3}, limit=2)
        assert run.status is RunStatus.PENDING
        assert run.settings["options"] == {"concurrency": 3}
        assert run.settings["limit"] == 2 and run.settings["suite_version"]
        assert "api_key" not in run.settings["llm"]
        assert {task.id for task in store.list_tasks("humaneval")} >= {"HumanEval/0", "HumanEval/1"}
        before = len(store.list_runs())
        with pytest.raises(ConfigError):
            create_run(store, settings, agent="direct", suite="humaneval", options={"turns": 3})
        assert len(store.list_runs()) == before  # bad input changes nothing


@pytest.mark.bwrap
async def test_execute_run_resumes_without_repeating_finished_tasks(settings: Settings) -> None:
    backend = ScriptedBackend([CORRECT_ADD])
    sandbox = get_sandbox(settings)
    seen: list[str] = []
    try:
        with TrajectoryStore.from_settings(settings) as store:
            ids = ["HumanEval/53", "HumanEval/0"]
            run = create_run(store, settings, agent="direct", suite="humaneval", task_ids=ids)
            store.add_attempt(Attempt(run_id=run.id, task_id="HumanEval/0", status="failed"))  # done before a crash
            finished, attempts = await execute_run(
                settings, store, run.id, backend=backend, sandbox=sandbox, on_attempt=lambda a: seen.append(a.task_id)
            )
            assert finished.status is RunStatus.FINISHED and finished.finished_at is not None
            assert seen == ["HumanEval/53"] and len(backend.requests) == 1
            assert [(a.task_id, a.status) for a in attempts] == [("HumanEval/53", "passed"), ("HumanEval/0", "failed")]
            assert len(store.get_tree(run.id, "HumanEval/53")) == 1
    finally:
        await sandbox.aclose()


class ExplodingAgent(Agent[AgentOptions]):
    name = "exploding"

    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        raise RuntimeError(f"cannot solve {task.id}")


async def test_a_failing_agent_marks_the_run_failed_with_the_error(settings: Settings) -> None:
    AGENTS.register("exploding", f"{__name__}:ExplodingAgent")
    sandbox = get_sandbox(settings)
    try:
        with TrajectoryStore.from_settings(settings) as store:
            run = create_run(store, settings, agent="exploding", suite="humaneval", limit=1)
            with pytest.raises(RuntimeError, match="cannot solve HumanEval/0"):
                await execute_run(settings, store, run.id, backend=ScriptedBackend(), sandbox=sandbox)
            stored = store.get_run(run.id)
            assert stored.status is RunStatus.FAILED and stored.error == "RuntimeError: cannot solve HumanEval/0"
    finally:
        await sandbox.aclose()
