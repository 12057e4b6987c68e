"""Demo-sized preference trajectories without a model: the direct agent with scripted answers.

Two runs over the same HumanEval tasks, through the real agent, sandbox and store: one whose scripted
model answers with each task's reference body (passes its tests) and one that answers `return None`
(fails), so every prompt has a passed and a failed sibling. Tests and `veriloop bench train` export
and train on these when no real run is given. It lives with the benchmarks (the face layer), not in
`training/`, because it drives an agent: training sits beside the agents and must not import them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from veriloop.config import Settings
from veriloop.records import Prompt, Run, RunStatus, Task
from veriloop.testing import ScriptedBackend, prompt_text

if TYPE_CHECKING:
    from veriloop.tasks import Suite

NULL_REPLY = "```python\n    return None\n```"


@dataclass
class SampleRuns:
    good_run: str
    bad_run: str

    @property
    def runs(self) -> list[str]:
        return [self.good_run, self.bad_run]


def reference_backend(tasks: Sequence[Task]) -> ScriptedBackend:
    """A scripted model that answers each task's prompt with the body of its reference solution."""

    def reply(prompt: Prompt) -> str:
        text = prompt_text(prompt)
        task = next(task for task in tasks if task.prompt in text)
        reference = task.reference or ""
        body = reference[len(task.prompt) :] if reference.startswith(task.prompt) else reference
        return f"```python\n{body}```"

    return ScriptedBackend([reply], model="scripted-reference")


async def _run(settings: Settings, backend: ScriptedBackend, suite: Suite) -> str:
    from veriloop.agents import direct
    from veriloop.agents.context import AgentContext
    from veriloop.agents.runner import with_provenance
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore

    store = TrajectoryStore.from_settings(settings)
    sandbox = get_sandbox(settings)
    tasks = suite.tasks
    run = Run(agent="direct", suite="humaneval", model=backend.model_id, status=RunStatus.RUNNING)
    scripted = settings.model_copy(
        update={"llm": settings.llm.model_copy(update={"backend": "scripted", "model": backend.model_id})}
    )  # the model these runs really used: provenance names it, and hashes no weights it never loaded
    run = store.create_run(with_provenance(run, scripted, agent_module=direct.__name__, options={}, suite=suite))
    store.upsert_tasks(tasks)
    ctx = AgentContext(settings, backend, sandbox, store, run)
    try:
        await asyncio.gather(*(direct.solve(task, ctx) for task in tasks))
        store.finish_run(run.id)
    finally:
        await sandbox.aclose()
        store.close()
    return run.id


def make_sample_runs(settings: Settings, limit: int = 5) -> SampleRuns:
    """Store the two runs (reference answers, null answers) over the first `limit` HumanEval tasks."""
    from veriloop.tasks import load_suite

    suite = load_suite("humaneval", settings).select(limit=limit)
    good = asyncio.run(_run(settings, reference_backend(suite.tasks), suite))
    bad = asyncio.run(_run(settings, ScriptedBackend([NULL_REPLY], model="scripted-null"), suite))
    return SampleRuns(good, bad)
