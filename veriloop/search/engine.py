"""Tree search over refinements, generic over any scored verifier: Treefinement and its baselines.

    frontier <- [root] * width
    for level in range(depth):
        children <- one sample per frontier entry (the root prompt, or the entry's history + its feedback)
        score every child with the verifier; store it
        if some child scores >= 1: stop, return the first
        survivors <- children with score >= 0
        frontier <- width draws, with replacement, from *all* survivors by softmax(weight / T)
                    (no survivor: width uniform draws from the rejected children that proposed a program,
                    refined with the parser's or the rule's message, as AlphaVerus's error triplets do;
                    only when no child proposed anything does the next level retry the same frontier)

The searches differ only in the weight and the shape (REBASE: Wu et al., arXiv 2408.00724, as AlphaVerus's
`inference/rebase.py` runs it): `treefinement` weighs by score (REBASE); `breadth` weighs every survivor the same;
`beam` keeps the top k; `best_of_n` never refines (every frontier entry is the root); `linear` is width 1 over width x
depth levels. Each gets the same LLM-call budget (width x depth samples) and stops early at the first success.

Every child is stored as a Node as soon as it is scored, with its search id, level and slot in its
metadata; the frontier of each level is a deterministic draw (seeded by search id and level), so a search
restarted after a crash rebuilds its frontier from the stored nodes and generates only the missing slots.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from veriloop.llm.base import Backend
from veriloop.records import Completion, Constraint, Message, Node, Prompt, SamplingParams, VerifyResult, new_id
from veriloop.search.budget import Budget, Spend
from veriloop.search.score import NODE_TEMPERATURE, Weighting, resample
from veriloop.store import TrajectoryStore

SearchKind = Literal["treefinement", "breadth", "beam", "best_of_n", "linear"]
SEARCHES: tuple[SearchKind, ...] = ("treefinement", "breadth", "beam", "best_of_n", "linear")
WEIGHTING: dict[SearchKind, Weighting] = {
    "treefinement": "rebase",
    "breadth": "uniform",
    "beam": "top_k",
    "best_of_n": "rebase",
    "linear": "rebase",
}


@dataclass
class Evaluation:
    """A scored program: the verifier's result, the node score, the feedback the next prompt shows."""

    result: VerifyResult
    score: float
    feedback: str
    verifier_calls: int = 1


class Problem(Protocol):
    """What a search explores: how to ask for programs, how to ask for a fix, how to judge one."""

    def root_messages(self) -> list[Message]:
        """The first prompt (a task, or a fix request for a given program)."""
        ...

    def refine_messages(self, path: Sequence[Node]) -> list[Message]:
        """The prompt that refines the last node of `path` (root first), showing its verifier feedback."""
        ...

    def program(self, reply: str) -> str:
        """The program a reply proposes (its code block, re-attached to a fixed prefix where needed)."""
        ...

    async def evaluate(self, code: str) -> Evaluation: ...


@dataclass(frozen=True)
class SearchConfig:
    """One search's shape; defaults are AlphaVerus's (width 32, depth 8, T=0.7 sampling, node T=0.1)."""

    kind: SearchKind = "treefinement"
    width: int = 32
    depth: int = 8
    temperature: float = 0.7
    node_temperature: float = NODE_TEMPERATURE
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()
    top_k: int = 4
    seed: int = 0
    budget: Budget | None = None
    """None: width x depth LLM calls, the same for every kind."""
    verify_concurrency: int = 2

    def levels(self) -> tuple[int, int]:
        """(frontier width, levels) this kind runs: linear spends its budget one sample at a time."""
        if self.kind == "linear":
            return 1, self.width * self.depth
        return self.width, self.depth

    def effective_budget(self) -> Budget:
        return self.budget if self.budget is not None else Budget(llm_calls=self.width * self.depth)

    constraint: Constraint | None = None
    """Structure every sample must have (a grammar of the reply), enforced by the backend while decoding."""

    def params(self, n: int) -> SamplingParams:
        return SamplingParams(
            n=n,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            stop=list(self.stop),
            constraint=self.constraint,
        )

    def as_dict(self) -> dict[str, Any]:
        budget = self.effective_budget()
        return {
            "kind": self.kind,
            "width": self.width,
            "depth": self.depth,
            "temperature": self.temperature,
            "node_temperature": self.node_temperature,
            "max_tokens": self.max_tokens,
            "top_k": self.top_k,
            "seed": self.seed,
            "budget": {k: v for k, v in vars(budget).items() if v is not None},
        }


@dataclass
class SearchOutcome:
    """How a search ended: its best node, whether it solved the task, and what it cost."""

    search_id: str
    kind: SearchKind
    best: Node | None
    solved: bool
    spend: Spend
    calls_to_success: int | None
    stop_reason: str
    nodes: list[Node] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "search_id": self.search_id,
            "kind": self.kind,
            "solved": self.solved,
            "best_score": None if self.best is None else self.best.score,
            "calls_to_success": self.calls_to_success,
            "stop_reason": self.stop_reason,
            "nodes": len(self.nodes),
            "max_depth": max((node.depth for node in self.nodes), default=None),
            **self.spend.as_dict(),
        }


def _path(node: Node, by_id: dict[str, Node]) -> list[Node]:
    path = [node]
    while path[-1].parent_id is not None and path[-1].parent_id in by_id:
        path.append(by_id[path[-1].parent_id])
    return path[::-1]


def _node_spend(node: Node) -> Spend:
    return Spend.from_dict(node.metadata.get("spend", {}))


class TreeSearch:
    """One search for one task of one run; `await run()` returns its outcome (resuming stored progress)."""

    def __init__(
        self,
        problem: Problem,
        backend: Backend,
        store: TrajectoryStore,
        *,
        run_id: str,
        task_id: str,
        config: SearchConfig,
        search_id: str | None = None,
        parent: Node | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.problem = problem
        self.backend = backend
        self.store = store
        self.run_id = run_id
        self.task_id = task_id
        self.config = config
        self.search_id = search_id or new_id()
        self.parent = parent
        self.metadata = metadata or {}
        self._gate = asyncio.Semaphore(config.verify_concurrency)
        self._started = time.perf_counter()

    def stored(self) -> list[Node]:
        """This search's nodes already in the store (from an earlier, interrupted try)."""
        return [
            node
            for node in self.store.get_tree(self.run_id, self.task_id)
            if node.metadata.get("search_id") == self.search_id
        ]

    def _rng(self, level: int) -> random.Random:
        return random.Random(f"{self.config.seed}:{self.search_id}:{level}")

    async def run(self) -> SearchOutcome:
        config = self.config
        width, levels = config.levels()
        budget = config.effective_budget()
        stored = self.stored()
        by_id: dict[str, Node] = {node.id: node for node in stored}
        if self.parent is not None:
            by_id[self.parent.id] = self.parent
        by_level: dict[int, dict[int, Node]] = {}
        for node in stored:
            by_level.setdefault(int(node.metadata["level"]), {})[int(node.metadata["slot"])] = node
        spend = Spend()
        for node in stored:
            spend.add(_node_spend(node))
        offset = max((float(node.metadata.get("elapsed_s", 0.0)) for node in stored), default=0.0)
        started = self._started = time.perf_counter() - offset
        frontier: list[Node | None] = [self.parent] * width
        mine: list[Node] = []
        calls_before = 0
        for level in range(levels):
            done = by_level.get(level, {})
            if config.kind == "best_of_n":
                frontier = [self.parent] * width
            missing = [slot for slot in range(width) if slot not in done]
            spend.wall_s = time.perf_counter() - started
            reason = budget.exhausted(spend)
            left = budget.calls_left(spend)
            if missing and (reason or left == 0):
                return self._outcome(mine, spend, None, f"budget:{reason or 'llm_calls'}")
            if left is not None:
                missing = missing[:left]
            new = await self._expand(level, frontier, missing, by_id, spend, started)
            children = sorted([*done.values(), *new], key=lambda node: int(node.metadata["slot"]))
            mine.extend(children)
            for child in children:
                by_id[child.id] = child
            winner = next((child for child in children if (child.score or -1.0) >= 1.0), None)
            if winner is not None:
                calls = calls_before + int(winner.metadata["slot"]) + 1
                return self._outcome(mine, spend, winner, "solved", calls)
            calls_before += len(children)
            picks = resample(
                [child.score if child.score is not None else -1.0 for child in children],
                width,
                self._rng(level),
                temperature=config.node_temperature,
                weighting=WEIGHTING[config.kind],
                top_k=config.top_k,
            )
            if not picks and config.kind != "best_of_n":
                picks = refine_rejected(children, width, self._rng(level))
            if picks:
                frontier = [children[index] for index in picks]
        return self._outcome(mine, spend, None, "depth")

    async def _expand(
        self,
        level: int,
        frontier: list[Node | None],
        slots: list[int],
        by_id: dict[str, Node],
        spend: Spend,
        started: float,
    ) -> list[Node]:
        """Sample one child for each slot, score and store each; returns them in slot order."""
        if not slots:
            return []
        roots = [slot for slot in slots if frontier[slot] is self.parent]
        requests: list[tuple[list[int], list[Message], int]] = []
        if roots:  # the root prompt is one request for all its samples
            requests.append((roots, self._prompt(None, by_id), len(roots)))
        for slot in slots:
            if frontier[slot] is not self.parent:
                requests.append(([slot], self._prompt(frontier[slot], by_id), 1))
        grouped: dict[int, list[tuple[list[int], list[Message], int]]] = {}
        for request in requests:
            grouped.setdefault(request[2], []).append(request)
        replies: list[tuple[int, list[Message], Completion]] = []
        for n, group in grouped.items():
            prompts: list[Prompt] = [messages for _, messages, _ in group]
            results = await self.backend.generate(prompts, self.config.params(n))
            for (request_slots, messages, _), completions in zip(group, results, strict=True):
                replies.extend(zip(request_slots, [messages] * n, completions, strict=True))

        async def one(slot: int, messages: list[Message], completion: Completion) -> Node:
            code = self.problem.program(completion.text)
            async with self._gate:
                began = time.perf_counter()
                evaluation = await self.problem.evaluate(code)
                seconds = time.perf_counter() - began
            parent = frontier[slot]
            own = Spend(
                llm_calls=1,
                tokens=completion.usage.total_tokens,
                verifier_calls=evaluation.verifier_calls,
                verifier_s=seconds,
            )
            spend.add(own)
            node = Node(
                run_id=self.run_id,
                task_id=self.task_id,
                parent_id=parent.id if parent is not None else None,
                depth=parent.depth + 1 if parent is not None else 0,
                role="refine" if parent is not None else "generate",
                messages=messages,
                completion=completion,
                code=code,
                verify_result=evaluation.result,
                score=evaluation.score,
                metadata={
                    **self.metadata,
                    "search_id": self.search_id,
                    "search": self.config.kind,
                    "level": level,
                    "slot": slot,
                    "feedback": evaluation.feedback,
                    "spend": own.as_dict(),
                    "elapsed_s": round(time.perf_counter() - started, 3),
                },
            )
            await asyncio.to_thread(self.store.add_node, node)
            return node

        nodes = await asyncio.gather(*(one(slot, messages, completion) for slot, messages, completion in replies))
        return sorted(nodes, key=lambda node: int(node.metadata["slot"]))

    def _prompt(self, node: Node | None, by_id: dict[str, Node]) -> list[Message]:
        if node is None:
            return self.problem.root_messages()
        return self.problem.refine_messages(_path(node, by_id))

    def _outcome(
        self, nodes: list[Node], spend: Spend, winner: Node | None, reason: str, calls: int | None = None
    ) -> SearchOutcome:
        spend.wall_s = time.perf_counter() - self._started
        scored = [node for node in nodes if node.score is not None]
        best = winner or max(scored, key=lambda node: node.score or -1.0, default=None)
        return SearchOutcome(
            search_id=self.search_id,
            kind=self.config.kind,
            best=best,
            solved=winner is not None,
            spend=spend,
            calls_to_success=calls,
            stop_reason=reason,
            nodes=nodes,
        )


def refine_rejected(children: Sequence[Node], width: int, rng: random.Random) -> list[int]:
    """Frontier indices when every child was discarded: uniform draws from those that proposed a program.

    A node rejected before the verifier ran (a syntax error, a rule of the spec guard) still carries the
    message that rejected it; refining it with that message is how a small model gets from prose or a
    malformed program to one the verifier can judge, instead of restarting from the root every level.
    """
    proposed = [index for index, child in enumerate(children) if (child.code or "").strip()]
    if not proposed:
        return []
    return sorted(rng.choices(proposed, k=width))


async def run_search(
    problem: Problem,
    backend: Backend,
    store: TrajectoryStore,
    *,
    run_id: str,
    task_id: str,
    config: SearchConfig,
    search_id: str | None = None,
    parent: Node | None = None,
    metadata: dict[str, Any] | None = None,
) -> SearchOutcome:
    """Run (or resume, when `search_id` names stored progress) one search and return how it ended."""
    search = TreeSearch(
        problem,
        backend,
        store,
        run_id=run_id,
        task_id=task_id,
        config=config,
        search_id=search_id,
        parent=parent,
        metadata=metadata,
    )
    return await search.run()
