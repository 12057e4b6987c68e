"""The `openai` backend against `veriloop serve` running the real embedded model (SmolLM2-135M)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from veriloop.llm.openai_backend import OpenAIBackend
from veriloop.records import SamplingParams
from veriloop.testing import ServedProcess, served, user

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory, model_folder: Path) -> Iterator[ServedProcess]:
    home = tmp_path_factory.mktemp("embedded-home")
    # The session's converted model (tests/conftest.py), served read-only as a model folder.
    with served(
        "--backend",
        "embedded",
        "--model",
        str(model_folder),
        home=home,
        env={"VERILOOP_LLM__TORCH_THREADS": "1"},
        timeout_s=600,
    ) as server:
        yield server


def served_model(server: ServedProcess) -> str:
    model: str = httpx.get(f"{server.base_url}/models", timeout=30).json()["data"][0]["id"]
    return model


async def test_real_model_through_the_openai_backend(embedded_server: ServedProcess) -> None:
    backend = OpenAIBackend(base_url=embedded_server.base_url, model=served_model(embedded_server), max_concurrency=4)
    greedy = SamplingParams(temperature=0.0, max_tokens=12, logprobs=True)
    try:
        [[chat]], [[raw]] = await asyncio.gather(
            backend.generate([user("Write a Python function that adds two numbers.")], greedy),
            backend.generate(["def add(a, b):\n    return"], greedy),
        )
        sampled = await backend.generate(
            [user("Name a prime number.")] * 3, SamplingParams(n=2, temperature=0.9, seed=7, max_tokens=8)
        )
    finally:
        await backend.aclose()
    for completion in (chat, raw):
        assert completion.text.strip()
        assert completion.token_ids, "the server's token_ids field reached the Completion"
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
        assert all(value <= 0.0 for value in completion.logprobs)
        assert completion.usage.prompt_tokens > 0
        assert completion.usage.completion_tokens == len(completion.token_ids)
        assert completion.finish_reason in ("stop", "length")
    assert len(raw.token_ids) <= 12
    assert [len(samples) for samples in sampled] == [2, 2, 2]
    assert all(sample.token_ids for samples in sampled for sample in samples)


def test_logprob_tokens_spell_the_text(embedded_server: ServedProcess) -> None:
    body = {
        "model": served_model(embedded_server),
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
    }
    reply = httpx.post(f"{embedded_server.base_url}/chat/completions", json=body, timeout=120).json()
    [choice] = reply["choices"]
    tokens = [item["token"] for item in choice["logprobs"]["content"]]
    assert len(tokens) == len(choice["token_ids"]) == reply["usage"]["completion_tokens"]
    assert all(
        item["logprob"] <= 0.0 and item["bytes"] == list(item["token"].encode())
        for item in choice["logprobs"]["content"]
    )
    if choice["finish_reason"] == "length":  # no end-of-turn token among them: the tokens spell the text exactly
        assert "".join(tokens) == choice["message"]["content"]
