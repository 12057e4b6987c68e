"""Houdini pruning of the model's hint candidates by the verifier's own diagnostics (no LLM call).

Houdini (Flanagan & Leino, FME 2001) takes a set of candidate invariants, drops each one the verifier refutes
and checks again until nothing more is refuted; what is left is inductive. Here the candidates are the hint
lines the model wrote across a search's samples (siblings and refinements, unioned per loop, most frequent
first); Dafny names a refuted hint by the line of its error ("might not hold on entry", "might not be
maintained", an out-of-range index or a type error inside the hint), so each step removes exactly the blamed
line, and a blamed `decreases` is replaced by the next one the model proposed. Every step is a stored
refinement node whose parent is the step before, so the tree's depth shows the pruning. Nothing is added
that the model did not write: pruning can only remove candidates.

Dafny 2.3 reports about one failing assertion per method and run (a second one can be spurious), so a step
removes the first hint blamed; `max_steps` and the search's verifier-seconds budget bound the cost. The same
loop prunes Nagini hints: Nagini names a refuted invariant by its line too ("Loop invariant might not be
preserved", "might not hold on entry", a list read without permission), and the problem's `HintLanguage` says
which lines are hints and how they are spliced.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from veriloop.agents.alphaverus.hints import DAFNY, HintLanguage, HintsProblem, Spliced, parse_hints
from veriloop.records import Node, VerifyStatus
from veriloop.search.budget import Spend
from veriloop.store import TrajectoryStore

MAX_CANDIDATES = 8
"""Invariants per loop kept from the union (the most frequent): bounds the Dafny runs pruning may need."""


@dataclass
class Pool:
    """Per loop (1-based): candidate invariants still standing, and `decreases` clauses in order of preference."""

    invariants: dict[int, list[str]]
    decreases: dict[int, list[str]]

    def hints(self) -> dict[int, list[str]]:
        """The hint set to check now: every standing invariant and the first standing `decreases`."""
        return {
            slot: [*self.invariants.get(slot, []), *self.decreases.get(slot, [])[:1]]
            for slot in sorted(set(self.invariants) | set(self.decreases))
        }

    def empty(self) -> bool:
        return not any(self.hints().values())

    def drop(self, blamed: set[tuple[int, str]]) -> None:
        for slot, hint in blamed:
            if hint in self.invariants.get(slot, []):
                self.invariants[slot].remove(hint)
            if hint in self.decreases.get(slot, []):
                self.decreases[slot].remove(hint)


def union(
    replies: Sequence[str],
    count: int,
    limit: int = MAX_CANDIDATES,
    *,
    language: HintLanguage = DAFNY,
    parse: Callable[[str], dict[int, list[str]]] | None = None,
) -> Pool:
    """The hint lines of all `replies` (read by `parse`, else the language's block parser), per loop,
    deduplicated and ordered by how many replies proposed them (ties: first proposed first); at most `limit`
    invariants per loop."""
    invariants: dict[int, Counter[str]] = {slot: Counter() for slot in range(1, count + 1)}
    decreases: dict[int, Counter[str]] = {slot: Counter() for slot in range(1, count + 1)}
    for reply in replies:
        parsed = parse(reply) if parse is not None else parse_hints(reply, count, language)
        for slot, lines in parsed.items():
            for line in dict.fromkeys(" ".join(line.split()) for line in lines):
                (decreases if line.startswith(language.decreases) else invariants)[slot][line] += 1
    return Pool(
        invariants={slot: [line for line, _ in counts.most_common(limit)] for slot, counts in invariants.items()},
        decreases={slot: [line for line, _ in counts.most_common()] for slot, counts in decreases.items()},
    )


def blamed(node: Node, spliced: Spliced, language: HintLanguage = DAFNY) -> set[tuple[int, str]]:
    """The hints the verifier's errors point at: an error on a hint's line blames that hint; a termination error
    on a loop's `while` line blames the loop's `decreases`; an error elsewhere blames none.

    Only the first blamable verification error counts: when Dafny 2.3 reports a second one in the same run it
    can be spurious (a true `invariant s == n * (n + 1) / 2` reported as failing on entry after a failing
    `decreases`). Front-end errors (parse, resolution, types) are reported together and all count."""
    result = node.verify_result
    if result is None:
        return set()
    found: set[tuple[int, str]] = set()
    for diagnostic in result.diagnostics:
        if diagnostic.severity != "error" or diagnostic.line is None:
            continue
        if diagnostic.line in spliced.hints:
            found.add(spliced.hints[diagnostic.line])
        elif diagnostic.line in spliced.loops and language.termination.search(diagnostic.message):
            slot = spliced.loops[diagnostic.line]
            found |= {
                (s, hint) for s, hint in spliced.hints.values() if s == slot and hint.startswith(language.decreases)
            }
        if found and result.status is not VerifyStatus.SYNTAX_ERROR:
            break
    return found


@dataclass
class Pruning:
    """What pruning did: its nodes (root first), whether the last one verified, and its spend."""

    nodes: list[Node] = field(default_factory=list)
    spend: Spend = field(default_factory=Spend)

    @property
    def solved(self) -> bool:
        return bool(self.nodes) and (self.nodes[-1].score or -1.0) >= 1.0


async def prune(
    problem: HintsProblem,
    pool: Pool,
    parent: Node,
    store: TrajectoryStore,
    *,
    search_id: str,
    sources: Sequence[str] = (),
    max_steps: int = 8,
    seconds: float | None = None,
) -> Pruning:
    """Check `pool`'s hints, drop what the verifier blames, check again: until verified, nothing is blamed, no
    hint is left, `max_steps` checks were made or `seconds` of verifier time are spent. Steps already stored
    under `search_id` (a resumed run) are returned as they are."""
    out = Pruning()
    done = [
        node
        for node in await asyncio.to_thread(store.get_tree, parent.run_id, parent.task_id)
        if node.metadata.get("search_id") == search_id and node.metadata.get("phase") == "prune"
    ]
    if done:  # a resumed run: the steps are deterministic and already stored
        out.nodes = sorted(done, key=lambda node: int(node.metadata["step"]))
        for node in out.nodes:
            out.spend.add(Spend.from_dict(node.metadata.get("spend", {})))
        return out
    previous = parent
    for step in range(max_steps):
        if pool.empty():
            break
        hints = pool.hints()
        spliced = problem.language.splice(problem.base, problem.slots, hints)
        code = spliced.code
        began = time.perf_counter()
        evaluation = await problem.evaluate(code)
        spent = time.perf_counter() - began
        own = Spend(verifier_calls=evaluation.verifier_calls, verifier_s=spent)
        out.spend.add(own)
        node = previous.child(
            "refine",
            code=code,
            verify_result=evaluation.result,
            score=evaluation.score,
            metadata={
                "phase": "prune",
                "search_id": search_id,
                "step": step,
                "hints": {str(slot): lines for slot, lines in hints.items()},
                "sources": list(sources) if step == 0 else [],
                "feedback": evaluation.feedback,
                "spend": own.as_dict(),
            },
        )
        found = blamed(node, spliced, problem.language)
        node.metadata["blamed"] = sorted(hint for _, hint in found)
        await asyncio.to_thread(store.add_node, node)
        out.nodes.append(node)
        previous = node
        if (node.score or -1.0) >= 1.0 or not found:
            break
        pool.drop(found)
        if seconds is not None and out.spend.verifier_s >= seconds:
            break
    return out
