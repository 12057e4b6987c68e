"""Request and response shapes of the OpenAI-compatible endpoints (the subset veriloop serves).

Requests ignore fields we do not know (clients send vendor extras), but reject the ones whose
meaning we cannot honour (token-id prompts, echo, tools) instead of silently answering something else.
Every choice carries `token_ids`, the sampled token ids, beyond OpenAI's schema.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from veriloop.records import FinishReason

MAX_TOKENS = 32768


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- errors


class ErrorBody(Strict):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Strict):
    error: ErrorBody


# --------------------------------------------------------------------------- requests


class StreamOptions(Lenient):
    include_usage: bool = False


class SamplingFields(Lenient):
    """Fields shared by chat and text completions."""

    model: str | None = Field(None, description="Must name the served model when given.")
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="OpenAI's default is 1.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    return_token_ids: bool | None = Field(None, description="vLLM's switch; token ids are always returned here.")
    response_format: dict[str, Any] | None = Field(None, description="OpenAI's: text, json_object or json_schema.")
    structured_outputs: dict[str, Any] | None = Field(None, description="vLLM's: {regex|json|grammar: ...}.")
    guided_regex: str | None = Field(None, description="vLLM < 0.12's spelling of structured_outputs.regex.")
    guided_json: dict[str, Any] | str | None = Field(None, description="vLLM < 0.12's structured_outputs.json.")
    guided_grammar: str | None = Field(None, description="vLLM < 0.12's structured_outputs.grammar.")

    @field_validator("stop")
    @classmethod
    def _stop_not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        items = [value] if isinstance(value, str) else value or []
        if any(item == "" for item in items):
            raise ValueError("stop strings must not be empty")
        if len(items) > 16:
            raise ValueError("at most 16 stop strings")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class TextPart(Lenient):
    type: Literal["text"]
    text: str


class ChatMessageIn(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Any] | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1, le=MAX_TOKENS, description="OpenAI's default (and ours for null) is 16.")
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None


# --------------------------------------------------------------------------- responses


def now() -> int:
    return int(time.time())


class UsageOut(Strict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TopLogprob(Strict):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(Strict):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(Strict):
    content: list[TokenLogprob] | None = None


class ChatMessageOut(Strict):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(Strict):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReason
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] = Field(default_factory=list)


class ChatCompletionResponse(Strict):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChoice]
    usage: UsageOut
    system_fingerprint: str | None = None


class ChatDelta(Strict):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(Strict):
    index: int
    delta: ChatDelta
    finish_reason: FinishReason | None = None
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(Strict):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageOut | None = None


class TextLogprobs(Strict):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] | None = None


class TextChoice(Strict):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: TextLogprobs | None = None
    token_ids: list[int] | None = None


class CompletionResponse(Strict):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[TextChoice]
    usage: UsageOut | None


class ModelCard(Strict):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "veriloop"


class ModelList(Strict):
    object: Literal["list"] = "list"
    data: list[ModelCard]
