"""OpenAI-compatible endpoints (`/v1/chat/completions`, `/v1/completions`, `/v1/models`) over any Backend.

Each HTTP request becomes one `backend.generate` call awaited on the event loop, so concurrent
requests reach the backend concurrently and the embedded continuous batcher can decode them
together. Logprobs are the sampled tokens' own; `top_logprobs` alternatives are not computed by
our backends, so those lists come back empty. With `stream: true` the answer is sent as
server-sent events in OpenAI's chunk format: a backend that can stream (`StreamingBackend`, as
the embedded one) sends each sample's text as it is decoded, `n > 1` samples as separate choice
indexes interleaved, each choice's last chunk carrying its finish reason (and its token ids and
logprobs); other backends send each sample in one chunk once it is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Annotated, Any
from uuid import uuid4

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from veriloop.config import Settings
from veriloop.errors import BackendError, ConfigError
from veriloop.llm.base import Backend, StreamDelta, StreamingBackend
from veriloop.llm.constraints import validate
from veriloop.records import Completion, Constraint, ConstraintKind, Message, Prompt, SamplingParams
from veriloop.service.contract import JSONRoute
from veriloop.service.deps import backend_of, settings_of
from veriloop.service.http_errors import APIError
from veriloop.service.openai_schema import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobs,
    ChatMessageIn,
    ChatMessageOut,
    CompletionRequest,
    CompletionResponse,
    JsonObjectFormat,
    JsonSchemaFormat,
    ModelCard,
    ModelList,
    SamplingFields,
    TextChoice,
    TextLogprobs,
    TokenLogprob,
    UsageOut,
)

router = APIRouter(tags=["openai"], route_class=JSONRoute)

BackendDep = Annotated[Backend, Depends(backend_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]

DEFAULT_CHAT_MAX_TOKENS: int = SamplingParams.model_fields["max_tokens"].default
DEFAULT_TEXT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@router.get("/models")
async def list_models(backend: BackendDep) -> ModelList:
    return ModelList(data=[ModelCard(id=backend.model_id)])


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, backend: BackendDep, settings: SettingsDep
) -> ChatCompletionResponse | StreamingResponse:
    _check_model(body.model, backend, settings)
    max_tokens = body.max_completion_tokens or body.max_tokens or DEFAULT_CHAT_MAX_TOKENS
    params = _params(body, max_tokens, logprobs=body.logprobs)
    if body.stream and isinstance(backend, StreamingBackend):
        live = _live_chat_chunks(backend, _conversation(body.messages), params, body.logprobs)
        return _live_stream(live, include_usage=_include_usage(body))
    [samples] = await backend.generate([_conversation(body.messages)], params)
    choices = [
        ChatChoice(
            index=index,
            message=ChatMessageOut(content=sample.text),
            finish_reason=sample.finish_reason,
            logprobs=_chat_logprobs(backend, sample) if body.logprobs else None,
            token_ids=sample.token_ids,
        )
        for index, sample in enumerate(samples)
    ]
    response = ChatCompletionResponse(
        id=f"chatcmpl-{uuid4().hex}", model=backend.model_id, choices=choices, usage=_usage([samples])
    )
    if body.stream:
        return _stream(_chat_chunks(response), include_usage=_include_usage(body), usage=response.usage)
    return response


@router.post("/completions", response_model=None)
async def completions(
    body: CompletionRequest, backend: BackendDep, settings: SettingsDep
) -> CompletionResponse | StreamingResponse:
    _check_model(body.model, backend, settings)
    prompts = [body.prompt] if isinstance(body.prompt, str) else list(body.prompt)
    params = _params(body, body.max_tokens or DEFAULT_TEXT_MAX_TOKENS, logprobs=body.logprobs is not None)
    if body.stream and isinstance(backend, StreamingBackend):
        live = _live_text_chunks(backend, prompts, params, body.logprobs is not None)
        return _live_stream(live, include_usage=_include_usage(body))
    results = await backend.generate(list(prompts), params)
    choices = []
    for prompt_index, (prompt, samples) in enumerate(zip(prompts, results, strict=True)):
        for sample_index, sample in enumerate(samples):
            choices.append(
                TextChoice(
                    index=prompt_index * params.n + sample_index,
                    text=sample.text,
                    finish_reason=sample.finish_reason,
                    logprobs=_text_logprobs(backend, sample, len(prompt)) if body.logprobs is not None else None,
                    token_ids=sample.token_ids,
                )
            )
    response = CompletionResponse(
        id=f"cmpl-{uuid4().hex}", model=backend.model_id, choices=choices, usage=_usage(results)
    )
    if body.stream:
        chunks = [response.model_copy(update={"choices": [choice], "usage": None}) for choice in response.choices]
        return _stream(chunks, include_usage=_include_usage(body), usage=response.usage)
    return response


# --------------------------------------------------------------------------- request -> backend


def _check_model(requested: str | None, backend: Backend, settings: Settings) -> None:
    if requested and requested not in (backend.model_id, settings.llm.model):
        raise APIError(
            404,
            f"the model {requested!r} does not exist; this server serves {backend.model_id!r}",
            param="model",
            code="model_not_found",
        )


def _params(body: SamplingFields, max_tokens: int, *, logprobs: bool) -> SamplingParams:
    return SamplingParams(
        n=body.n,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        max_tokens=max_tokens,
        stop=body.stop_list(),
        seed=body.seed,
        logprobs=logprobs,
        constraint=_constraint(body),
    )


def _constraint(body: SamplingFields) -> Constraint | None:
    """The structure asked for, the way OpenAI (response_format) or vLLM (structured_outputs, guided_*) spell it.

    The request model has already refused two at once; this compiles the one given (400 if it does not compile).
    """
    outputs = body.structured_outputs
    fmt = body.response_format
    grammar = outputs.grammar if outputs else None
    given: list[tuple[str, ConstraintKind, str | dict[str, Any] | None]] = [
        ("response_format", "json_schema", {"type": "object"} if isinstance(fmt, JsonObjectFormat) else None),
        ("response_format", "json_schema", fmt.json_schema.schema_ if isinstance(fmt, JsonSchemaFormat) else None),
        ("structured_outputs", "regex", outputs.regex if outputs else None),
        ("structured_outputs", "json_schema", outputs.json_ if outputs else None),
        ("structured_outputs", _grammar_kind(grammar), grammar),
        ("guided_regex", "regex", body.guided_regex),
        ("guided_json", "json_schema", body.guided_json),
        ("guided_grammar", _grammar_kind(body.guided_grammar), body.guided_grammar),
    ]
    found = [(param, kind, value) for param, kind, value in given if value is not None]
    if not found:
        return None
    param, kind, value = found[0]  # one at most: the request model refused more
    constraint = Constraint(kind=kind, value=value if isinstance(value, str) else json.dumps(value))
    try:
        validate(constraint)
    except ConfigError as exc:
        raise APIError(400, str(exc), param=param) from None
    return constraint


def _grammar_kind(grammar: str | None) -> ConstraintKind:
    return "gbnf" if grammar is not None and "::=" in grammar else "lark"


def _conversation(messages: Sequence[ChatMessageIn]) -> Prompt:
    # OpenAI's newer "developer" role is the system prompt under another name.
    return [
        Message(role="system" if message.role == "developer" else message.role, content=message.text())
        for message in messages
    ]


# --------------------------------------------------------------------------- backend -> response


def _usage(results: Sequence[Sequence[Completion]]) -> UsageOut:
    prompt_tokens = sum(samples[0].usage.prompt_tokens for samples in results if samples)
    completion_tokens = sum(sample.usage.completion_tokens for samples in results for sample in samples)
    return UsageOut(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _token_texts(backend: Backend, token_ids: Sequence[int]) -> list[str] | None:
    """The text of each token when the backend can say it: a `token_texts` method, or a Hugging Face `tokenizer`."""
    token_texts = getattr(backend, "token_texts", None)
    if callable(token_texts):
        texts = [str(text) for text in token_texts(list(token_ids))]
    else:
        decode = getattr(getattr(backend, "tokenizer", None), "decode", None)
        if not callable(decode):
            return None
        texts = [str(decode([token_id])) for token_id in token_ids]
    return texts if len(texts) == len(token_ids) else None


def _token_names(backend: Backend, sample: Completion) -> tuple[list[str], bool]:
    """One name per logprob: the token's text, or vLLM's "token_id:N" spelling when only the id is known."""
    count = len(sample.logprobs or [])
    ids = sample.token_ids[:count]
    texts = _token_texts(backend, ids)
    if texts is not None and len(ids) == count:
        return texts, True
    names = [f"token_id:{token_id}" for token_id in ids]
    return names + [""] * (count - len(names)), False


def _chat_logprobs(backend: Backend, sample: Completion) -> ChatLogprobs:
    if sample.logprobs is None:
        return ChatLogprobs(content=None)
    names, real = _token_names(backend, sample)
    return ChatLogprobs(
        content=[
            TokenLogprob(token=name, logprob=logprob, bytes=list(name.encode()) if real else None)
            for name, logprob in zip(names, sample.logprobs, strict=True)
        ]
    )


def _text_logprobs(backend: Backend, sample: Completion, prompt_chars: int) -> TextLogprobs | None:
    if sample.logprobs is None:
        return None
    names, real = _token_names(backend, sample)
    offsets: list[int] | None = None
    if real:
        offsets, position = [], prompt_chars
        for name in names:
            offsets.append(position)
            position += len(name)
    return TextLogprobs(tokens=names, token_logprobs=list(sample.logprobs), text_offset=offsets)


def _chat_chunks(response: ChatCompletionResponse) -> list[ChatCompletionChunk]:
    head = {"id": response.id, "created": response.created, "model": response.model}
    chunks = []
    for choice in response.choices:
        chunks.append(
            ChatCompletionChunk(
                **head, choices=[ChatChunkChoice(index=choice.index, delta=ChatDelta(role="assistant", content=""))]
            )
        )
        chunks.append(
            ChatCompletionChunk(
                **head,
                choices=[
                    ChatChunkChoice(
                        index=choice.index,
                        delta=ChatDelta(content=choice.message.content),
                        logprobs=choice.logprobs,
                        token_ids=choice.token_ids,
                    )
                ],
            )
        )
        chunks.append(
            ChatCompletionChunk(
                **head,
                choices=[ChatChunkChoice(index=choice.index, delta=ChatDelta(), finish_reason=choice.finish_reason)],
            )
        )
    return chunks


def _include_usage(body: SamplingFields) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


def _stream(chunks: Iterable[BaseModel], *, include_usage: bool, usage: UsageOut | None) -> StreamingResponse:
    """OpenAI's SSE framing: `data: <json>` per chunk, an optional usage-only chunk, then `data: [DONE]`."""
    items = list(chunks)
    if include_usage and items:
        items.append(items[-1].model_copy(update={"choices": [], "usage": usage}))

    async def events() -> AsyncIterator[str]:
        for item in items:
            yield f"data: {item.model_dump_json(exclude_none=True)}\n\n"
        yield "data: [DONE]\n\n"

    headers: dict[str, Any] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


# --------------------------------------------------------------------------- live streaming


async def _live_chat_chunks(
    backend: Backend, prompt: Prompt, params: SamplingParams, logprobs: bool
) -> AsyncIterator[tuple[BaseModel, Completion | None, int]]:
    """Chunks of a chat completion as the backend decodes: a role chunk per choice, content deltas, a final chunk."""
    head = {"id": f"chatcmpl-{uuid4().hex}", "model": backend.model_id}
    for index in range(params.n):
        opening = ChatChunkChoice(index=index, delta=ChatDelta(role="assistant", content=""))
        yield ChatCompletionChunk(**head, choices=[opening]), None, 0
    assert isinstance(backend, StreamingBackend)
    async for delta in backend.stream(prompt, params):
        if delta.completion is None:
            piece = ChatChunkChoice(index=delta.index, delta=ChatDelta(content=delta.text))
            yield ChatCompletionChunk(**head, choices=[piece]), None, 0
            continue
        sample = delta.completion
        final = ChatChunkChoice(
            index=delta.index,
            delta=ChatDelta(),
            finish_reason=sample.finish_reason,
            logprobs=_chat_logprobs(backend, sample) if logprobs else None,
            token_ids=sample.token_ids,
        )
        yield ChatCompletionChunk(**head, choices=[final]), sample, 0


async def _live_text_chunks(
    backend: Backend, prompts: Sequence[str], params: SamplingParams, logprobs: bool
) -> AsyncIterator[tuple[BaseModel, Completion | None, int]]:
    """Chunks of a text completion as the backend decodes; prompt i's sample j is choice i·n + j."""
    head = {"id": f"cmpl-{uuid4().hex}", "model": backend.model_id}
    assert isinstance(backend, StreamingBackend)
    async for prompt_index, delta in _merged([backend.stream(prompt, params) for prompt in prompts]):
        index = prompt_index * params.n + delta.index
        sample = delta.completion
        if sample is None:
            choice = TextChoice(index=index, text=delta.text, finish_reason=None)
        else:
            choice = TextChoice(
                index=index,
                text="",
                finish_reason=sample.finish_reason,
                logprobs=_text_logprobs(backend, sample, len(prompts[prompt_index])) if logprobs else None,
                token_ids=sample.token_ids,
            )
        yield CompletionResponse(**head, choices=[choice], usage=None), sample, prompt_index


async def _merged(streams: Sequence[AsyncIterator[StreamDelta]]) -> AsyncIterator[tuple[int, StreamDelta]]:
    """Several streams interleaved as their items come, each item tagged with its stream's index."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, StreamDelta | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[StreamDelta]) -> None:
        try:
            async for item in stream:
                await queue.put((index, item))
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put((index, exc))
        finally:
            await queue.put((index, None))

    tasks = [asyncio.create_task(pump(index, stream)) for index, stream in enumerate(streams)]
    try:
        open_streams = len(tasks)
        while open_streams:
            index, got = await queue.get()
            if got is None:
                open_streams -= 1
            elif isinstance(got, BaseException):
                raise got
            else:
                yield index, got
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _live_stream(
    chunks: AsyncIterator[tuple[BaseModel, Completion | None, int]], *, include_usage: bool
) -> StreamingResponse:
    """SSE of chunks as they are made; usage (when asked) once every sample is done, then `[DONE]`.

    A backend failure after the stream began cannot change the status code any more: it is sent as
    an OpenAI error object in the stream, then the stream ends.
    """

    async def events() -> AsyncIterator[str]:
        last: BaseModel | None = None
        prompt_tokens: dict[int, int] = {}
        completion_tokens = 0
        try:
            async for chunk, sample, prompt in chunks:
                last = chunk
                if sample is not None:
                    completion_tokens += sample.usage.completion_tokens
                    prompt_tokens[prompt] = sample.usage.prompt_tokens
                yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"
        except BackendError as exc:
            error = {"error": {"message": str(exc), "type": "server_error", "param": None, "code": "backend_error"}}
            yield f"data: {json.dumps(error)}\n\n"
            yield "data: [DONE]\n\n"
            return
        if include_usage and last is not None:
            prompts = sum(prompt_tokens.values())
            usage = UsageOut(
                prompt_tokens=prompts, completion_tokens=completion_tokens, total_tokens=prompts + completion_tokens
            )
            tail = last.model_copy(update={"choices": [], "usage": usage})
            yield f"data: {tail.model_dump_json(exclude_none=True)}\n\n"
        yield "data: [DONE]\n\n"

    headers: dict[str, Any] = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
