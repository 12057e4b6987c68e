"""The search problems AlphaVerus hands to `search/`: programs judged by a verifier, refined with its feedback."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from veriloop.agents.alphaverus.prompts import followup_turn
from veriloop.agents.alphaverus.rules import rule_violation
from veriloop.llm.codeblocks import extract_code
from veriloop.records import Candidate, Message, Node, Task, VerifyResult, VerifyStatus
from veriloop.search.engine import Evaluation
from veriloop.search.score import Scorer
from veriloop.verifiers.base import Verifier
from veriloop.verifiers.target import verifier_target

FEEDBACK_LINES = 12


def feedback(result: VerifyResult, limit: int = FEEDBACK_LINES) -> str:
    """The verifier's verdict as the next prompt shows it: status, reason, then one line per diagnostic."""
    lines = [f"{result.tool}: {result.status.value} ({result.verified} verified, {result.errors} errors)"]
    if result.reason:
        lines.append(result.reason.strip()[:400])
    for diagnostic in result.diagnostics[:limit]:
        where = f"line {diagnostic.line}: " if diagnostic.line is not None else ""
        lines.append(f"{where}{diagnostic.severity}: {diagnostic.message.strip()[:300]}")
    if result.status is VerifyStatus.VERIFIED:
        lines.append("verified")
    return "\n".join(lines)


def program_text(reply: str, target: str) -> str:
    """The reply's code block; a reply with no fence is cut from its first declaration to its last closing brace
    (small models often answer "Here is the program:" followed by bare code)."""
    descriptor = verifier_target(target)
    if "```" in reply or descriptor.declarations is None:
        return extract_code(reply, descriptor.fence)
    starts = re.compile(descriptor.declarations, re.M)
    start = starts.search(reply)
    text = reply[start.start() :] if start else reply
    return text.strip("\n") if descriptor.layout == "indent" else _declarations(text, starts).strip("\n")


def _declarations(text: str, starts: re.Pattern[str]) -> str:
    """Lines from the top while they are declarations: stop at prose after a closed top-level block."""
    kept: list[str] = []
    depth, closed = 0, False
    for line in text.splitlines():
        if closed and line.strip() and depth == 0 and not starts.match(line):
            break
        kept.append(line)
        depth += line.count("{") - line.count("}")
        closed = (depth <= 0 and "}" in line) or (closed and depth <= 0)
    return "\n".join(kept)


class VerifierProblem:
    """A task searched for a program that `verifier` accepts; refinement shows the last `history` verdicts."""

    def __init__(
        self,
        task: Task,
        verifier: Verifier,
        scorer: Scorer,
        root: list[Message],
        *,
        target: str,
        history: int = 1,
        program: Callable[[str], str] | None = None,
    ) -> None:
        self.task = task
        self.verifier = verifier
        self.scorer = scorer
        self.root = root
        self.target = target
        self.history = history
        self._program = program

    def root_messages(self) -> list[Message]:
        return list(self.root)

    def refine_messages(self, path: Sequence[Node]) -> list[Message]:
        messages = list(self.root)
        for node in path[-self.history :]:
            reply = node.completion.text if node.completion is not None else f"```\n{node.code or ''}\n```"
            messages.append(Message(role="assistant", content=reply))
            messages.append(Message(role="user", content=followup_turn(str(node.metadata.get("feedback", "")))))
        return messages

    def program(self, reply: str) -> str:
        if self._program is not None:
            return self._program(reply)
        return program_text(reply, self.target)

    async def evaluate(self, code: str) -> Evaluation:
        if self.target != "tests":
            source = self.task.metadata.get("source")
            reference, language = (source, "dafny") if source else (self.task.spec or self.task.prompt, self.target)
            reason = rule_violation(code, self.target, reference, language)
            if reason:
                result = VerifyResult(status=VerifyStatus.REJECTED, tool=self.verifier.name, score=-1.0, reason=reason)
                return Evaluation(result=result, score=-1.0, feedback=feedback(result), verifier_calls=0)
        candidate = Candidate(task_id=self.task.id, code=code, language=self.task.language)
        result = await self.verifier.verify(candidate, self.task)
        return Evaluation(result=result, score=self.scorer(result), feedback=feedback(result))
