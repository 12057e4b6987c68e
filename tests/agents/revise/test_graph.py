"""The ReVISE graph with a scripted model that scores its own decisions, the real sandbox and a SQLite store."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import pytest

from veriloop.agents.base import make_agent
from veriloop.agents.context import AgentContext
from veriloop.agents.revise import ReviseAgent, ReviseOptions
from veriloop.agents.revise.graph import decision_confidence, select_index, vote
from veriloop.agents.revise.prompts import EOS_TOKEN, REFINE_TOKEN, attempt_segment, normalize_code
from veriloop.agents.revise.state import Trajectory
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.llm.base import Backend
from veriloop.llm.codeblocks import fenced_block
from veriloop.records import Prompt, Run, RunStatus, Task
from veriloop.sandbox import Sandbox, get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedBackend, ScriptedScoringBackend

WRONG = "```python\ndef add(x: int, y: int):\n    return x - y\n```\n"
RIGHT = "```python\ndef add(x: int, y: int):\n    return x + y\n```\n"
Env = tuple[TrajectoryStore, Run, Sandbox]

RIGHT_WITH_DOC = '```python\ndef add(x: int, y: int):\n    """Sum."""\n    return x + y  # done\n```\n'


def last_attempt(prompt: str) -> str:
    """The text after the last decision token (the attempt being judged)."""
    return prompt.rsplit(REFINE_TOKEN, 1)[-1].rsplit(EOS_TOKEN, 1)[-1]


def judge(p_eos_right: float, p_eos_wrong: float) -> Callable[[str, Sequence[str]], Mapping[str, float]]:
    """A scorer that says [eos] with p_eos_right after a correct attempt and p_eos_wrong after a wrong one."""

    def score(prompt: str, tokens: Sequence[str]) -> Mapping[str, float]:
        p = p_eos_right if "x + y" in last_attempt(prompt) else p_eos_wrong
        return {EOS_TOKEN: math.log(p), REFINE_TOKEN: math.log(1.0 - p)}

    return score


def refine_to_right(prompt: Prompt) -> str:
    assert isinstance(prompt, str)
    return RIGHT if prompt.endswith(REFINE_TOKEN) else WRONG


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path})


@pytest.fixture
def task(settings: Settings) -> Task:
    return load_suite("humaneval", settings).select(ids=["HumanEval/53"]).tasks[0]


@pytest.fixture
async def env(settings: Settings, task: Task) -> AsyncIterator[Env]:
    store = TrajectoryStore.from_settings(settings)
    store.upsert_tasks([task])
    run = store.create_run(Run(agent="revise", suite="humaneval", model="scripted", status=RunStatus.RUNNING))
    sandbox = get_sandbox(settings)
    try:
        yield store, run, sandbox
    finally:
        await sandbox.aclose()
        store.close()


def context(settings: Settings, env: Env, backend: Backend) -> AgentContext:
    store, run, sandbox = env
    return AgentContext(settings, backend, sandbox, store, run)


@pytest.mark.bwrap
async def test_refine_after_a_wrong_answer_fixes_it(settings: Settings, task: Task, env: Env) -> None:
    backend = ScriptedScoringBackend([refine_to_right], scorer=judge(0.9, 0.2))
    agent = ReviseAgent(ReviseOptions(samples=2, max_refinements=2))
    attempt = await agent.solve(task, context(settings, env, backend))
    store, run, _ = env
    assert attempt.status == "passed"
    nodes = store.get_tree(run.id, task.id)
    roles = sorted(node.role for node in nodes)
    assert roles == ["generate", "generate", "refine", "refine", "select"] + ["verify"] * 4
    by_id = {node.id: node for node in nodes}
    for node in nodes:
        if node.role == "refine":
            decision = by_id[node.parent_id or ""]
            assert decision.role == "verify" and decision.metadata["decision"] == REFINE_TOKEN
            assert by_id[decision.parent_id or ""].exec_result is not None
            assert not by_id[decision.parent_id or ""].exec_result.passed  # type: ignore[union-attr]
            assert node.exec_result is not None and node.exec_result.passed
            # the refinement was conditioned on the wrong attempt and the [refine] decision
            assert node.messages[-1].role == "assistant" and node.messages[-1].content.endswith(REFINE_TOKEN)
    assert attempt.best_node_id is not None and by_id[attempt.best_node_id].role == "refine"
    generated = [prompt for prompt, _ in backend.requests]
    assert sum(isinstance(p, str) and p.endswith(REFINE_TOKEN) for p in generated) == 2
    assert len(backend.scored) == 4


@pytest.mark.bwrap
@pytest.mark.parametrize("structured", [True, False])
async def test_answers_and_refinements_carry_the_constraint_or_none(
    settings: Settings, task: Task, env: Env, structured: bool
) -> None:
    backend = ScriptedScoringBackend([refine_to_right], scorer=judge(0.9, 0.2))
    options = ReviseOptions(samples=2, max_refinements=1, structured=structured, checkpoint=False)
    assert (await ReviseAgent(options).solve(task, context(settings, env, backend))).status == "passed"
    refining = [isinstance(prompt, str) and prompt.endswith(REFINE_TOKEN) for prompt, _ in backend.requests]
    assert refining == [False, True, True]  # one request for the K first attempts, one per refinement
    expected = fenced_block("python", "def add(") if structured else None  # HumanEval/53's entry point
    assert [params.constraint for _, params in backend.requests] == [expected] * 3
    assert len(backend.scored) == 4  # the decisions are scored next tokens either way, never generated text


@pytest.mark.bwrap
async def test_confidence_aware_decoding_beats_the_majority(settings: Settings, task: Task, env: Env) -> None:
    replies = [WRONG, WRONG, RIGHT]
    results = {}
    for rule in ("majority", "confidence", "first"):
        backend = ScriptedScoringBackend([*replies, WRONG], scorer=judge(0.9, 0.1))
        options = ReviseOptions(samples=3, max_refinements=0, selection=rule, checkpoint=False)
        store, _, sandbox = env
        run = store.create_run(Run(agent="revise", suite="humaneval", model="scripted", status=RunStatus.RUNNING))
        ctx = AgentContext(settings, backend, sandbox, store, run)
        results[rule] = await ReviseAgent(options).solve(task, ctx)
        [select] = [node for node in store.get_tree(run.id, task.id) if node.role == "select"]
        assert select.metadata["selection"] == rule
        verify = [node for node in store.get_tree(run.id, task.id) if node.role == "verify"]
        capped = [node.metadata["capped"] for node in verify]
        assert capped == [True, True, False]  # wrong ones wanted [refine], the cap said stop
    assert results["majority"].status == "failed"  # two identical wrong answers outvote one right one
    assert results["confidence"].status == "passed"  # 0.9 > 0.1 + 0.1
    assert results["first"].status == "failed"


async def test_the_refinement_limit_caps_every_trajectory(settings: Settings, task: Task, env: Env) -> None:
    backend = ScriptedScoringBackend([WRONG], scorer=judge(0.1, 0.1))
    attempt = await ReviseAgent(ReviseOptions(samples=2, max_refinements=1)).solve(
        task, context(settings, env, backend)
    )
    store, run, _ = env
    assert attempt.status == "failed"
    verify = [node for node in store.get_tree(run.id, task.id) if node.role == "verify"]
    assert sorted((node.metadata["turn"], node.metadata["decision"]) for node in verify) == [
        (0, REFINE_TOKEN),
        (0, REFINE_TOKEN),
        (1, EOS_TOKEN),
        (1, EOS_TOKEN),
    ]


async def test_a_finished_thread_is_not_solved_again(settings: Settings, task: Task, env: Env) -> None:
    backend = ScriptedScoringBackend([refine_to_right], scorer=judge(0.9, 0.2))
    agent = ReviseAgent(ReviseOptions(samples=1))
    first = await agent.solve(task, context(settings, env, backend))
    calls = len(backend.requests)
    again = await agent.solve(task, context(settings, env, backend))
    assert len(backend.requests) == calls  # restored from the LangGraph checkpoint
    assert again.best_node_id == first.best_node_id


async def test_a_backend_that_cannot_score_is_a_config_error(settings: Settings, task: Task, env: Env) -> None:
    with pytest.raises(ConfigError, match="cannot score next tokens"):
        await ReviseAgent(ReviseOptions(checkpoint=False)).solve(task, context(settings, env, ScriptedBackend([RIGHT])))


def test_vote_weights_and_ties() -> None:
    assert vote(["a", "a", "b"], [1.0, 1.0, 1.0])[0] == 0
    assert vote(["a", "a", "b"], [0.1, 0.1, 0.9])[0] == 2
    assert vote(["a", "b", "b"], [0.5, 0.2, 0.3])[0] == 0  # tie: the earliest group
    assert vote(["a", "b", "b"], [0.1, 0.2, 0.3])[0] == 2  # the group's heaviest member


def test_select_index_groups_by_normalised_code() -> None:
    right = normalize_code("def add(x: int, y: int):\n    return x + y\n")
    assert normalize_code(RIGHT_WITH_DOC.split("\n", 1)[1].rsplit("```", 1)[0]) == right
    assert normalize_code('def add(x: int, y: int):\n    """Sum."""\n    # comment\n    return x+y') == right
    trajectories = [
        Trajectory(index=0, codes=["def f():\n    return 1"], confidences=[0.3]),
        Trajectory(index=1, codes=["def f():\n  return 2"], confidences=[0.4]),
        Trajectory(index=2, codes=['def f():\n    "doc"\n    return 1'], confidences=[0.2]),
    ]
    assert select_index(trajectories, "majority")[0] == 0
    assert select_index(trajectories, "confidence")[0] == 0  # 0.3 + 0.2 > 0.4
    assert select_index(trajectories, "first")[0] == 0
    trajectories[1].confidences = [0.6]
    assert select_index(trajectories, "confidence")[0] == 1


def test_attempt_segment_closes_the_block() -> None:
    assert attempt_segment("```python\nx = 1") == "```python\nx = 1\n```"
    assert attempt_segment("```python\nx = 1\n```\n") == "```python\nx = 1\n```"
    assert attempt_segment("no code\n") == "no code"


def test_options_come_from_the_registry() -> None:
    agent = make_agent("revise", {"samples": 3, "selection": "majority"})
    assert isinstance(agent, ReviseAgent) and agent.options.samples == 3
    with pytest.raises(ConfigError):
        make_agent("revise", {"sample": 3})


@pytest.mark.bwrap
async def test_confidence_is_p_eos_among_the_two_decisions(settings: Settings, task: Task, env: Env) -> None:
    """A model trained on the decisions against each other puts little of the vocabulary's mass on either; the
    stored confidence (and the vote's weight) is p([eos]) / (p([eos]) + p([refine])), the raw pair is kept."""

    def small(prompt: str, tokens: Sequence[str]) -> Mapping[str, float]:
        return {EOS_TOKEN: math.log(3e-6), REFINE_TOKEN: math.log(1e-6)}

    backend = ScriptedScoringBackend([RIGHT], scorer=small)
    options = ReviseOptions(samples=1, max_refinements=1, checkpoint=False)
    assert (await ReviseAgent(options).solve(task, context(settings, env, backend))).status == "passed"
    store, run, _ = env
    [decision] = [node for node in store.get_tree(run.id, task.id) if node.role == "verify"]
    assert decision.metadata["decision"] == EOS_TOKEN
    assert decision.score == pytest.approx(0.75) and decision.metadata["confidence"] == pytest.approx(0.75)
    assert decision.metadata["p_eos"] == pytest.approx(3e-6) and decision.metadata["p_refine"] == pytest.approx(1e-6)
    assert decision_confidence(0.0, 0.0) == 0.5
