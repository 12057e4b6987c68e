"""Self-improvement on hints infill, with a scripted model and the real Dafny: a verified hint set joins the solved
pool, a later run's prompt shows it as a worked example, and nothing unverified (or the task itself) is ever shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.alphaverus.programs import SUM_NO_HINTS as SUM
from tests.agents.alphaverus.programs import hints_task
from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions, has_hints
from veriloop.agents.alphaverus.hints import DAFNY, parse_hints, render_hints
from veriloop.agents.alphaverus.pools import SOLVED, Pools
from veriloop.agents.context import AgentContext
from veriloop.config import load_settings
from veriloop.records import Message, Run, Task
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend

SUM_HINTS = "// loop 1\ninvariant 0 <= i <= n\ninvariant s == Tri(i)\n"
COUNT = """method CountTo(n: nat) returns (c: nat)
  ensures c == n
{
  c := 0;
  while c < n
  {
    c := c + 1;
  }
}
"""
COUNT_HINTS = "// loop 1\ninvariant 0 <= c <= n\ndecreases n - c\n"


def test_rendered_hints_parse_back_to_the_same_lines() -> None:
    hints = {1: ["invariant 0 <= i <= n", "decreases n - i"], 2: ["invariant s >= 0"]}
    assert parse_hints(render_hints(hints, DAFNY), 2, DAFNY) == hints


def test_only_hints_pairs_feed_a_hints_prompt() -> None:
    assert has_hints({"source": SUM, "target": SUM, "hints": SUM_HINTS})
    assert not has_hints({"source": SUM, "target": SUM, "mode": "hints"})  # the loop's whole-program pair


async def solve(
    settings_home: Path, store: TrajectoryStore, task: Task, reply: str, options: AlphaVerusOptions
) -> tuple[str, ScriptedBackend, str]:
    settings = load_settings(paths={"home": settings_home})
    run = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
    backend = ScriptedBackend([lambda prompt: reply])
    sandbox = get_sandbox(settings)
    try:
        attempt = await AlphaVerusAgent(options).solve(task, AgentContext(settings, backend, sandbox, store, run))
    finally:
        await sandbox.aclose()
    return attempt.status, backend, run.id


def shown(backend: ScriptedBackend) -> list[Message]:
    """The messages of the first request the model saw."""
    prompt, _ = backend.requests[0]
    assert not isinstance(prompt, str)
    return list(prompt)


@pytest.mark.dafny
async def test_a_verified_hint_set_is_shown_to_the_next_run(tmp_path: Path) -> None:
    options = AlphaVerusOptions(mode="inference", width=1, depth=1, prune_steps=0, few_shot=2)
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        status, _, first = await solve(tmp_path, store, hints_task("sum", SUM), SUM_HINTS, options)
        assert status == "passed"
        [pair] = [e for e in store.list_exemplars(kind=SOLVED, language="dafny")]
        assert pair.run_id == first and pair.task_id == "sum"
        assert pair.payload["source"] == SUM and parse_hints(pair.payload["hints"], 1) == parse_hints(SUM_HINTS, 1)
        assert "invariant s == Tri(i)" in pair.payload["target"]

        status, backend, _ = await solve(tmp_path, store, hints_task("count", COUNT), COUNT_HINTS, options)
        assert status == "passed"
        messages = shown(backend)
        # system, the language's two worked examples (user + assistant each), the pool's pair, then the task
        assert len(messages) == 1 + 2 * 2 + 2 + 1
        example, answer, query = messages[5], messages[6], messages[7]
        assert "method SumTo" in example.content and "// loop 1" in example.content
        assert answer.role == "assistant" and "invariant s == Tri(i)" in answer.content
        assert "method CountTo" in query.content and "method SumTo" not in query.content


@pytest.mark.dafny
async def test_unverified_hints_never_join_and_a_task_never_sees_its_own_pair(tmp_path: Path) -> None:
    options = AlphaVerusOptions(mode="inference", width=1, depth=1, prune_steps=0, few_shot=4)
    wrong = "// loop 1\ninvariant 0 <= i <= n\ninvariant s == i\n"  # parses, Dafny rejects it
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        status, _, _ = await solve(tmp_path, store, hints_task("sum", SUM), wrong, options)
        assert status == "failed"
        assert store.list_exemplars(kind=SOLVED, language="dafny") == []

        status, _, _ = await solve(tmp_path, store, hints_task("sum", SUM), SUM_HINTS, options)
        assert status == "passed"
        status, backend, _ = await solve(tmp_path, store, hints_task("sum", SUM), SUM_HINTS, options)
        assert status == "passed"
        assert len(shown(backend)) == 1 + 2 * 2 + 1  # its own verified pair is excluded: no answer leaks


@pytest.mark.dafny
async def test_read_only_and_zero_shot_runs_leave_the_pool_alone(tmp_path: Path) -> None:
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        earlier = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
        Pools(store, "dafny", earlier.id).add(SOLVED, 0, "sum", [{"source": SUM, "target": SUM, "hints": SUM_HINTS}])
        read_only = AlphaVerusOptions(mode="inference", width=1, depth=1, prune_steps=0, few_shot=4, grow_pools=False)
        status, backend, _ = await solve(tmp_path, store, hints_task("count", COUNT), COUNT_HINTS, read_only)
        assert status == "passed" and len(shown(backend)) == 1 + 2 * 2 + 2 + 1
        assert len(store.list_exemplars(kind=SOLVED, language="dafny")) == 1

        zero_shot = read_only.model_copy(update={"few_shot": 0})
        status, backend, _ = await solve(tmp_path, store, hints_task("count", COUNT), COUNT_HINTS, zero_shot)
        assert status == "passed" and len(shown(backend)) == 1 + 2 * 2 + 1
