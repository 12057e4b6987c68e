"""The `openai` backend: any OpenAI-compatible server (vLLM, llama.cpp's server, OpenAI, `veriloop serve`).

Chat prompts go to `/chat/completions`, raw strings to `/completions`. At most `max_concurrency`
requests are in flight; connection errors, timeouts, 429 and 5xx are retried with exponential
back-off, other 4xx are not (retrying a bad request only repeats it). Sampled token ids are asked
for with `return_token_ids` (vLLM and `veriloop serve` answer it; servers that reject the field get
requests without it from then on).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import openai
from openai import AsyncOpenAI

from veriloop.config import Settings
from veriloop.errors import BackendError
from veriloop.llm.constraints import openai_request_fields
from veriloop.records import Completion, FinishReason, Prompt, SamplingParams, Usage

T = TypeVar("T")

TOKEN_IDS_FIELD = "return_token_ids"
MAX_BACKOFF_S = 30.0


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _finish_reason(reason: str | None) -> FinishReason:
    if reason == "length":
        return "length"
    if reason in (None, "error", "abort"):
        return "error"
    return "stop"


def _token_ids_from_tokens(tokens: Sequence[str]) -> list[int]:
    """vLLM's `return_tokens_as_token_ids` spells each logprob token as "token_id:123"."""
    ids = []
    for token in tokens:
        head, _, number = token.partition(":")
        if head != "token_id" or not number.isdigit():
            return []
        ids.append(int(number))
    return ids


def _extra(obj: Any, name: str) -> Any:
    """A field the server added beyond OpenAI's schema (pydantic keeps them as extras)."""
    extras = getattr(obj, "model_extra", None) or {}
    return extras.get(name)


class OpenAIBackend:
    """Completions from an OpenAI-compatible HTTP server, with bounded concurrency and retries."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        max_concurrency: int = 8,
        max_retries: int = 3,
        timeout_s: float = 120.0,
        backoff_s: float = 0.5,
        request_token_ids: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._model = model
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._request_token_ids = request_token_ids
        self._semaphore = asyncio.Semaphore(max_concurrency)
        # The client's own retries are off: ours count attempts, back off and name the URL in the error.
        self._client = AsyncOpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIBackend:
        llm = settings.llm
        return cls(
            base_url=llm.base_url,
            model=llm.model,
            api_key=llm.api_key,
            max_concurrency=llm.max_concurrency,
            max_retries=llm.max_retries,
            timeout_s=llm.timeout_s,
        )

    @property
    def model_id(self) -> str:
        return self._model

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return list(await asyncio.gather(*(self._samples(prompt, params) for prompt in requests)))

    async def aclose(self) -> None:
        await self._client.close()

    async def _samples(self, prompt: Prompt, params: SamplingParams) -> list[Completion]:
        """`params.n` samples; servers that ignore `n` (llama.cpp) are asked again for the rest."""
        samples: list[Completion] = []
        while len(samples) < params.n:
            wanted = params.n - len(samples)
            seed = None if params.seed is None else params.seed + len(samples)
            async with self._semaphore:
                started = time.perf_counter()
                if isinstance(prompt, str):
                    batch = await self._text(prompt, params, wanted, seed)
                else:
                    batch = await self._chat(prompt, params, wanted, seed)
                latency = time.perf_counter() - started
            if not batch:
                raise BackendError(f"server at {self.base_url} returned no choices for model {self._model!r}")
            for completion in batch[:wanted]:
                completion.latency_s = latency
                samples.append(completion)
        return samples

    def _common(self, params: SamplingParams, n: int, seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self._model,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if seed is not None:
            kwargs["seed"] = seed
        fields, extra = openai_request_fields(params.constraint)
        kwargs.update(fields)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _extra_body(self, base: dict[str, Any]) -> dict[str, Any] | None:
        """The constraint's fields plus, while the server accepts it, the token-ids request (read at call time:
        a server that refuses the field once is asked again without it)."""
        body = dict(base)
        if self._request_token_ids:
            body[TOKEN_IDS_FIELD] = True
        return body or None

    async def _chat(self, prompt: Prompt, params: SamplingParams, n: int, seed: int | None) -> list[Completion]:
        assert not isinstance(prompt, str)
        messages: list[Any] = [{"role": message.role, "content": message.content} for message in prompt]
        kwargs = self._common(params, n, seed)
        extra: dict[str, Any] = kwargs.pop("extra_body", {})
        if params.logprobs:
            kwargs["logprobs"] = True
        response = await self._call(
            lambda: self._client.chat.completions.create(
                messages=messages, extra_body=self._extra_body(extra), **kwargs
            )
        )
        usage = response.usage
        out = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            logprobs: list[float] | None = None
            tokens: list[str] = []
            if params.logprobs and choice.logprobs is not None and choice.logprobs.content is not None:
                logprobs = [item.logprob for item in choice.logprobs.content]
                tokens = [item.token for item in choice.logprobs.content]
            out.append(
                self._completion(
                    choice.message.content or "", choice, choice.finish_reason, logprobs, tokens, usage, params, n
                )
            )
        return out

    async def _text(self, prompt: str, params: SamplingParams, n: int, seed: int | None) -> list[Completion]:
        kwargs = self._common(params, n, seed)
        extra: dict[str, Any] = kwargs.pop("extra_body", {})
        if "response_format" in kwargs:  # the completions endpoint has no response_format: vLLM's field instead
            fields = kwargs.pop("response_format")
            extra = {**extra, "structured_outputs": {"json": fields["json_schema"]["schema"]}}
        if params.logprobs:
            kwargs["logprobs"] = 0
        response = await self._call(
            lambda: self._client.completions.create(prompt=prompt, extra_body=self._extra_body(extra), **kwargs)
        )
        usage = response.usage
        out = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            logprobs: list[float] | None = None
            tokens: list[str] = []
            if params.logprobs and choice.logprobs is not None and choice.logprobs.token_logprobs is not None:
                logprobs = [0.0 if value is None else value for value in choice.logprobs.token_logprobs]
                tokens = list(choice.logprobs.tokens or [])
            out.append(self._completion(choice.text, choice, choice.finish_reason, logprobs, tokens, usage, params, n))
        return out

    def _completion(
        self,
        text: str,
        choice: Any,
        finish_reason: str | None,
        logprobs: list[float] | None,
        tokens: list[str],
        usage: Any,
        params: SamplingParams,
        n: int,
    ) -> Completion:
        raw_ids = _extra(choice, "token_ids")
        token_ids = [int(t) for t in raw_ids] if isinstance(raw_ids, list) else _token_ids_from_tokens(tokens)
        prompt_tokens = int(usage.prompt_tokens) if usage is not None else 0
        if token_ids:
            completion_tokens = len(token_ids)
        elif logprobs is not None:
            completion_tokens = len(logprobs)
        elif usage is not None:
            # Only the total is known: split it evenly among the samples of this response.
            completion_tokens = round(int(usage.completion_tokens) / max(n, 1))
        else:
            completion_tokens = 0
        return Completion(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=_finish_reason(finish_reason),
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            model=self._model,
            params=params,
        )

    async def _call(self, request: Callable[[], Awaitable[T]]) -> T:
        """Run `request` with retries; a server that stays away becomes one BackendError naming the URL."""
        attempt = 0
        while True:
            try:
                response = await request()
                if not isinstance(getattr(response, "choices", None), list):
                    raise BackendError(f"server at {self.base_url} did not answer with an OpenAI completion")
                return response
            except openai.BadRequestError as exc:
                if self._request_token_ids and TOKEN_IDS_FIELD in str(exc):
                    self._request_token_ids = False  # a strict server (api.openai.com) rejects the extra field
                    continue
                raise self._rejected(exc) from None
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
                failure: openai.APIError = exc
            except openai.APIStatusError as exc:
                if exc.status_code < 500:
                    raise self._rejected(exc) from None
                failure = exc
            except openai.OpenAIError as exc:
                raise BackendError(
                    f"server at {self.base_url} gave an unusable answer: {type(exc).__name__}: {_one_line(exc)[:200]}"
                ) from None
            if attempt >= self._max_retries:
                raise self._unreachable(failure, attempt + 1) from None
            await asyncio.sleep(self._delay(attempt, failure))
            attempt += 1

    def _delay(self, attempt: int, failure: openai.APIError) -> float:
        delay = self._backoff_s * 2**attempt
        if isinstance(failure, openai.APIStatusError):
            retry_after = failure.response.headers.get("retry-after", "")
            with contextlib.suppress(ValueError):
                delay = max(delay, float(retry_after))
        return float(min(delay, MAX_BACKOFF_S) * random.uniform(0.8, 1.2))

    def _rejected(self, exc: openai.APIStatusError) -> BackendError:
        detail = exc.message
        if isinstance(exc.body, dict):
            detail = str(exc.body.get("message", detail))
        return BackendError(
            f"server at {self.base_url} rejected the request ({exc.status_code}): {_one_line(detail)[:300]}"
        )

    def _unreachable(self, exc: openai.APIError, attempts: int) -> BackendError:
        if isinstance(exc, openai.APIStatusError):
            reason = f"HTTP {exc.status_code}: {_one_line(exc.message)[:200]}"
        elif isinstance(exc, openai.APITimeoutError):
            reason = "timed out"
        else:
            cause = exc.__cause__
            reason = _one_line(cause) if cause is not None and str(cause) else _one_line(exc.message)
        plural = "s" if attempts != 1 else ""
        return BackendError(
            f"OpenAI-compatible server at {self.base_url} failed after {attempts} attempt{plural}: {reason[:200]}"
        )
