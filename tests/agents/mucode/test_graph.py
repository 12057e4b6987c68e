"""μCode's episode graph with a scripted model, the real sandbox and a real SQLite store."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from veriloop.agents.base import make_agent
from veriloop.agents.context import AgentContext
from veriloop.agents.mucode import MuCodeAgent, MuCodeOptions, prompts
from veriloop.agents.mucode.graph import Deps, Scorer, choose, selection_scores
from veriloop.agents.mucode.state import Sample
from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.records import Attempt, Completion, ExecResult, ExecStatus, Node, Prompt, Run, RunStatus, Task
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedBackend, prompt_text

GOOD = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
BAD = "```python\ndef add(x: int, y: int):\n    return x - y\n```"
PUBLIC_ONLY = "```python\ndef add(x: int, y: int):\n    return y\n```"  # add(0, 1) == 1 holds; add(2, 3) does not


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path})


def _task(task_id: str = "HumanEval/53") -> Task:
    return load_suite("humaneval", load_settings()).select(ids=[task_id]).tasks[0]


def _sample(passed: bool, verifier: float | None = None) -> Sample:
    status = ExecStatus.PASSED if passed else ExecStatus.FAILED
    return Sample("id", [], Completion(text=""), "", public=ExecResult(status=status), verifier=verifier)


async def _solve(
    settings: Settings, backend: ScriptedBackend, options: MuCodeOptions, verifier: Scorer | None = None
) -> tuple[Attempt, list[Node]]:
    store = TrajectoryStore.from_settings(settings)
    sandbox = get_sandbox(settings)
    run = store.create_run(Run(agent="mucode", suite="humaneval", model="scripted", status=RunStatus.RUNNING))
    store.upsert_tasks([_task()])
    ctx = AgentContext(settings, backend, sandbox, store, run)
    agent = MuCodeAgent(options)
    agent._verifier = verifier
    try:
        attempt = await agent.solve(_task(), ctx)
    finally:
        await sandbox.aclose()
    nodes = store.get_tree(run.id, "HumanEval/53")
    store.close()
    return attempt, nodes


def test_selection_rules() -> None:
    samples = [_sample(False, 5.0), _sample(True, -1.0), _sample(True, 2.0)]
    assert selection_scores(samples, "pt") == [0.0, 1.0, 1.0]
    assert selection_scores(samples, "pt+lv") == [5.0, 99.0, 102.0]
    rng = random.Random(0)
    assert choose(samples, "pt", rng) == 1  # first of the tied passing candidates
    assert choose(samples, "lv", rng) == 0  # the verifier alone prefers the failing one
    assert choose(samples, "pt+lv", rng) == 2  # public pass dominates, the verifier breaks the tie
    draws = {choose(samples, "random", random.Random(seed)) for seed in range(20)}
    assert draws == {0, 1, 2}


def test_options_need_a_verifier_for_lv() -> None:
    with pytest.raises(ConfigError, match="needs --verifier-model"):
        make_agent("mucode", {"select": "pt+lv"})
    assert make_agent("mucode", {"select": "lv", "verifier_model": "checkpoint:abc"}).options.select == "lv"
    assert MuCodeOptions(n=5).first_temperature() == 0.7 and MuCodeOptions().first_temperature() == 0.0


@pytest.mark.bwrap
async def test_feedback_turn_then_success_ends_the_episode(settings: Settings) -> None:
    backend = ScriptedBackend([BAD, GOOD, BAD])
    attempt, nodes = await _solve(settings, backend, MuCodeOptions(turns=3))
    assert attempt.status == "passed" and len(backend.requests) == 2
    by_role = {node.role: node for node in nodes}
    assert set(by_role) == {"generate", "refine", "final"}
    assert by_role["refine"].parent_id == by_role["generate"].id and by_role["final"].parent_id == by_role["refine"].id
    assert by_role["final"].exec_result is not None and by_role["final"].exec_result.passed
    assert by_role["generate"].metadata["public_passed"] is False and by_role["refine"].metadata["selected"]
    second, _ = backend.requests[1]
    assert isinstance(second, list) and [m.role for m in second] == ["user", "assistant", "user"]
    assert second[-1].content.startswith("Feedback: AssertionError") and "add(0, 1)" in second[-1].content
    assert "assert add(0, 1) == 1" in second[0].content  # the public test is shown, named by its function


@pytest.mark.slow
async def test_latest_history_shows_only_the_last_code(settings: Settings) -> None:
    backend = ScriptedBackend([BAD, BAD, BAD])
    attempt, nodes = await _solve(settings, backend, MuCodeOptions(turns=3, history="latest"))
    assert attempt.status == "failed" and len(backend.requests) == 3
    third, _ = backend.requests[2]
    assert isinstance(third, list) and len(third) == 1 and "Your previous attempt" in third[0].content
    assert [node.depth for node in nodes if node.role != "final"] == [0, 1, 2]
    [final] = [node for node in nodes if node.role == "final"]
    assert final.metadata["turn"] == 3 and final.exec_result is not None and not final.exec_result.passed


@pytest.mark.bwrap
async def test_private_tests_decide_after_a_public_pass(settings: Settings) -> None:
    attempt, nodes = await _solve(settings, ScriptedBackend([PUBLIC_ONLY, GOOD]), MuCodeOptions(turns=3))
    assert attempt.status == "failed"  # the public test passed, so the episode ended; the private ones failed
    assert [node.role for node in nodes] == ["generate", "final"]


@pytest.mark.bwrap
async def test_best_of_n_keeps_the_public_pass_and_stores_every_candidate(settings: Settings) -> None:
    replies = iter([BAD, GOOD, BAD])
    backend = ScriptedBackend([lambda _prompt: next(replies)])
    attempt, nodes = await _solve(settings, backend, MuCodeOptions(n=3, select="pt"))
    assert attempt.status == "passed"
    candidates = [node for node in nodes if node.role == "generate"]
    assert len(candidates) == 3 and [node.metadata["selected"] for node in candidates].count(True) == 1
    [chosen] = [node for node in candidates if node.metadata["selected"]]
    assert chosen.metadata["candidate"] == 1 and chosen.score == 1.0
    assert backend.requests[0][1].n == 3 and backend.requests[0][1].temperature == 0.7


class ScriptedVerifier:
    """Prefers the reply that subtracts (a wrong verifier), to see lv follow it and pt+lv overrule it."""

    async def score(self, task: Task, replies: list[str]) -> list[float]:
        return [1.0 if "x - y" in reply else 0.0 for reply in replies]


@pytest.mark.bwrap
@pytest.mark.parametrize(("rule", "status"), [("lv", "failed"), ("pt+lv", "passed")])
async def test_verifier_rules(settings: Settings, rule: str, status: str) -> None:
    def reply(prompt: Prompt) -> str:
        return GOOD if reply.calls % 2 else BAD  # type: ignore[attr-defined]

    def counted(prompt: Prompt) -> str:
        reply.calls += 1  # type: ignore[attr-defined]
        return reply(prompt)

    reply.calls = 0  # type: ignore[attr-defined]
    options = MuCodeOptions(n=2, turns=1, select=rule, verifier_model="checkpoint:unused")
    attempt, nodes = await _solve(settings, ScriptedBackend([counted]), options, ScriptedVerifier())
    assert attempt.status == status
    scores = sorted(node.metadata["verifier_score"] for node in nodes if node.role == "generate")
    assert scores == [0.0, 1.0]


def test_prompts_show_mbpp_tests_once() -> None:
    task = Task(
        id="MBPP/1",
        suite="mbpp",
        prompt="Write add.\n\nassert add(1, 2) == 3\n",
        entry_point="add",
        tests="assert add(1, 2) == 3\n",
        public_tests="assert add(1, 2) == 3\n",
    )
    text = prompts.first_turn(task).content
    assert text.count("assert add(1, 2) == 3") == 1 and "```python\nWrite" not in text
    assert prompt_text([prompts.first_turn(task)]) == text


@pytest.mark.slow
def test_run_mucode_cli_with_scripted_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--home", str(tmp_path), "--backend", "scripted", "run", "mucode", "--suite", "humaneval-test"]
    assert main([*args, "--limit", "2", "--turns", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["agent"] == "mucode" and report["total"] == 2 and report["status"] == "finished"
    assert main([*args, "--select", "lv", "--json"]) != 0
    assert "needs --verifier-model" in capsys.readouterr().err


def test_deps_carry_the_context(settings: Settings) -> None:
    ctx = AgentContext(
        settings,
        ScriptedBackend(),
        get_sandbox(settings),
        TrajectoryStore.from_settings(settings),
        Run(agent="mucode", suite="humaneval", model="scripted"),
    )
    assert Deps(ctx=ctx, options=MuCodeOptions()).verifier is None
    ctx.store.close()


async def test_long_episodes_fit_the_graph_step_limit(settings: Settings) -> None:
    backend = ScriptedBackend([BAD])
    attempt, nodes = await _solve(settings, backend, MuCodeOptions(turns=8))
    assert attempt.status == "failed" and len(backend.requests) == 8 and max(node.depth for node in nodes) == 8
