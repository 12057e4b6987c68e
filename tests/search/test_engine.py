"""Tree searches with a scripted model and a scripted scorer, on a real SQLite store: stopping, budgets,
frontier shape per search, resume after a crash, and the networkx view of the stored tree."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from veriloop.config import load_settings
from veriloop.errors import BackendError
from veriloop.records import Message, Node, Prompt, Run, VerifyResult, VerifyStatus
from veriloop.search import SEARCHES, Budget, Evaluation, SearchConfig, run_search
from veriloop.search.tree import load_tree, roots
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend, prompt_text


class NumberProblem:
    """A program is a number; its score is that number (>= 1 solves); refining asks again with feedback."""

    def root_messages(self) -> list[Message]:
        return [Message(role="user", content="root")]

    def refine_messages(self, path: Sequence[Node]) -> list[Message]:
        return [Message(role="user", content=f"refine {path[-1].code} at {len(path)}")]

    def program(self, reply: str) -> str:
        return reply.strip()

    async def evaluate(self, code: str) -> Evaluation:
        score = float(code)
        status = VerifyStatus.VERIFIED if score >= 1 else VerifyStatus.FAILED
        result = VerifyResult(status=status, verified=1, errors=0 if score >= 1 else 1, score=score)
        return Evaluation(result=result, score=score, feedback=f"score {score}")


@pytest.fixture
def store(tmp_path: Path) -> TrajectoryStore:
    return TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path}))


def new_run(store: TrajectoryStore) -> Run:
    return store.create_run(Run(agent="search", suite="numbers", model="scripted"))


def by_depth(replies: dict[int, str]) -> ScriptedBackend:
    """Root prompts get replies[0]; a refinement of a path of length L gets replies[L]."""

    def reply(prompt: Prompt) -> str:
        text = prompt_text(prompt)
        if text == "root":
            return replies[0]
        depth = int(re.search(r"at (\d+)", text).group(1))  # type: ignore[union-attr]
        return replies.get(depth, "0.2")

    return ScriptedBackend([reply])


async def test_treefinement_stops_at_the_first_success(store: TrajectoryStore) -> None:
    run = new_run(store)
    backend = by_depth({0: "0.5", 1: "1.0"})
    config = SearchConfig(width=4, depth=3)
    outcome = await run_search(NumberProblem(), backend, store, run_id=run.id, task_id="t", config=config)
    assert outcome.solved and outcome.stop_reason == "solved"
    assert outcome.calls_to_success == 5  # 4 roots, then the first refinement
    assert outcome.spend.llm_calls == 8 and outcome.spend.verifier_calls == 8
    assert outcome.best is not None and outcome.best.score == 1.0
    graph = load_tree(store, run.id, "t")
    assert graph.number_of_nodes() == 8 and graph.number_of_edges() == 4
    assert len(roots(graph)) == 4
    assert all(graph.nodes[n]["search"] == "treefinement" for n in graph.nodes)
    # the first request is one prompt with n = width; refinements are one sample each
    assert backend.requests[0][1].n == 4 and all(params.n == 1 for _, params in backend.requests[1:])


async def test_refinement_prompts_come_from_survivors_only(store: TrajectoryStore) -> None:
    run = new_run(store)
    replies = iter(["-1", "0.3", "-1", "0.3"])

    def reply(prompt: Prompt) -> str:
        return next(replies, "0.2") if prompt_text(prompt) == "root" else "0.2"

    backend = ScriptedBackend([reply])
    await run_search(NumberProblem(), backend, store, run_id=run.id, task_id="t", config=SearchConfig(width=4, depth=2))
    refined = [prompt_text(prompt) for prompt, _ in backend.requests[1:]]
    assert refined and all(text == "refine 0.3 at 1" for text in refined)


@pytest.mark.parametrize("kind", SEARCHES)
async def test_every_search_spends_the_same_budget(store: TrajectoryStore, kind: str) -> None:
    run = new_run(store)
    backend = by_depth({0: "0.4", 1: "0.5", 2: "0.6"})
    config = SearchConfig(kind=kind, width=3, depth=3)  # type: ignore[arg-type]
    outcome = await run_search(NumberProblem(), backend, store, run_id=run.id, task_id="t", config=config)
    assert not outcome.solved and outcome.spend.llm_calls == 9
    assert outcome.best is not None and outcome.best.score is not None
    nodes = store.get_tree(run.id, "t")
    assert len(nodes) == 9
    if kind == "best_of_n":
        assert {prompt_text(prompt) for prompt, _ in backend.requests} == {"root"}
        assert max(node.depth for node in nodes) == 0
    if kind == "linear":
        assert max(node.depth for node in nodes) == 8  # one chain
    if kind in ("treefinement", "breadth", "beam"):
        assert max(node.depth for node in nodes) == 2


async def test_budget_limits_stop_a_search(store: TrajectoryStore) -> None:
    run = new_run(store)
    config = SearchConfig(width=4, depth=5, budget=Budget(llm_calls=6))
    outcome = await run_search(NumberProblem(), by_depth({0: "0.4"}), store, run_id=run.id, task_id="t", config=config)
    assert outcome.spend.llm_calls == 6 and outcome.stop_reason == "budget:llm_calls"
    config = SearchConfig(width=2, depth=5, budget=Budget(verifier_calls=3))
    outcome = await run_search(NumberProblem(), by_depth({0: "0.4"}), store, run_id=run.id, task_id="u", config=config)
    assert outcome.spend.verifier_calls == 4 and outcome.stop_reason == "budget:verifier_calls"


class Crash(ScriptedBackend):
    """Fails once a number of samples has been served: a killed process, as the search sees it."""

    def __init__(self, inner: ScriptedBackend, after: int) -> None:
        super().__init__()
        self.inner = inner
        self.left = after

    async def generate(self, requests, params):  # type: ignore[no-untyped-def]
        samples = len(requests) * params.n
        if samples > self.left:
            raise BackendError("the process died")
        self.left -= samples
        return await self.inner.generate(requests, params)


async def test_resume_rebuilds_the_frontier_and_skips_stored_nodes(store: TrajectoryStore) -> None:
    replies = {0: "0.3", 1: "0.5", 2: "0.7", 3: "0.8"}
    config = SearchConfig(width=3, depth=4, seed=3)
    reference_run = new_run(store)
    reference = await run_search(
        NumberProblem(),
        by_depth(replies),
        store,
        run_id=reference_run.id,
        task_id="t",
        config=config,
        search_id="fixed",
    )
    run = new_run(store)
    with pytest.raises(BackendError):
        await run_search(
            NumberProblem(),
            Crash(by_depth(replies), after=7),
            store,
            run_id=run.id,
            task_id="t",
            config=config,
            search_id="fixed",
        )
    assert len(store.get_tree(run.id, "t")) == 6  # two whole levels were stored before the crash
    second = by_depth(replies)
    resumed = await run_search(
        NumberProblem(), second, store, run_id=run.id, task_id="t", config=config, search_id="fixed"
    )
    assert sum(params.n for _, params in second.requests) == 6  # only the missing levels
    assert resumed.spend.llm_calls == reference.spend.llm_calls == 12
    shape = [(n.metadata["level"], n.metadata["slot"], n.code, n.depth) for n in store.get_tree(run.id, "t")]
    stored = store.get_tree(reference_run.id, "t")
    expected = [(n.metadata["level"], n.metadata["slot"], n.code, n.depth) for n in stored]
    assert sorted(shape) == sorted(expected)


class SyntaxProblem(NumberProblem):
    """Prose and malformed numbers are rejected before any verifier runs (score -1, with the parser's message)."""

    def refine_messages(self, path: Sequence[Node]) -> list[Message]:
        feedback = path[-1].metadata["feedback"]
        return [Message(role="user", content=f"refine {path[-1].code} at {len(path)} because {feedback}")]

    async def evaluate(self, code: str) -> Evaluation:
        try:
            return await super().evaluate(code)
        except ValueError:
            result = VerifyResult(status=VerifyStatus.SYNTAX_ERROR, score=-1.0, reason=f"cannot parse {code!r}")
            return Evaluation(
                result=result, score=-1.0, feedback=f"parse error: {code!r} is not a number", verifier_calls=0
            )


@pytest.mark.parametrize("kind", ["treefinement", "breadth", "beam", "linear"])
async def test_rejected_nodes_are_refined_with_their_message(store: TrajectoryStore, kind: str) -> None:
    seen: list[str] = []

    def reply(prompt: Prompt) -> str:
        text = prompt_text(prompt)
        seen.append(text)
        if text == "root":
            return "Here is my answer: a number"
        return "1.0" if "parse error" in text and "at 2" in text else "still prose"

    run = new_run(store)
    config = SearchConfig(kind=kind, width=2, depth=4)  # type: ignore[arg-type]
    outcome = await run_search(
        SyntaxProblem(), ScriptedBackend([reply]), store, run_id=run.id, task_id="t", config=config
    )
    assert outcome.solved, [node.code for node in outcome.nodes]
    assert outcome.best is not None and outcome.best.depth == 2 and outcome.best.role == "refine"
    assert outcome.summary()["max_depth"] == 2
    assert any("parse error" in text for text in seen)
    assert seen.count("root") == config.levels()[0]  # one root level, never restarted from the root


async def test_best_of_n_never_refines_rejected_nodes(store: TrajectoryStore) -> None:
    run = new_run(store)
    backend = ScriptedBackend([lambda prompt: "prose"])
    outcome = await run_search(
        SyntaxProblem(),
        backend,
        store,
        run_id=run.id,
        task_id="t",
        config=SearchConfig(kind="best_of_n", width=2, depth=3),
    )
    assert not outcome.solved and {node.depth for node in outcome.nodes} == {0}
