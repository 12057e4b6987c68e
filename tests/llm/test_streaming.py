"""`/v1` streaming from the embedded batcher, read with the official `openai` client over real HTTP.

The server is uvicorn in a thread serving the tiny random llama through `EmbeddedBackend`, so the
deltas go through the same batcher, router and SSE framing as `veriloop serve`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import uvicorn

from veriloop.config import load_settings
from veriloop.llm.base import StreamingBackend
from veriloop.llm.embedded import EmbeddedBackend
from veriloop.records import SamplingParams
from veriloop.service.app import create_app


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def served(tiny: tuple[Any, Any]) -> Iterator[tuple[str, EmbeddedBackend]]:
    model, tokenizer = tiny
    backend = EmbeddedBackend(model, tokenizer, model_id="tiny", max_batch_size=4, eos_token_ids=[])
    app = create_app(load_settings(llm={"backend": "embedded", "model": "tiny"}), backend=backend)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1", backend
    finally:
        server.should_exit = True
        thread.join(30)


def test_chat_deltas_arrive_while_the_samples_are_still_decoding(served: tuple[str, EmbeddedBackend]) -> None:
    base_url, backend = served
    assert isinstance(backend, StreamingBackend)
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": "count"}]
    stream = client.chat.completions.create(
        model="tiny", messages=messages, stream=True, n=2, temperature=0.0, max_tokens=150
    )
    texts = {0: "", 1: ""}
    deltas = {0: 0, 1: 0}
    finish: dict[int, str] = {}
    token_ids: dict[int, list[int]] = {}
    steps_at_first_delta: int | None = None
    rows_at_first_delta = 0
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                if steps_at_first_delta is None:
                    steps_at_first_delta = backend.batcher.steps
                    rows_at_first_delta = backend.batcher.active_rows
                texts[choice.index] += choice.delta.content
                deltas[choice.index] += 1
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
                token_ids[choice.index] = (choice.model_extra or {}).get("token_ids") or []
    steps_at_end = backend.batcher.steps
    # The first text reached the client while both samples were still decoding, long before the end.
    assert steps_at_first_delta is not None and steps_at_first_delta < steps_at_end / 3
    assert rows_at_first_delta == 2
    assert deltas[0] > 10 and deltas[1] > 10
    assert finish == {0: "length", 1: "length"}
    # The pieces add up to what the same request returns without streaming.
    [[plain, _]] = asyncio.run(_generate(backend, SamplingParams(n=2, temperature=0.0, max_tokens=150)))
    assert texts[0] == texts[1] == plain.text
    assert token_ids[0] == plain.token_ids


async def _generate(backend: EmbeddedBackend, params: SamplingParams) -> Any:
    from veriloop.records import Message

    return await backend.generate([[Message(role="user", content="count")]], params)


def test_text_stream_with_a_stop_string_and_usage(served: tuple[str, EmbeddedBackend]) -> None:
    base_url, backend = served
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    prompts = ["def add(a, b):", "xyz"]
    free = asyncio.run(backend.generate(prompts, SamplingParams(temperature=0.0, max_tokens=40)))
    # A stop string from the middle of the first prompt's free-running text.
    text = free[0][0].text
    start = next(i for i in range(5, len(text) - 3) if all(" " < c < "~" for c in text[i : i + 3]))
    stop = text[start : start + 3]
    stream = client.completions.create(
        model="tiny",
        prompt=prompts,
        stream=True,
        n=2,
        temperature=0.0,
        max_tokens=40,
        stop=[stop],
        stream_options={"include_usage": True},
    )
    pieces: dict[int, str] = {index: "" for index in range(4)}
    finish: dict[int, str] = {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces[choice.index] += choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    # Held-back text never leaks a stop string that the final text cuts off.
    assert pieces[0] == pieces[1] == text[: text.index(stop)]
    assert finish[0] == "stop"
    other = free[1][0].text
    assert pieces[2] == pieces[3] == (other[: other.index(stop)] if stop in other else other)
    assert usage is not None and usage.prompt_tokens == sum(len(backend.encode(prompt)) for prompt in prompts)
