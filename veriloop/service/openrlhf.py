"""OpenRLHF's remote reward (`--reward.remote_url`, formerly `--remote_rm_url`) on veriloop's judge: `POST PATH`.

OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}`: each query is the decoded prompt plus response
(special tokens kept), each label the dataset's label column. It reads `{"rewards": [...], "scores": [...],
"extra_logs": {...}}`: `rewards` for the advantage, `scores` (0 to 1) for dynamic filtering, and every `extra_logs`
entry as one number per sample (it turns them into tensors).

- The program is the response's fenced code block (the response is the query after its prompt, with the
  tokenizer's special tokens removed), else the whole response.
- The label says what judges it (see `checks_of`): veriloop's checks (`tests`, `task_id`, `spec` + `verifier`, as
  an object or its JSON text), verl's `{"inputs": [...], "outputs": [...]}` or SandboxFusion's CommonOJ
  `[{"input": {"stdin"}, "output": {"stdout"}}]` stdin/stdout cases, a bare task id (`HumanEval/0`), or else Python
  assert tests.
- OpenRLHF needs a number for every sample, so a candidate the judge could not judge (`infra_error`) gets
  `INFRA_REWARD`, and says so: `extra_logs.infra_error` is 1 for it (0 for the others). Filter on it, or drop those
  samples, rather than learning from them.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from veriloop.errors import ConfigError
from veriloop.judge.engine import JudgeCandidate, RewardOptions, Verdict
from veriloop.llm.codeblocks import extract_code
from veriloop.service.http_errors import APIError
from veriloop.service.judge import (
    ERRORS,
    Account,
    BodyLimit,
    JudgeService,
    Overloaded,
    _watch_disconnect,
    service_of,
    token_of,
)

PREFIX = "/api/openrlhf"
PATH = f"{PREFIX}/get_reward"
"""OpenRLHF's `--reward.remote_url http://HOST:PORT/api/openrlhf/get_reward` (its own server's path is /get_reward)."""
INFRA_REWARD = 0.0
"""The reward of a sample the judge could not judge (flagged in extra_logs.infra_error)."""
MAX_SAMPLES = 4096
LOG_KEYS = ("passed", "pass_rate", "infra_error", "label_error")
CANDIDATE_KEYS = ("tests", "entry_point", "task_id", "suite", "spec", "verifier", "language", "limits")
TASK_ID = re.compile(r"^[A-Za-z][\w.-]*/[\w.-]+$")
SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]{1,40}\|>|</s>|<s>|<eos>|<bos>|<end_of_turn>|<start_of_turn>|<pad>")

router = APIRouter(tags=["openrlhf"])


async def _service(request: Request) -> JudgeService:
    """The app's judge service; an async dependency, so FastAPI does not hop to a worker thread to get it."""
    return service_of(request)


ServiceDep = Annotated[JudgeService, Depends(_service)]


class RewardRequest(BaseModel):
    """What OpenRLHF's SingleTurnAgentExecutor posts (one sample per request by default)."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(max_length=MAX_SAMPLES, description="Decoded prompt + response, special tokens kept.")
    prompts: list[str] | None = Field(None, max_length=MAX_SAMPLES, description="The prompts, as OpenRLHF sent them.")
    labels: list[Any] = Field(
        max_length=MAX_SAMPLES, description="What judges each sample, one per query (a missing one: label_error)."
    )


class RewardResponse(BaseModel):
    rewards: list[float]
    scores: list[float] = Field(description="0 to 1: the pass rate (tests) or 1/0 (verified); 0 for infra errors.")
    extra_logs: dict[str, list[float]] = Field(
        description="Per sample: passed (1/0), pass_rate, and infra_error / label_error: 1 where the reward says "
        "nothing (the judge could not judge; the label named no checks).",
    )


# --------------------------------------------------------------------------- queries and labels


def response_text(query: str, prompt: str | None) -> str:
    """The response part of `query` (the text after its prompt), without the tokenizer's special tokens."""
    text = query
    if prompt:
        if query.startswith(prompt):
            text = query[len(prompt) :]
        else:
            cleaned = SPECIAL_TOKEN.sub("", prompt).strip()
            at = query.rfind(cleaned) if cleaned else -1
            if at >= 0:
                text = query[at + len(cleaned) :]
    return SPECIAL_TOKEN.sub("", text)


def program_of(query: str, prompt: str | None, language: str) -> str:
    """The response's fenced block tagged `language` (else its first block), else the response itself."""
    return extract_code(response_text(query, prompt), language)


def _loads(label: Any) -> Any:
    if isinstance(label, str):
        text = label.strip()
        if text[:1] in "[{":
            try:
                return json.loads(text)
            except ValueError:
                return label
    return label


def _stdio(inputs: Any, outputs: Any) -> list[dict[str, str]] | None:
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        return None
    return [{"stdin": str(i), "expected": str(o)} for i, o in zip(inputs, outputs, strict=True)]


def _common_oj(data: Any) -> list[dict[str, str]] | None:
    """SandboxFusion's CommonOJ cases, `[{input: {stdin}, output: {stdout}}]`, as `{stdin, expected}` cases."""
    if not isinstance(data, list) or not data:
        return None
    cases = []
    for case in data:
        given = case.get("input") if isinstance(case, dict) else None
        wanted = case.get("output") if isinstance(case, dict) else None
        if not isinstance(given, dict) or not isinstance(wanted, dict) or not isinstance(wanted.get("stdout"), str):
            return None
        cases.append({"stdin": str(given.get("stdin", "")), "expected": wanted["stdout"]})
    return cases


class LabelError(ValueError):
    """A label that names no checks: that sample is not judged (reward INFRA_REWARD, extra_logs.label_error 1)."""


def checks_of(label: Any, index: int) -> dict[str, Any]:
    """JudgeCandidate fields for one label.

    An object (or its JSON text) with veriloop's keys (`tests`, `task_id` + `suite`, `spec` + `verifier`,
    `entry_point`, `language`), verl's `inputs`/`outputs` or CommonOJ's `test`; a list of CommonOJ cases or of
    `{stdin, expected}`; a bare task id; else the text is Python assert tests.
    """
    label = _loads(label)
    if isinstance(label, dict):
        if "fn_name" in label:
            raise LabelError(f"labels[{index}]: verl's call-based fn_name tests are not supported")
        cases = _stdio(label.get("inputs"), label.get("outputs")) or _common_oj(label.get("test"))
        fields = {key: label[key] for key in CANDIDATE_KEYS if label.get(key) not in (None, "")}
        if cases is not None:
            fields["tests"] = cases
        return fields
    if isinstance(label, list):
        cases = _common_oj(label)
        if cases is None and all(isinstance(c, dict) and "expected" in c for c in label):
            cases = [{"stdin": str(c.get("stdin", "")), "expected": str(c["expected"])} for c in label]
        if not cases:
            raise LabelError(f"labels[{index}]: a list label is stdin/stdout cases")
        return {"tests": cases}
    if isinstance(label, str) and label.strip():
        text = label.strip()
        return {"task_id": text} if TASK_ID.match(text) else {"tests": label}
    raise LabelError(f"labels[{index}]: name the checks (tests, a task id or a spec)")


def candidates_of(service: JudgeService, body: RewardRequest) -> list[JudgeCandidate | str]:
    """Per query its candidate, or why its label names nothing to judge (a missing label is such a label)."""
    out: list[JudgeCandidate | str] = []
    for index, query in enumerate(body.query):
        label = body.labels[index] if index < len(body.labels) else None
        prompt = body.prompts[index] if body.prompts is not None and index < len(body.prompts) else None
        try:
            fields = checks_of(label, index)
            fields["code"] = program_of(query, prompt, str(fields.get("language") or "python"))
            candidate = JudgeCandidate.model_validate(fields)
            if candidate.task_id is not None:
                service.judge.task_of(candidate)  # an unknown task is the label's fault, not an infra_error
        except (ValueError, ConfigError) as exc:
            message = str(exc) if isinstance(exc, LabelError) else f"labels[{index}]: {exc}"
            out.append(message)
            continue
        out.append(candidate)
    return out


def answer(judged: list[Verdict | str]) -> RewardResponse:
    """Rewards, scores and extra_logs; a sample the judge could not judge, or whose label named nothing, gets
    INFRA_REWARD and says so (infra_error, label_error)."""
    rewards, scores = [], []
    logs: dict[str, list[float]] = {key: [] for key in LOG_KEYS}
    for verdict in judged:
        reward = verdict.reward if isinstance(verdict, Verdict) else None
        rate, passed = 0.0, False
        if isinstance(verdict, Verdict) and reward is not None:
            rate = verdict.pass_rate if verdict.pass_rate is not None else (1.0 if verdict.passed else 0.0)
            passed = verdict.passed
        rewards.append(INFRA_REWARD if reward is None else float(reward))
        scores.append(0.0 if reward is None else min(max(rate, 0.0), 1.0))
        logs["passed"].append(float(passed))
        logs["pass_rate"].append(rate)
        logs["infra_error"].append(float(isinstance(verdict, Verdict) and reward is None))
        logs["label_error"].append(float(isinstance(verdict, str)))
    return RewardResponse(rewards=rewards, scores=scores, extra_logs=logs)


# --------------------------------------------------------------------------- the route


def admit(service: JudgeService, token: str, count: int) -> Account:
    """The judge's queue bounds (per token and in all, else 429 + Retry-After), but not its per-token request limit:
    OpenRLHF sends one sample per request, a whole rollout batch of requests at once."""
    config = service.config
    if count > config.max_candidates:
        raise APIError(413, f"{count} samples; at most {config.max_candidates} per request", code="too_many_candidates")
    account = service.accounts.setdefault(token, Account())
    if account.pending + count > config.token_queue:
        reason = f"{account.pending} candidates of this token waiting (at most {config.token_queue})"
        raise Overloaded(reason, service.retry_after())
    if service.pending + count > config.queue_max:
        raise Overloaded(
            f"{service.pending} candidates waiting in all (at most {config.queue_max})", service.retry_after()
        )
    account.requests += 1
    account.pending += count
    service.pending += count
    return account


@router.post("/get_reward", responses={401: ERRORS[401], 413: ERRORS[413], 429: ERRORS[429]})
async def get_reward(
    body: RewardRequest,
    request: Request,
    service: ServiceDep,
    mode: Annotated[Literal["all_pass", "pass_rate"], Query(description="How a verdict becomes the reward.")] = (
        "all_pass"
    ),
    security_weight: Annotated[float, Query(ge=0, le=10, description="Subtracted per bandit finding.")] = 0.0,
) -> RewardResponse:
    """OpenRLHF's remote reward: judge each query's program against its label; rewards, scores and extra_logs."""
    parsed = candidates_of(service, body)
    candidates = [c for c in parsed if isinstance(c, JudgeCandidate)]
    if not candidates:
        return answer([c for c in parsed if isinstance(c, str)])
    options = RewardOptions(mode=mode, security_weight=security_weight)
    token = token_of(request)
    account = admit(service, token, len(candidates))
    remaining = len(candidates)
    try:

        def hook(verdict: Verdict) -> None:
            nonlocal remaining
            remaining -= 1
            service.judged(account, verdict)

        security = security_weight > 0 and service.config.security
        work = asyncio.ensure_future(service.judge.judge_many(candidates, options, hook, security))
        watcher = asyncio.ensure_future(_watch_disconnect(request, work))
        try:
            verdicts = iter(await work)
        finally:
            watcher.cancel()
        return answer([c if isinstance(c, str) else next(verdicts) for c in parsed])
    finally:
        service.settle(token, account, remaining)


def install(app: FastAPI, limit_bytes: int) -> None:
    """Mount the route under /api/openrlhf with the judge's body limit."""
    app.include_router(router, prefix=PREFIX)
    app.add_middleware(BodyLimit, limit=limit_bytes, path=PATH)
