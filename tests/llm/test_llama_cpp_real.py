"""The `llama_cpp` backend against a real llama-server on SmolLM2's GGUF, beside the embedded backend on the same file.

Needs a built llama-server (`python -m veriloop.llm.llama_server build`, 6 to 20 minutes; CI never builds it, so this
file is skipped there with that reason). The two backends read the same prompt tokens; llama.cpp multiplies the GGUF's
own blocks while the embedded backend reads float copies of them, so their greedy answers are compared on their
first tokens, and the constraints on what they force."""

from __future__ import annotations

import json
import math

import pytest

from veriloop.config import Settings, load_settings
from veriloop.llm.embedded import EmbeddedBackend
from veriloop.llm.llama_cpp_backend import LlamaCppBackend
from veriloop.llm.llama_server import find_llama_server
from veriloop.records import Constraint, Message, SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.llama_server]

PROMPTS: list[str | list[Message]] = [
    "def fibonacci(n):\n",
    [Message(role="user", content="Write a Python function that reverses a string.")],
]
FIRST = 6
"""Greedy tokens both backends must agree on (the numerics differ after that, as any two engines' do)."""


@pytest.fixture
def llama_settings(model_settings: Settings) -> Settings:
    """The test home's converted model, served by the llama-server the user's cache (or PATH) holds."""
    binary = find_llama_server(load_settings().paths.cache_dir)
    assert binary is not None  # the llama_server marker skips otherwise
    llm = model_settings.llm.model_copy(update={"llama_server": str(binary), "max_concurrency": 2})
    return model_settings.model_copy(update={"llm": llm})


async def test_greedy_answers_match_the_embedded_backend_on_their_first_tokens(
    model_settings: Settings, llama_settings: Settings
) -> None:
    params = SamplingParams(max_tokens=24, logprobs=True)
    llama = LlamaCppBackend.from_settings(llama_settings)
    embedded = EmbeddedBackend.from_settings(model_settings)
    try:
        theirs = await llama.generate(PROMPTS, params)
        ours = await embedded.generate(PROMPTS, params)
    finally:
        await llama.aclose()
        await embedded.aclose()
    for [mine], [other] in zip(ours, theirs, strict=True):
        assert other.usage.prompt_tokens == mine.usage.prompt_tokens  # the same prompt tokens went in
        assert other.token_ids[:FIRST] == mine.token_ids[:FIRST], (other.text, mine.text)
        assert other.text.startswith(llama.tokenizer.decode(other.token_ids[:FIRST], skip_special_tokens=True))
        assert other.logprobs is not None and len(other.logprobs) == len(other.token_ids)
        assert all(value <= 0.0 for value in other.logprobs)
        assert mine.logprobs is not None
        for a, b in zip(other.logprobs[:FIRST], mine.logprobs[:FIRST], strict=True):
            assert math.isclose(a, b, abs_tol=0.25), (other.logprobs[:FIRST], mine.logprobs[:FIRST])
        assert other.finish_reason in {"stop", "length"}


async def test_grammars_schemas_stops_and_seeds_hold_on_the_real_server(llama_settings: Settings) -> None:
    llama = LlamaCppBackend.from_settings(llama_settings)
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    question = [Message(role="user", content="What is 2 + 3? Reply in JSON.")]
    try:
        [[choice]] = await llama.generate(
            ["Is the sky blue? Answer:"],
            SamplingParams(max_tokens=8, constraint=Constraint(kind="gbnf", value='root ::= " yes" | " no"')),
        )
        as_json = Constraint(kind="json_schema", value=json.dumps(schema))
        [[structured]] = await llama.generate([question], SamplingParams(max_tokens=32, constraint=as_json))
        [[stopped]] = await llama.generate(["def add(a, b):\n"], SamplingParams(max_tokens=64, stop=["return"]))
        sampled = SamplingParams(max_tokens=12, temperature=1.0, seed=11, n=2)
        first, again = [await llama.generate(["Once upon a time"], sampled) for _ in range(2)]
    finally:
        await llama.aclose()
    assert choice.text in {" yes", " no"}
    assert isinstance(json.loads(structured.text)["answer"], int)
    assert "return" not in stopped.text and stopped.finish_reason == "stop"
    # the ids are the longest prefix inside the cut text (the stop word's token may also carry the space before it)
    kept = llama.tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    assert stopped.text.startswith(kept) and len(stopped.text) - len(kept) <= 2
    assert [sample.text for sample in first[0]] == [sample.text for sample in again[0]]  # seeded: reproducible
