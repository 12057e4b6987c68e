"""A reward function for TRL's `GRPOTrainer` (`reward_funcs=[JudgeReward(...)]`) backed by veriloop's judge.

TRL calls it with the prompts, the completions and every other dataset column as keyword lists; it
returns one float per completion, or `None` where the judge could not judge (`infra_error`): TRL 1.16
marks such completions unscorable and gives them no advantage, where 0 would punish a candidate for a
broken sandbox. The judge is in-process (`LocalJudge`: this process's sandbox and verifiers) or remote
(`veriloop.judge.client.JudgeClient` against `veriloop serve`); both answer the same verdicts.

Columns it reads (missing ones are left out of the candidate): `tests` (assert tests, a harness, or a
list of stdin/stdout cases), `entry_point`, `task_id` + `suite` (a stored task), `spec` + `verifier`,
`language` (default python). A raw-text prompt is a code prefix (HumanEval's signature and docstring):
the candidate is the prompt plus the completion cut at HumanEval's stop sequences. A conversational
prompt gets the reply's fenced code block.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from veriloop.config import Settings
from veriloop.llm.codeblocks import extract_code

STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ", "\n```")
"""Where HumanEval's harness cuts a completion that continues the prompt's function."""
COLUMNS = ("tests", "entry_point", "task_id", "suite", "spec", "verifier", "language")
T = TypeVar("T")


class JudgeFn(Protocol):
    """What the reward needs of a judge: verdict dicts for candidate dicts, in order."""

    def judge(self, candidates: Sequence[Any], *, reward: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...


class LocalJudge:
    """The judge in this process, on a private event loop thread (TRL calls rewards synchronously)."""

    def __init__(self, settings: Settings, *, concurrency: int | None = None, security: bool = True) -> None:
        from veriloop.judge.engine import Judge

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="veriloop-judge", daemon=True)
        self._thread.start()
        self.inner = self._call(self._make(lambda: Judge(settings, concurrency=concurrency, security=security)))

    @staticmethod
    async def _make(build: Any) -> Any:
        return build()  # the judge's semaphore and locks belong to this loop

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def _work(self, candidates: Sequence[Any], reward: Mapping[str, Any] | None) -> Coroutine[Any, Any, Any]:
        from veriloop.judge.engine import JudgeCandidate, RewardOptions

        parsed = [c if isinstance(c, JudgeCandidate) else JudgeCandidate.model_validate(c) for c in candidates]
        options = RewardOptions.model_validate(dict(reward or {}))
        work: Coroutine[Any, Any, Any] = self.inner.judge_many(parsed, options)
        return work

    def judge(self, candidates: Sequence[Any], *, reward: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        verdicts = self._call(self._work(candidates, reward))
        return [verdict.model_dump(mode="json") for verdict in verdicts]

    async def ajudge(
        self, candidates: Sequence[Any], *, reward: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """`judge` for a caller on another event loop (TRL's): the work runs on this judge's loop, awaited there."""
        future = asyncio.run_coroutine_threadsafe(self._work(candidates, reward), self._loop)
        verdicts = await asyncio.wrap_future(future)
        return [verdict.model_dump(mode="json") for verdict in verdicts]

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self.inner.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def _first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """Where the first stop sequence in `text` starts, and which one it is."""
    return min(((index, stop) for stop in stops if (index := text.find(stop)) >= 0), default=None)


def cut_at_stop(text: str, stops: Sequence[str] = STOP_SEQUENCES) -> str:
    """The completion up to its first stop sequence (HumanEval's post-processing)."""
    first = _first_stop(text, stops)
    return text if first is None else text[: first[0]]


def through_stop(text: str, stops: Sequence[str] = STOP_SEQUENCES) -> str | None:
    """The completion up to and including its first stop sequence; None when it has none."""
    first = _first_stop(text, stops)
    return None if first is None else text[: first[0] + len(first[1])]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # conversational: the assistant's turn(s)
        return "".join(str(m.get("content", "")) for m in value if isinstance(m, Mapping))
    return str(value)


def candidate_code(prompt: Any, completion: Any, language: str = "python") -> str:
    """The program a completion stands for: prompt prefix + completion, or the reply's code block."""
    if isinstance(prompt, str) and isinstance(completion, str):
        return prompt + cut_at_stop(completion)
    return extract_code(_text(completion), language)


class JudgeReward:
    """`reward_funcs` entry: pass rate or all-pass, optional partial credit and security penalty."""

    def __init__(
        self,
        judge: JudgeFn,
        *,
        mode: Literal["all_pass", "pass_rate"] = "all_pass",
        partial_credit: bool = False,
        security_weight: float = 0.0,
        security_min_severity: Literal["low", "medium", "high"] = "medium",
    ) -> None:
        self.judge = judge
        self.options = {
            "mode": mode,
            "partial_credit": partial_credit,
            "security_weight": security_weight,
            "security_min_severity": security_min_severity,
        }
        self.__name__ = f"judge_{mode}"  # TRL logs each reward function under its __name__
        self.calls = 0
        self.last: list[dict[str, Any]] = []

    def candidates(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[dict[str, Any]]:
        out = []
        for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row = {name: columns[name][index] for name in COLUMNS if isinstance(columns.get(name), list)}
            row = {key: value for key, value in row.items() if value is not None and value != ""}
            language = str(row.get("language", "python"))
            candidate: dict[str, Any] = {"code": candidate_code(prompt, completion, language), **row}
            if "task_id" in candidate and ("tests" in candidate or "spec" in candidate):
                candidate.pop("task_id")  # inline checks win over the stored task
                candidate.pop("suite", None)
            if isinstance(prompt, str):
                candidate["prompt"] = prompt
            out.append(candidate)
        return out

    def rewards(self, verdicts: list[dict[str, Any]]) -> list[float | None]:
        self.calls += 1
        self.last = verdicts
        return [None if verdict["reward"] is None else float(verdict["reward"]) for verdict in verdicts]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        candidates = self.candidates(prompts, completions, **columns)
        return self.rewards(self.judge.judge(candidates, reward=self.options))


class AsyncJudgeReward(JudgeReward):
    """`JudgeReward` as an `async def` reward function: TRL (1.16: `is_async_callable`, `_calculate_rewards`) awaits
    it on its own event loop, beside its other async reward functions, instead of blocking the step on it. The
    step's completions still go to the judge in one call. A judge with `ajudge` (`LocalJudge`) is awaited; any
    other (`JudgeClient`) runs in a worker thread."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        candidates = self.candidates(prompts, completions, **columns)
        ajudge = getattr(self.judge, "ajudge", None)
        if ajudge is not None:
            verdicts: list[dict[str, Any]] = await ajudge(candidates, reward=self.options)
        else:
            verdicts = await asyncio.to_thread(self.judge.judge, candidates, reward=self.options)
        return self.rewards(verdicts)


def trainer_supports_async_rewards() -> bool:
    """Whether the installed TRL awaits async reward functions (callable instances included)."""
    try:
        from trl.trainer.utils import is_async_callable
    except ImportError:
        return False
    return bool(is_async_callable(AsyncJudgeReward.__new__(AsyncJudgeReward)))


def judge_reward(judge: JudgeFn, **options: Any) -> JudgeReward:
    """The reward for `GRPOTrainer`: async where the installed TRL awaits it, else the synchronous one."""
    cls = AsyncJudgeReward if trainer_supports_async_rewards() else JudgeReward
    return cls(judge, **options)
