"""A whole AlphaVerus round with a scripted model and the real Dafny: exploration, tree, filters, pools, and a
second round whose prompts carry the first round's solved pair; plus inference mode on HumanEval."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.alphaverus.programs import SUM_NO_HINTS, hints_task
from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions
from veriloop.agents.alphaverus.pools import CRITIC, ERRORS, SOLVED, Pools
from veriloop.agents.context import AgentContext
from veriloop.config import load_settings
from veriloop.records import Prompt, Run, Task
from veriloop.sandbox import get_sandbox
from veriloop.search.tree import load_tree
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedBackend, prompt_text

MAX_WEAK = """method Max(a: int, b: int) returns (m: int)
  ensures m >= a
{
  if a > b { m := a; } else { m := b; }
}
"""
HINTS = "  while i < n\n    invariant 0 <= i <= n\n    invariant s == Tri(i)\n"
SUM_FIXED = SUM_NO_HINTS.replace("  while i < n\n", HINTS).strip("\n")


def fence(code: str) -> str:
    return f"Here it is.\n```dafny\n{code.strip()}\n```\n"


def scripted(prompt: Prompt) -> str:
    """The model's side of the round: exploit bodies, judge votes, fixes and first translations."""
    text = prompt_text(prompt)
    if "Write a trivial program" in text:
        return "```dafny\n  m := a;\n}\n```" if "Max" in text else "```dafny\n  s := 0;\n}\n```"
    if "Will the two methods return computationally same results?" in text:
        return "[Step by Step Thoughts] the same. The final answer is <Yes>"
    if "fix the errors" in text or "I got the following errors" in text:
        return fence(SUM_FIXED)
    return fence(MAX_WEAK) if "method Max" in text else fence(SUM_NO_HINTS)


@pytest.mark.dafny
@pytest.mark.slow
async def test_two_rounds_explore_tree_filter_and_grow_the_pools(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
    backend = ScriptedBackend([scripted])
    sandbox = get_sandbox(settings)
    ctx = AgentContext(settings, backend, sandbox, store, run)
    options = AlphaVerusOptions(
        infill="whole", iterations=2, explore_samples=2, width=2, depth=2, exploit_samples=1, judge_votes=2
    )
    tasks = [hints_task("max", MAX_WEAK), hints_task("sum", SUM_NO_HINTS)]
    try:
        attempts = {a.task_id: a for a in await AlphaVerusAgent(options).run_suite(tasks, ctx)}
    finally:
        await sandbox.aclose()
    # sum: partial in exploration (Dafny: 1 verified, 1 error), fixed by the tree, kept by both filters
    assert attempts["sum"].status == "passed" and attempts["sum"].score == 1.0
    best = store.get_node(attempts["sum"].best_node_id or "")
    assert best.metadata["phase"] == "tree" and best.code == SUM_FIXED
    verdict = best.metadata["filter"]
    assert verdict["stage"] == "judge" and not verdict["rejected"] and (verdict["yes"], verdict["no"]) == (2, 0)
    explored = [n for n in store.get_tree(run.id, "sum") if n.metadata.get("phase") == "explore"]
    assert explored and all(n.score == pytest.approx(0.5 - (0.1 + 0.04) / 2) for n in explored)
    assert "postcondition might not hold" in explored[0].metadata["feedback"]
    # the fix prompt shows the verifier's complaint about the partial program
    fixes = [prompt_text(p) for p, _ in backend.requests if "fix the errors" in prompt_text(p)]
    assert fixes and "postcondition might not hold" in fixes[0]
    # max verifies, but its spec admits `m := a`: the exploit model rejects it in both rounds
    assert attempts["max"].status == "failed"
    exploits = [n for n in store.get_tree(run.id, "max") if n.role == "exploit"]
    assert exploits and all(n.metadata["exploits_spec"] for n in exploits)
    # budgets are kept with the attempts
    assert attempts["sum"].budget["llm_calls"] >= 4 and attempts["sum"].budget["verifier_calls"] >= 4
    # pools: the solved pair, the error triplet of the tree's path, one critic pair
    [solved] = store.list_exemplars(kind=SOLVED)
    assert solved.payload["target"] == SUM_FIXED and solved.iteration == 0 and solved.task_id == "sum"
    [triplet] = store.list_exemplars(kind=ERRORS)
    assert triplet.payload["bad"] == SUM_NO_HINTS.strip("\n") and triplet.payload["good"] == SUM_FIXED
    assert "postcondition" in triplet.payload["error"]
    critics = store.list_exemplars(kind=CRITIC)
    assert len(critics) == 2 and "m := a;" in critics[0].payload["exploit"]  # one per round
    # round 2 explored max again, with sum's solved pair as a few-shot exemplar
    second = [prompt for prompt, _ in backend.requests if isinstance(prompt, list) and len(prompt) > 2]
    assert any("invariant s == Tri(i)" in message.content for prompt in second for message in prompt)
    graph = load_tree(store, run.id, "sum")
    assert graph.has_edge(best.parent_id, best.id)
    store.close()


@pytest.mark.bwrap
async def test_inference_mode_runs_treefinement_from_the_prompt(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    task = load_suite("humaneval", settings).select(ids=["HumanEval/53"]).tasks[0]
    run = store.create_run(Run(agent="alphaverus", suite="humaneval", model="scripted"))
    replies = iter(["```python\ndef add(x: int, y: int):\n    return x - y\n```"] * 2)

    def reply(prompt: Prompt) -> str:
        return next(replies, "```python\ndef add(x: int, y: int):\n    return x + y\n```")

    sandbox = get_sandbox(settings)
    ctx = AgentContext(settings, ScriptedBackend([reply]), sandbox, store, run)
    try:
        attempt = await AlphaVerusAgent(AlphaVerusOptions(infill="whole", width=2, depth=2)).solve(task, ctx)
    finally:
        await sandbox.aclose()
    assert attempt.status == "passed" and attempt.budget["calls_to_success"] == 3
    nodes = store.get_tree(run.id, task.id)
    assert [n.depth for n in nodes] == [0, 0, 1, 1]  # a level is sampled whole
    assert 0 <= (nodes[0].score or -1) < 1  # a fraction of the tests passed
    assert "I got the following errors" in nodes[2].messages[-1].content
    store.close()


NAGINI_ABS = """from nagini_contracts.contracts import *


def absolute(x: int) -> int:
    Ensures(Result() >= 0)
    Ensures(Result() == x or Result() == -x)
    if x < 0:
        return -x
    return x
"""
DAFNY_ABS = """method Abs(x: int) returns (y: int)
  ensures y >= 0
  ensures y == x || y == -x
{
  if x < 0 { y := -x; } else { y := x; }
}
"""


@pytest.mark.slow
@pytest.mark.nagini
async def test_a_dafny_to_nagini_round_with_the_real_nagini(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})

    def reply(prompt: Prompt) -> str:
        text = prompt_text(prompt)
        if "Write a trivial program" in text:
            return "```python\nreturn 0\n```"
        if "Program 1:" in text:
            return "The final answer is <Yes>"
        return f"```python\n{NAGINI_ABS}```\n"

    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="alphaverus", suite="unit-nagini", model="scripted"))
    sandbox = get_sandbox(settings)
    ctx = AgentContext(settings, ScriptedBackend([reply]), sandbox, store, run)
    task = Task(
        id="abs",
        suite="unit-nagini",
        prompt=DAFNY_ABS,
        language="python",
        metadata={"mode": "translate", "verifier": "nagini", "source": DAFNY_ABS},
    )
    options = AlphaVerusOptions(infill="whole", explore_samples=1, exploit_samples=1, judge_votes=1)
    try:
        [attempt] = await AlphaVerusAgent(options).run_suite([task], ctx)
    finally:
        await sandbox.aclose()
    assert attempt.status == "passed"
    node = store.get_node(attempt.best_node_id or "")
    assert node.verify_result is not None and node.verify_result.tool == "nagini"
    [exploit] = [n for n in store.get_tree(run.id, "abs") if n.role == "exploit"]
    assert exploit.code is not None and exploit.code.endswith("    return 0\n")
    assert not exploit.metadata["exploits_spec"]
    [pair] = store.list_exemplars(kind=SOLVED, language="nagini")
    assert pair.payload["source"] == DAFNY_ABS and "def absolute" in pair.payload["target"]
    store.close()


@pytest.mark.dafny
@pytest.mark.slow
async def test_an_interrupted_loop_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """The judge's backend dies mid-round; the rerun continues at the filter phase without exploring again."""
    from veriloop.errors import BackendError

    def dies_at_the_judge(prompt: Prompt) -> str:
        if "Will the two methods return computationally same results?" in prompt_text(prompt):
            raise BackendError("the server went away")
        return scripted(prompt)

    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
    sandbox = get_sandbox(settings)
    options = AlphaVerusOptions(infill="whole", explore_samples=1, width=1, depth=1, exploit_samples=1, judge_votes=1)
    tasks = [hints_task("sum", SUM_NO_HINTS)]
    try:
        with pytest.raises(BackendError):
            await AlphaVerusAgent(options).run_suite(
                tasks, AgentContext(settings, ScriptedBackend([dies_at_the_judge]), sandbox, store, run)
            )
        searched = len([n for n in store.get_tree(run.id, "sum") if "search_id" in n.metadata])
        second = ScriptedBackend([scripted])
        [attempt] = await AlphaVerusAgent(options).run_suite(tasks, AgentContext(settings, second, sandbox, store, run))
    finally:
        await sandbox.aclose()
    assert attempt.status == "passed"
    asked = [prompt_text(prompt) for prompt, _ in second.requests]
    assert not any("fix the errors" in text or "Consider the following" in text for text in asked)
    assert any("Will the two methods" in text for text in asked)
    assert len([n for n in store.get_tree(run.id, "sum") if "search_id" in n.metadata]) == searched == 2
    store.close()


@pytest.mark.dafny
@pytest.mark.slow
async def test_inference_shows_only_error_exemplars_whose_fix_left_the_spec_alone(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    earlier = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
    body_fix = {"bad": SUM_NO_HINTS, "error": "a postcondition might not hold", "good": SUM_FIXED}
    spec_edit = {
        "bad": SUM_NO_HINTS,
        "error": "a postcondition might not hold",
        "good": SUM_NO_HINTS.replace("ensures s == Tri(n)", "ensures s >= 0"),
    }
    Pools(store, "dafny", earlier.id).add(ERRORS, 0, "another-program", [body_fix, spec_edit])
    run = store.create_run(Run(agent="alphaverus", suite="unit-hints", model="scripted"))
    sandbox = get_sandbox(settings)
    ctx = AgentContext(settings, ScriptedBackend([lambda prompt: fence(SUM_FIXED)]), sandbox, store, run)
    try:
        options = AlphaVerusOptions(infill="whole", width=1, depth=1, mode="inference")
        attempt = await AlphaVerusAgent(options).solve(hints_task("sum", SUM_NO_HINTS), ctx)
    finally:
        await sandbox.aclose()
    assert attempt.status == "passed"
    [node] = store.get_tree(run.id, "sum")
    system = node.messages[0]
    assert system.role == "system" and "Error Fixing Example 1" in system.content
    assert "ensures s >= 0" not in system.content and "Error Fixing Example 2" not in system.content
    store.close()
