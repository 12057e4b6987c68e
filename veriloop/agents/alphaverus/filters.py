"""AlphaVerus's defences against misaligned programs (Aggarwal et al., arXiv 2412.06176), beyond the spec guard.

- Exploit model: shown only the spec prefix of the last method (everything up to its opening brace), an
  LLM proposes trivial bodies; any that verifies (0 errors, > 0 verified) marks the spec misaligned.
- Equivalence judge: n votes on "do the two programs compute the same results?"; the translation is faulty
  when `no >= yes` or `no >= 3` (an unreadable answer counts for neither).

Every probe and vote is stored as a Node under the candidate (roles `exploit`, `judge`): the critiques.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veriloop.agents.alphaverus.prompts import exploit_messages, fence, judge_answer, judge_messages
from veriloop.llm.base import Backend
from veriloop.llm.codeblocks import extract_code
from veriloop.records import Candidate, Message, Node, SamplingParams, Task, VerifyStatus
from veriloop.store import TrajectoryStore
from veriloop.verifiers.base import Verifier
from veriloop.verifiers.target import verifier_target

EXPLOIT_PARAMS = SamplingParams(temperature=0.7, max_tokens=128)
JUDGE_PARAMS = SamplingParams(temperature=0.7, max_tokens=384)


def faulty(yes: int, no: int) -> bool:
    """The judge's rule: reject when `no >= yes` or `no >= 3`."""
    return no >= yes or no >= 3


@dataclass
class Split:
    """A program cut at the last method's body: the spec prefix (through `{`) and what follows the body."""

    prefix: str
    suffix: str
    indent: str = ""


def split_spec(code: str, target: str) -> Split | None:
    """The prefix the exploit model sees, or None when the program has no method with a body and a contract."""
    descriptor = verifier_target(target)
    if descriptor.dialect is None:
        return None
    try:
        contracts = [c for c in descriptor.dialect.contracts(code) if c.kind in descriptor.exploit_kinds]
    except SyntaxError:
        return None
    contracts = [c for c in contracts if c.body is not None and (c.requires or c.ensures)]
    if descriptor.layout == "indent":
        if not contracts:
            return None
        last = max(contracts, key=lambda c: c.header[0])
        assert last.body is not None
        lines = code.splitlines()
        first, end = last.body
        indent = re.match(r"\s*", lines[first - 1]).group(0)  # type: ignore[union-attr]
        return Split("\n".join(lines[: first - 1]) + "\n", "\n".join(lines[end:]), indent)
    contracts = [c for c in contracts if c.name != "main"]
    if not contracts:
        return None
    last = max(contracts, key=lambda c: c.body[0] if c.body else 0)
    assert last.body is not None
    start, end = last.body
    return Split(code[: start + 1], code[end + 1 :])


def edits_spec(incorrect: str, corrected: str, target: str) -> bool:
    """Whether an error triplet's fix changed the specification: its first differing line lies in the corrected
    program's spec prefix (the original's `filter_codes`, which keeps only fixes made after the spec). A
    program without a contract has no spec to edit."""
    split = split_spec(corrected, target)
    if split is None:
        return False
    spec_lines = split.prefix.count("\n") + 1
    pairs = zip(incorrect.splitlines(), corrected.splitlines(), strict=False)
    first = next((index for index, (bad, good) in enumerate(pairs) if bad.rstrip() != good.rstrip()), None)
    if first is None:  # one is a prefix of the other: they differ where the shorter one ends
        first = min(len(incorrect.splitlines()), len(corrected.splitlines()))
    return first < spec_lines


def with_body(split: Split, reply: str, target: str) -> str:
    """The spec prefix completed by a proposed body (closing brace added when the reply leaves it open)."""
    body = extract_code(reply, fence(target)).rstrip()
    if verifier_target(target).layout == "indent":
        lines = [
            line if line.startswith(split.indent) or not line.strip() else split.indent + line.lstrip()
            for line in body.splitlines()
        ]
        return split.prefix + "\n".join(lines) + "\n" + split.suffix
    depth = body.count("{") - body.count("}")
    closing = "\n}" if depth >= 0 else ""
    return f"{split.prefix}\n{body}{closing}{split.suffix}"


@dataclass
class Verdict:
    """A filter's decision on one candidate, with the evidence kept as critiques."""

    rejected: bool
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    exploits: list[str] = field(default_factory=list)


async def exploit_check(
    candidate: Node,
    task: Task,
    target: str,
    backend: Backend,
    verifier: Verifier,
    store: TrajectoryStore,
    *,
    samples: int,
    critics: Sequence[dict[str, Any]] = (),
    params: SamplingParams = EXPLOIT_PARAMS,
) -> Verdict:
    """Ask for `samples` trivial bodies of the candidate's spec; any that verifies rejects the candidate."""
    split = split_spec(candidate.code or "", target)
    if split is None or samples == 0:
        return Verdict(False, "no spec to exploit" if split is None else "exploit model off")
    messages = exploit_messages(split.prefix, target, critics)
    [completions] = await backend.generate([messages], params.model_copy(update={"n": samples}))
    programs = [with_body(split, completion.text, target) for completion in completions]
    results = await asyncio.gather(
        *(verifier.verify(Candidate(task_id=task.id, code=code, language=task.language), task) for code in programs)
    )
    exploits: list[str] = []
    nodes = []
    for completion, code, result in zip(completions, programs, results, strict=True):
        works = result.status is VerifyStatus.VERIFIED and result.errors == 0 and result.verified > 0
        if works:
            exploits.append(code)
        nodes.append(
            candidate.child(
                "exploit",
                messages=messages,
                completion=completion,
                code=code,
                verify_result=result,
                score=1.0 if works else 0.0,
                metadata={"critique": "exploit", "exploits_spec": works},
            )
        )
    await asyncio.to_thread(store.add_nodes, nodes)
    if exploits:
        return Verdict(
            True,
            f"the spec admits a trivial body ({len(exploits)} of {samples} verified)",
            {"exploits": len(exploits), "samples": samples, "prefix": split.prefix},
            exploits,
        )
    return Verdict(False, "no trivial body verified", {"exploits": 0, "samples": samples})


async def judge_check(
    candidate: Node,
    source: str,
    target: str,
    source_language: str,
    backend: Backend,
    store: TrajectoryStore,
    *,
    votes: int,
    params: SamplingParams = JUDGE_PARAMS,
) -> Verdict:
    """`votes` judge samples on whether the candidate computes what the source computes; the rule decides."""
    if votes == 0:
        return Verdict(False, "judge off")
    messages: list[Message] = judge_messages(candidate.code or "", source, target, source_language)
    [completions] = await backend.generate([messages], params.model_copy(update={"n": votes}))
    answers = [judge_answer(completion.text) for completion in completions]
    yes, no = answers.count("yes"), answers.count("no")
    nodes = [
        candidate.child(
            "judge",
            messages=messages,
            completion=completion,
            code=None,
            score=1.0 if answer == "yes" else 0.0,
            metadata={"critique": "judge", "answer": answer},
        )
        for completion, answer in zip(completions, answers, strict=True)
    ]
    await asyncio.to_thread(store.add_nodes, nodes)
    details = {"yes": yes, "no": no, "unreadable": votes - yes - no, "votes": votes}
    if faulty(yes, no):
        return Verdict(True, f"equivalence judge: {yes} yes, {no} no of {votes}", details)
    return Verdict(False, f"equivalence judge: {yes} yes, {no} no of {votes}", details)
