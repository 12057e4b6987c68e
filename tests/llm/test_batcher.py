"""The continuous batcher and the embedded backend on a tiny random llama (fast; the real model is in
test_embedded_model.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from veriloop.errors import BackendError
from veriloop.llm.base import Backend
from veriloop.llm.batcher import ContinuousBatcher, RowOutput, SampleSpec, default_eos_ids
from veriloop.llm.embedded import EmbeddedBackend, sample_seed
from veriloop.llm.kv_cache import QUERY_BLOCK
from veriloop.records import Message, SamplingParams

PROMPTS = [
    "def add(a, b):",
    "hello",
    "x" * 40,
    "The quick brown fox jumps",
    "abc",
    "print('hi')\n" * 5,
    "z",
    "0123456789",
]


def reference_greedy(model: Any, ids: Sequence[int], max_tokens: int) -> list[int]:
    """transformers' own generate at batch 1, no EOS: what a sequential run produces."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([list(ids)]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=None,
        )
    return [int(token) for token in out[0, len(ids) :]]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


@pytest.fixture
def batcher(tiny: tuple[Any, Any]) -> Any:
    model, tokenizer = tiny
    made: list[ContinuousBatcher] = []

    def make(max_batch_size: int = 3, eos: Sequence[int] = ()) -> ContinuousBatcher:
        made.append(ContinuousBatcher(model, tokenizer, max_batch_size=max_batch_size, eos_token_ids=eos))
        return made[-1]

    yield make
    for item in made:
        item.close()


@pytest.fixture
async def backend(tiny: tuple[Any, Any]) -> AsyncIterator[EmbeddedBackend]:
    model, tokenizer = tiny
    made = EmbeddedBackend(model, tokenizer, model_id="tiny", max_batch_size=4, eos_token_ids=[])
    yield made
    await made.aclose()


@pytest.mark.slow
def test_batched_greedy_equals_sequential_with_slot_reuse(tiny: tuple[Any, Any], batcher: Any) -> None:
    model, tokenizer = tiny
    lengths = [5, 30, 17, 40, 3, 25, 50, 12]
    subject = batcher(max_batch_size=3)
    futures = [
        subject.submit(encode(tokenizer, prompt), [SampleSpec(max_tokens=length)])[0]
        for prompt, length in zip(PROMPTS, lengths, strict=True)
    ]
    outputs = [future.result(timeout=60) for future in futures]
    for prompt, length, output in zip(PROMPTS, lengths, outputs, strict=True):
        assert output.token_ids == reference_greedy(model, encode(tokenizer, prompt), length), prompt
        assert output.finish_reason == "length"
        assert output.generated_tokens == length
    # Rows shared steps: far fewer steps than tokens, and the 8 requests went through 3 slots.
    assert subject.steps < sum(lengths) / 2
    assert subject.active_rows == 0


def test_a_long_row_does_not_hold_back_short_ones(tiny: tuple[Any, Any], batcher: Any) -> None:
    _, tokenizer = tiny
    subject = batcher(max_batch_size=2)
    done: list[str] = []
    long = subject.submit(encode(tokenizer, "long"), [SampleSpec(max_tokens=80)])[0]
    long.add_done_callback(lambda _: done.append("long"))
    shorts = []
    for index in range(6):
        future = subject.submit(encode(tokenizer, f"short {index}"), [SampleSpec(max_tokens=4)])[0]
        future.add_done_callback(lambda _, index=index: done.append(f"short {index}"))
        shorts.append(future)
    assert long.result(timeout=60).generated_tokens == 80
    assert all(future.result(timeout=60).generated_tokens == 4 for future in shorts)
    # The shorts took turns in the second slot while the long row kept decoding.
    assert done[-1] == "long"
    assert subject.steps < 80 + 4  # not 80 + 6 * 4: the short rows rode along


def test_stop_string_ends_the_row_and_is_excluded(tiny: tuple[Any, Any], batcher: Any) -> None:
    _, tokenizer = tiny
    subject = batcher()
    ids = encode(tokenizer, "def add(a, b):")
    free = subject.submit(ids, [SampleSpec(max_tokens=40)])[0].result(timeout=60)
    # An ASCII stop taken from the middle of the free-running text.
    start = next(i for i in range(5, len(free.text) - 3) if all(" " < c < "~" for c in free.text[i : i + 3]))
    stop = free.text[start : start + 3]
    cut = free.text.index(stop)
    stopped = subject.submit(ids, [SampleSpec(max_tokens=40, stop=("never there", stop), logprobs=True)])[0]
    output = stopped.result(timeout=60)
    assert output.finish_reason == "stop"
    assert output.text == free.text[:cut]
    assert stop not in output.text
    # The returned token ids spell the returned text (up to a token straddling the stop).
    assert output.text.startswith(tokenizer.decode(output.token_ids, skip_special_tokens=True))
    assert output.token_ids == free.token_ids[: len(output.token_ids)]
    assert output.logprobs is not None and len(output.logprobs) == len(output.token_ids)
    assert output.generated_tokens < free.generated_tokens


def test_shared_prompt_prefixes_are_prefilled_once(tiny: tuple[Any, Any], batcher: Any) -> None:
    model, tokenizer = tiny
    subject = batcher()
    system = "You are a careful assistant. Answer in code. " * 2
    prompts = [system + "Task one", system + "Task two, longer", "unrelated"]
    outputs = [subject.submit(encode(tokenizer, p), [SampleSpec(max_tokens=12)])[0].result(timeout=60) for p in prompts]
    shared = len(encode(tokenizer, system))
    # The second prompt reused the first one's prefix, cut to whole attention blocks (1 token with the C++ kernel).
    assert subject.block in (1, QUERY_BLOCK)
    assert shared - subject.block < subject.prefix_hits < 2 * shared and subject.prefix_hits % subject.block == 0
    for prompt, output in zip(prompts, outputs, strict=True):
        assert output.token_ids == reference_greedy(model, encode(tokenizer, prompt), 12)
    # A prompt identical to an earlier one still runs its last token (the logits come from it).
    again = subject.submit(encode(tokenizer, prompts[0]), [SampleSpec(max_tokens=12)])[0].result(timeout=60)
    assert again.token_ids == outputs[0].token_ids
    # With no memory for prefixes nothing is reused.
    model, tokenizer = tiny
    bare = ContinuousBatcher(model, tokenizer, eos_token_ids=[], prefix_cache_bytes=0)
    try:
        for prompt in prompts[:2]:
            bare.submit(encode(tokenizer, prompt), [SampleSpec(max_tokens=2)])[0].result(timeout=60)
        assert bare.prefix_hits == 0
    finally:
        bare.close()


def test_length_stop(tiny: tuple[Any, Any], batcher: Any) -> None:
    _, tokenizer = tiny
    output = batcher().submit(encode(tokenizer, "abc"), [SampleSpec(max_tokens=7)])[0].result(timeout=60)
    assert output.finish_reason == "length"
    assert len(output.token_ids) == 7
    assert output.text == tokenizer.decode(output.token_ids, skip_special_tokens=True)


def test_eos_ends_the_row_and_is_not_returned(tiny: tuple[Any, Any], batcher: Any) -> None:
    model, tokenizer = tiny
    ids = encode(tokenizer, "The quick brown fox jumps")
    reference = reference_greedy(model, ids, 30)
    eos = reference[3]
    first = reference.index(eos)
    output = batcher(eos=[eos]).submit(ids, [SampleSpec(max_tokens=30)])[0].result(timeout=60)
    assert output.finish_reason == "stop"
    assert output.token_ids == reference[:first]
    assert output.generated_tokens == first + 1


def test_end_of_text_tokens_end_a_sample_though_the_generation_config_names_one_eos() -> None:
    """Qwen2.5-Coder's GGUF lists only `<|im_end|>`; a raw continuation that wrote `<|endoftext|>` went on."""

    class Tokenizer:
        eos_token_id = 6

        def get_added_vocab(self) -> dict[str, int]:
            return {"<|endoftext|>": 5, "<|im_end|>": 6, "[refine]": 7, "<|fim_pad|>": 8, "<|im_start|>": 9}

    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[6, 11]))
    assert default_eos_ids(model, Tokenizer()) == {5, 6, 11}
    assert default_eos_ids(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None)), object()) == set()


@pytest.mark.model
def test_the_embedded_models_end_of_text_token_ends_a_sample(model_folder: Path) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    model = SimpleNamespace(generation_config=GenerationConfig.from_pretrained(model_folder))
    ids = default_eos_ids(model, tokenizer)
    assert {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")} <= ids
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in ids


def test_logprobs_are_the_models_log_softmax(tiny: tuple[Any, Any], batcher: Any) -> None:
    model, tokenizer = tiny
    subject = batcher()
    ids = encode(tokenizer, "hello there")
    futures = subject.submit(
        ids,
        [SampleSpec(max_tokens=12, logprobs=True), SampleSpec(max_tokens=12, temperature=1.3, seed=5, logprobs=True)],
    )
    for output in (future.result(timeout=60) for future in futures):
        assert output.logprobs is not None and len(output.logprobs) == len(output.token_ids) == 12
        full = torch.tensor([ids + output.token_ids])
        with torch.inference_mode():
            expected = torch.log_softmax(model(input_ids=full).logits[0].float(), dim=-1)
        positions = range(len(ids) - 1, len(ids) - 1 + len(output.token_ids))
        wanted = [float(expected[pos, token]) for pos, token in zip(positions, output.token_ids, strict=True)]
        assert output.logprobs == pytest.approx(wanted, abs=1e-4)


def test_seeded_samples_are_reproducible_and_independent_of_the_batch(tiny: tuple[Any, Any], batcher: Any) -> None:
    _, tokenizer = tiny
    ids = encode(tokenizer, "sample me")
    spec = SampleSpec(max_tokens=20, temperature=1.0, top_p=0.9, seed=1234)
    alone = batcher(max_batch_size=1).submit(ids, [spec])[0].result(timeout=60)
    crowded = batcher(max_batch_size=4)
    others = [crowded.submit(encode(tokenizer, p), [SampleSpec(max_tokens=15)])[0] for p in PROMPTS[:3]]
    again = crowded.submit(ids, [spec])[0].result(timeout=60)
    assert again.token_ids == alone.token_ids
    for future in others:
        future.result(timeout=60)
    other_seed = crowded.submit(ids, [SampleSpec(max_tokens=20, temperature=1.0, seed=99)])[0].result(timeout=60)
    assert other_seed.token_ids != alone.token_ids


def test_tiny_top_p_is_greedy(tiny: tuple[Any, Any], batcher: Any) -> None:
    _, tokenizer = tiny
    subject = batcher()
    ids = encode(tokenizer, "nucleus")
    greedy, nucleus = (
        future.result(timeout=60)
        for future in subject.submit(
            ids, [SampleSpec(max_tokens=15), SampleSpec(max_tokens=15, temperature=2.0, top_p=1e-6, seed=3)]
        )
    )
    assert nucleus.token_ids == greedy.token_ids


def test_bad_prompts_fail_with_backend_error(tiny: tuple[Any, Any], batcher: Any) -> None:
    subject = batcher()
    with pytest.raises(BackendError, match="empty"):
        subject.submit([], [SampleSpec(max_tokens=3)])[0].result(timeout=10)
    with pytest.raises(BackendError, match="context is 1024"):
        subject.submit([5] * 1024, [SampleSpec(max_tokens=3)])[0].result(timeout=10)
    # Near the end of the context the sample is cut to fit, not failed.
    output = subject.submit([5] * 1020, [SampleSpec(max_tokens=50)])[0].result(timeout=60)
    assert output.finish_reason == "length" and len(output.token_ids) == 4


def test_close_fails_waiting_rows_and_stops_the_worker(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    subject = ContinuousBatcher(model, tokenizer, max_batch_size=1, eos_token_ids=[])
    futures = [subject.submit(encode(tokenizer, p), [SampleSpec(max_tokens=200)])[0] for p in PROMPTS[:3]]
    subject.close(timeout=30)
    assert not subject._thread.is_alive()
    errors = 0
    for future in futures:
        try:
            output: RowOutput = future.result(timeout=10)
            assert output.generated_tokens == 200
        except BackendError as exc:
            assert "closed" in str(exc)
            errors += 1
    assert errors >= 2
    with pytest.raises(BackendError, match="closed"):
        subject.submit([5, 6], [SampleSpec(max_tokens=3)])[0].result(timeout=10)


# --------------------------------------------------------------------------- through the backend


async def test_backend_satisfies_the_protocol_and_returns_n_samples(backend: EmbeddedBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.model_id == "tiny"
    sampled = SamplingParams(n=4, temperature=1.0, seed=11, max_tokens=10, logprobs=True)
    greedy = SamplingParams(n=3, max_tokens=10)
    [samples], [same] = await asyncio.gather(
        backend.generate(["write code"], sampled), backend.generate([[Message(role="user", content="hi")]], greedy)
    )
    assert len(samples) == 4 and len(same) == 3
    assert len({tuple(sample.token_ids) for sample in samples}) > 1, "independent samples"
    assert len({tuple(sample.token_ids) for sample in same}) == 1, "greedy samples agree"
    for sample in samples:
        assert sample.model == "tiny" and sample.params == sampled
        assert sample.usage.completion_tokens == len(sample.token_ids) == 10
        assert sample.logprobs is not None and len(sample.logprobs) == 10
        assert sample.usage.prompt_tokens == len(backend.encode("write code"))
    # Sample 0 of a seeded request is the request with that seed and n=1.
    [[first]] = await backend.generate(["write code"], sampled.model_copy(update={"n": 1}))
    assert first.token_ids == samples[0].token_ids
    assert sample_seed(11, 0) == 11 and sample_seed(11, 1) != 11


@pytest.mark.slow
async def test_concurrent_callers_share_steps_and_match_sequential(
    tiny: tuple[Any, Any], backend: EmbeddedBackend
) -> None:
    model, _ = tiny
    params = SamplingParams(max_tokens=24)
    steps = backend.batcher.steps
    results = await asyncio.gather(*(backend.generate([prompt], params) for prompt in PROMPTS))
    assert backend.batcher.steps - steps < len(PROMPTS) * 24 / 2
    for prompt, [[completion]] in zip(PROMPTS, results, strict=True):
        assert completion.token_ids == reference_greedy(model, backend.encode(prompt), 24)


async def test_chat_prompts_use_the_template(backend: EmbeddedBackend) -> None:
    conversation = [Message(role="system", content="be brief"), Message(role="user", content="hi")]
    text = backend.tokenizer.decode(backend.encode(conversation))
    assert text == "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert backend.tokenizer.decode(backend.encode("plain")) == "plain"


async def test_event_loop_stays_responsive_while_decoding(backend: EmbeddedBackend) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    await backend.generate(PROMPTS[:4], SamplingParams(max_tokens=60))
    elapsed = time.perf_counter() - start
    task.cancel()
    assert ticks >= max(3, elapsed / 0.005 / 10), (ticks, elapsed)


async def test_cancelled_request_frees_its_slot(backend: EmbeddedBackend) -> None:
    task = asyncio.create_task(backend.generate(["cancel me"], SamplingParams(n=2, max_tokens=900)))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if backend.batcher.active_rows == 2:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if backend.batcher.active_rows == 0:
            break
        await asyncio.sleep(0.01)
    assert backend.batcher.active_rows == 0
    [[after]] = await backend.generate(["next"], SamplingParams(max_tokens=3))
    assert len(after.token_ids) == 3


async def test_aclose_stops_the_worker_and_refuses_new_work(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    subject = EmbeddedBackend(model, tokenizer, model_id="tiny", eos_token_ids=[])
    await subject.generate(["warm"], SamplingParams(max_tokens=2))
    await subject.aclose()
    assert not subject.batcher._thread.is_alive()
    with pytest.raises(BackendError, match="closed"):
        await subject.generate(["late"], SamplingParams(max_tokens=2))


@pytest.mark.gpu
def test_batcher_on_cuda_matches_sequential_greedy() -> None:
    from veriloop.testing import tiny_causal_lm

    model, tokenizer = tiny_causal_lm(seed=1)
    model.to("cuda")
    subject = ContinuousBatcher(model, tokenizer, max_batch_size=3, eos_token_ids=[])
    try:
        lengths = [9, 31, 4, 20, 15]
        futures = [
            subject.submit(encode(tokenizer, prompt), [SampleSpec(max_tokens=n, logprobs=True)])[0]
            for prompt, n in zip(PROMPTS, lengths, strict=False)
        ]
        sampled = subject.submit(encode(tokenizer, "seeded"), [SampleSpec(max_tokens=10, temperature=1.0, seed=4)] * 2)
        for prompt, n, future in zip(PROMPTS, lengths, futures, strict=False):
            output = future.result(timeout=120)
            ids = torch.tensor([encode(tokenizer, prompt)], device="cuda")
            with torch.inference_mode():
                reference = model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, eos_token_id=None
                )
            assert output.token_ids == reference[0, ids.shape[1] :].tolist()
            assert output.logprobs is not None and all(value <= 0 for value in output.logprobs)
        first, second = (future.result(timeout=120) for future in sampled)
        assert first.token_ids == second.token_ids  # the same seed for both samples
    finally:
        subject.close()
