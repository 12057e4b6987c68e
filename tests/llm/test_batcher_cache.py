"""The batcher's step machinery on the tiny llama: joint and chunked prefill, the slot cache, the live CommVQ cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from veriloop.kernels import cpu_attention
from veriloop.kernels.commvq import attach_commvq_, collect_kv, fit_commvq
from veriloop.llm.batcher import ContinuousBatcher, SampleSpec, SpeculativePrefill
from veriloop.llm.commvq_cache import CommVQSlotCache
from veriloop.llm.embedded import commvq_cache_factory
from veriloop.llm.kv_cache import QUERY_BLOCK, SlotKVCache, causal_chunk_mask, slot_chunk_attention
from veriloop.llm.packed import PackedDecoder

PROMPTS = ["def add(a, b):", "hello there", "x" * 40, "The quick brown fox jumps"]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


def reference_greedy(model: Any, ids: Sequence[int], max_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([list(ids)]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=None,
        )
    return [int(token) for token in out[0, len(ids) :]]


def test_prompts_that_join_together_are_prefilled_in_one_forward(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=4, eos_token_ids=[])
    try:
        with batcher._cond:  # queue all four before the worker looks, as concurrent callers would
            futures = [batcher.submit(encode(tokenizer, p), [SampleSpec(max_tokens=1)])[0] for p in PROMPTS]
        outputs = [future.result(timeout=60) for future in futures]
        assert batcher.stats.steps == 1 and batcher.stats.mixed_steps == 1
        assert batcher.stats.prefill_tokens == sum(len(encode(tokenizer, p)) for p in PROMPTS)
        for prompt, output in zip(PROMPTS, outputs, strict=True):
            assert output.token_ids == reference_greedy(model, encode(tokenizer, prompt), 1)
    finally:
        batcher.close()


def test_a_long_prompt_is_prefilled_in_chunks_while_a_row_decodes(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=2, eos_token_ids=[], prefill_chunk=16)
    try:
        seen: list[int] = []
        running_ids = encode(tokenizer, "running")
        running = batcher.submit(
            running_ids, [SampleSpec(max_tokens=60)], [lambda _: seen.append(batcher.stats.prefill_tokens)]
        )[0]
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            time.sleep(0.001)
        long_ids = list(torch.randint(3, 259, (300,), generator=torch.Generator().manual_seed(2)).tolist())
        joined = batcher.submit(long_ids, [SampleSpec(max_tokens=5)])[0]
        first, second = running.result(timeout=120), joined.result(timeout=120)
        start = len(running_ids)
        # The running row took tokens while the long prompt was part-way through its prefill.
        assert any(start < count < start + 300 for count in seen)
        assert batcher.stats.mixed_steps >= 300 // 16
        assert first.token_ids == reference_greedy(model, running_ids, 60)
        assert second.token_ids == reference_greedy(model, long_ids, 5)
    finally:
        batcher.close()


def test_a_row_leaving_frees_its_slot_without_moving_the_others(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=2, eos_token_ids=[])
    try:
        long = batcher.submit(encode(tokenizer, "long"), [SampleSpec(max_tokens=80)])[0]
        shorts = [batcher.submit(encode(tokenizer, f"s{i}"), [SampleSpec(max_tokens=3)])[0] for i in range(6)]
        assert long.result(timeout=60).token_ids == reference_greedy(model, encode(tokenizer, "long"), 80)
        for index, future in enumerate(shorts):
            assert future.result(timeout=60).token_ids == reference_greedy(model, encode(tokenizer, f"s{index}"), 3)
        cache = batcher.cache
        assert isinstance(cache, SlotKVCache)
        assert cache.grows == 1  # allocated once; six rows came and went through the second slot
        assert batcher.peak_rows == 2
    finally:
        batcher.close()


@pytest.fixture(scope="module")
def tiny_commvq(tiny: tuple[Any, Any]) -> Any:
    model, _ = tiny
    ids = torch.randint(3, 259, (256,), generator=torch.Generator().manual_seed(0))
    kv = collect_kv(model, ids, head_dim=model.config.hidden_size // model.config.num_attention_heads)
    return fit_commvq(kv, key_stages=4, codebook_size=16, em_iters=3, value_bits=2, value_steps=5)


@pytest.mark.slow
def test_the_live_commvq_cache_decodes_what_compress_then_decompress_gives(
    tiny: tuple[Any, Any], tiny_commvq: Any
) -> None:
    """Scoring through a cache of codes gives transformers' log-probabilities on keys and values sent
    through the codec; the cache holds bytes, at least 5x fewer than fp32.

    Not every position agrees: a key whose projection differs in the last float bit between a batch
    of one token and a batch of the whole text can fall on the other side of a near tie between two
    codewords, and the tiny random model's sharp logits amplify that. Most positions agree closely."""
    model, tokenizer = tiny
    remove = attach_commvq_(model, tiny_commvq)
    try:
        references = []
        for prompt in PROMPTS:
            ids = encode(tokenizer, prompt)
            tokens = reference_greedy(model, ids, 12)
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([ids + tokens])).logits[0].float()
            logps = torch.log_softmax(logits, dim=-1)
            references.append((ids, tokens, [float(logps[len(ids) - 1 + i, t]) for i, t in enumerate(tokens)]))
    finally:
        remove()
    codes_only = commvq_cache_factory(tiny_commvq, window=0, sink=0)  # every column read from its codes
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=3, eos_token_ids=[], cache_factory=codes_only)
    try:
        futures = [
            batcher.submit(ids, [SampleSpec(max_tokens=12, forced=tuple(tokens), logprobs=True)])[0]
            for ids, tokens, _ in references
        ]
        close, total = 0, 0
        for (_, tokens, wanted), future in zip(references, futures, strict=True):
            output = future.result(timeout=60)
            assert output.token_ids == tokens and output.logprobs is not None
            close += sum(abs(a - b) < 2e-2 for a, b in zip(output.logprobs, wanted, strict=True))
            total += len(wanted)
        assert close >= 0.75 * total, (close, total)
        ids, tokens, _ = references[0]
        greedy = batcher.submit(ids, [SampleSpec(max_tokens=12)])[0].result(timeout=60)
        assert greedy.token_ids[:4] == tokens[:4]
        cache = batcher.cache
        assert isinstance(cache, CommVQSlotCache)
        full = SlotKVCache(2, 3, 2, 16, dtype=torch.float32, device=torch.device("cpu"), max_columns=1024)
        assert full.bytes_per_token() / cache.bytes_per_token() >= 5
        assert cache.key_codes[0].dtype == torch.uint8 and cache.value_codes[0].dtype == torch.uint8
    finally:
        batcher.close()


def test_commvq_sink_and_recent_columns_are_read_in_fp16(tiny: tuple[Any, Any], tiny_commvq: Any) -> None:
    """A window that covers every column reads nothing from the codes: the full cache's log-probabilities
    (up to fp16), through chunked prefill, a leader's columns copied to a second sample, and decoding."""
    model, tokenizer = tiny
    prompt = list(torch.randint(3, 259, (40,), generator=torch.Generator().manual_seed(5)).tolist())
    forced = tuple(torch.randint(3, 259, (12,), generator=torch.Generator().manual_seed(6)).tolist())
    spec = SampleSpec(max_tokens=12, forced=forced, logprobs=True)
    results = {}
    for name, factory in (("full", None), ("wide", commvq_cache_factory(tiny_commvq, window=64, sink=4))):
        batcher = ContinuousBatcher(
            model, tokenizer, max_batch_size=2, eos_token_ids=[], prefill_chunk=16, cache_factory=factory
        )
        try:
            results[name] = [future.result(timeout=60).logprobs for future in batcher.submit(prompt, [spec, spec])]
        finally:
            batcher.close()
    for full, wide in zip(results["full"], results["wide"], strict=True):
        assert wide == pytest.approx(full, rel=2e-3, abs=1e-2)  # fp16 keys and values; sharp random logits


def test_commvq_ring_after_a_partial_prefix_copy_holds_the_right_columns(
    tiny: tuple[Any, Any], tiny_commvq: Any
) -> None:
    """Reusing the first `stop` columns of a saved prompt: the ring's columns [stop - window, stop) come from
    the saved ring where it still held them, and are decoded from their codes where it did not."""
    model, tokenizer = tiny
    window = 8
    batcher = ContinuousBatcher(
        model,
        tokenizer,
        max_batch_size=2,
        eos_token_ids=[],
        cache_factory=commvq_cache_factory(tiny_commvq, window=window, sink=2),
    )
    try:
        prompt = list(torch.randint(3, 259, (30,), generator=torch.Generator().manual_seed(7)).tolist())
        batcher.submit(prompt, [SampleSpec(max_tokens=1)])[0].result(timeout=60)
        cache = batcher.cache
        assert isinstance(cache, CommVQSlotCache)
        with torch.inference_mode():
            saved = cache.copy_out(0, 30)
            for stop in (30, 26, 12):
                cache.copy_in(1, saved, stop)
                for layer in (0, cache.layers - 1):
                    decoded = cache._unrotated_keys(layer, slice(1, 2), 0, stop)[0]  # (H, stop, d) from the codes
                    exact = cache.recent_keys[layer][1].float()
                    for column in range(stop - window, stop):
                        ring = exact[:, column % window]
                        if column >= 30 - window:  # still in the saved ring: the prompt's own fp16 key
                            assert torch.allclose(ring, cache.recent_keys[layer][0, :, column % window].float())
                        else:
                            assert torch.allclose(ring, decoded[:, column], atol=1e-2, rtol=1e-2), (stop, column)
                    assert torch.equal(cache.sink_keys[layer][1], cache.sink_keys[layer][0])
    finally:
        batcher.close()


class _EagerCommVQ(CommVQSlotCache):
    """Encodes every step's columns with the step (the cache before lazy encoding): the reference."""

    def write(self, layer: int, layout: Any, keys: torch.Tensor, values: torch.Tensor, rope: Any) -> None:
        super().write(layer, layout, keys, values, rope)
        if layer == self.layers - 1:
            self.flush()


def test_lazy_commvq_encoding_gives_the_codes_and_outputs_of_encoding_every_step(
    tiny: tuple[Any, Any], tiny_commvq: Any
) -> None:
    """Columns wait in the ring and are encoded in blocks; through chunked prefill, n=2 (the leader's
    columns copied out with pending columns, and in), a prefix-cache hit and a slot reused by an unrelated
    prompt, attention reads the same numbers and, once flushed, every code is the eager cache's."""
    model, tokenizer = tiny
    prompt = list(torch.randint(3, 259, (5,), generator=torch.Generator().manual_seed(8)).tolist())  # all pending
    other = list(torch.randint(3, 259, (13,), generator=torch.Generator().manual_seed(9)).tolist())
    forced = tuple(torch.randint(3, 259, (20,), generator=torch.Generator().manual_seed(10)).tolist())
    spec = SampleSpec(max_tokens=20, forced=forced, logprobs=True)
    runs = {}
    for cls in (CommVQSlotCache, _EagerCommVQ):

        def make(decoder: Any, slots: int, max_columns: int, kind: type[CommVQSlotCache] = cls) -> CommVQSlotCache:
            return kind(tiny_commvq, decoder, slots, max_columns, window=6, sink=2)

        batcher = ContinuousBatcher(
            model, tokenizer, max_batch_size=2, eos_token_ids=[], prefill_chunk=8, cache_factory=make
        )
        try:
            outputs = [future.result(timeout=60).logprobs for future in batcher.submit(prompt, [spec, spec])]
            outputs.append(batcher.submit([*prompt, 5, 6, 7], [spec])[0].result(timeout=60).logprobs)
            outputs += [future.result(timeout=60).logprobs for future in batcher.submit(other, [spec, spec])]
            cache = batcher.cache
            assert isinstance(cache, CommVQSlotCache)
            if cls is CommVQSlotCache:
                assert any(done < end for done, end in zip(cache._done, cache._end, strict=True))  # still pending
            cache.flush()
            runs[cls] = (outputs, cache)
        finally:
            batcher.close()
    (lazy_out, lazy), (eager_out, eager) = runs[CommVQSlotCache], runs[_EagerCommVQ]
    assert lazy_out == eager_out
    assert lazy._end == eager._end and lazy._done == lazy._end
    for slot, end in enumerate(lazy._end):
        assert torch.equal(lazy.positions[slot, :end], eager.positions[slot, :end])
        for layer in range(lazy.layers):
            for name in ("key_codes", "key_norms", "value_codes", "value_norms"):
                lazy_codes, eager_codes = getattr(lazy, name)[layer], getattr(eager, name)[layer]
                assert torch.equal(lazy_codes[slot, :, :end], eager_codes[slot, :, :end])
    # Keys are rotated with cos/sin kept for the step: the decoder's own RoPE, bit for bit.
    end = max(lazy._end)
    with torch.inference_mode():
        keys = lazy._unrotated_keys(1, slice(0, 2), 0, end)
        flat = keys.permute(0, 2, 1, 3).reshape(2 * end, keys.shape[1], -1)
        positions = lazy.positions[:2, :end].long().reshape(-1)
        expected = lazy.decoder.rope(flat, positions).view(2, end, keys.shape[1], -1).permute(0, 2, 1, 3)
        assert torch.equal(lazy._rotate(keys, slice(0, 2), end), expected.float())


def test_forced_tokens_score_a_continuation(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=2, eos_token_ids=[])
    try:
        ids, forced = encode(tokenizer, "def add(a, b):"), encode(tokenizer, " return a + b")
        output = batcher.submit(ids, [SampleSpec(max_tokens=100, forced=tuple(forced), logprobs=True)])[0].result(60)
        assert output.token_ids == forced and output.logprobs is not None
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids + forced])).logits[0].float()
        expected = torch.log_softmax(logits, dim=-1)
        wanted = [float(expected[len(ids) - 1 + i, t]) for i, t in enumerate(forced)]
        assert output.logprobs == pytest.approx(wanted, abs=1e-4)
    finally:
        batcher.close()


def test_specprefill_scoring_does_not_stop_other_rows(tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The speculator scores a long prompt on a helper thread: a short row finishes while scoring is held."""
    import veriloop.kernels.specprefill as specprefill

    model, tokenizer = tiny
    release = threading.Event()
    original = specprefill.kept_indices

    def held(*args: Any, **kwargs: Any) -> list[int]:
        assert release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(specprefill, "kept_indices", held)
    spec = SpeculativePrefill(keep_ratio=0.5, min_tokens=100, speculator_layers=1, chunk_size=16, look_ahead=4)
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=2, speculative=spec, eos_token_ids=[])
    try:
        long_ids = list(torch.randint(3, 259, (160,), generator=torch.Generator().manual_seed(1)).tolist())
        long = batcher.submit(long_ids, [SampleSpec(max_tokens=4)])[0]
        short_ids = encode(tokenizer, "short")
        short = batcher.submit(short_ids, [SampleSpec(max_tokens=30)])[0].result(timeout=60)
        assert short.token_ids == reference_greedy(model, short_ids, 30)
        assert not long.done()
        release.set()
        assert len(long.result(timeout=60).token_ids) == 4
        assert batcher.speculative_prefills == 1
    finally:
        release.set()
        batcher.close()


def _ascii_window(text: str, size: int = 3) -> str:
    """A printable ASCII run of `size` characters from the middle of `text` (a stop string it surely holds)."""
    start = next(i for i in range(5, len(text) - size) if all(" " < c < "~" for c in text[i : i + size]))
    return text[start : start + size]


def test_greedy_matches_sequential_as_rows_of_different_lengths_join_and_leave(tiny: tuple[Any, Any]) -> None:
    """Prompts of different lengths join while rows decode (chunked 8 tokens a step), rows leave at
    different times and free slots take the next prompt; n=2 shares one prefill; a stop string cuts one
    row; logprobs are recorded on another. Every greedy sample is transformers' batch-1 greedy output."""
    model, tokenizer = tiny
    batcher = ContinuousBatcher(
        model, tokenizer, max_batch_size=3, eos_token_ids=[], prefill_chunk=8, prefix_cache_bytes=0
    )
    try:
        first_ids = encode(tokenizer, "abc")
        heard = threading.Event()
        first = batcher.submit(first_ids, [SampleSpec(max_tokens=40)], [lambda _: heard.set()])[0]
        assert heard.wait(60)  # the first row is decoding: everything below joins mid-decode
        stop_ids = encode(tokenizer, "def add(a, b):")
        stop_reference = reference_greedy(model, stop_ids, 40)
        stop_text = tokenizer.decode(stop_reference, skip_special_tokens=True)
        stop = _ascii_window(stop_text)
        jobs = [  # (prompt ids, samples)
            (encode(tokenizer, "The quick brown fox jumps over the lazy dog. " * 2), [SampleSpec(max_tokens=9)] * 2),
            (encode(tokenizer, "x" * 23), [SampleSpec(max_tokens=25, logprobs=True)]),
            (stop_ids, [SampleSpec(max_tokens=40, stop=("never there", stop))]),
            (encode(tokenizer, "z"), [SampleSpec(max_tokens=3)]),
            (encode(tokenizer, "print('hi')\n" * 6), [SampleSpec(max_tokens=14, logprobs=True)] * 2),
        ]
        futures = [batcher.submit(ids, samples) for ids, samples in jobs]
        assert first.result(timeout=120).token_ids == reference_greedy(model, first_ids, 40)
        for (ids, samples), group in zip(jobs, futures, strict=True):
            outputs = [future.result(timeout=120) for future in group]
            spec = samples[0]
            reference = reference_greedy(model, ids, spec.max_tokens)
            for output in outputs:
                if spec.stop:
                    assert output.finish_reason == "stop"
                    assert output.text == stop_text[: stop_text.index(stop)]
                    assert output.token_ids == reference[: len(output.token_ids)]
                    continue
                assert output.token_ids == reference and output.finish_reason == "length"
                if spec.logprobs:
                    with torch.inference_mode():
                        logits = model(input_ids=torch.tensor([ids + reference])).logits[0].float()
                    expected = torch.log_softmax(logits, dim=-1)
                    wanted = [float(expected[len(ids) - 1 + i, t]) for i, t in enumerate(reference)]
                    assert output.logprobs == pytest.approx(wanted, abs=1e-4)
                else:
                    assert output.logprobs is None
        # Seven samples went through three slots; prompts were read in chunks beside decoding rows;
        # the slots were reused in place (the buffers were allocated once, never rebuilt).
        assert batcher.peak_rows == 3 and batcher.active_rows == 0
        assert batcher.stats.mixed_steps > len(jobs) + 1  # more prefill steps than prompts: chunks
        assert batcher.stats.prefill_tokens == len(first_ids) + sum(len(ids) for ids, _ in jobs)  # n=2: one prefill
        cache = batcher.cache
        assert isinstance(cache, SlotKVCache) and cache.grows == 1
    finally:
        batcher.close()


@pytest.mark.parametrize("length", [110, 200, 333])
def test_a_prompts_attention_is_the_same_however_its_chunks_were_cut(length: int) -> None:
    """The embedded model's shapes (3 key heads, 3 queries each, 64 wide): chunks that start on an attention block
    (the batcher's budget, a reused prefix) give each position the bits one whole-prompt chunk gives it."""
    generator = torch.Generator().manual_seed(length)
    q = torch.randn(length, 3, 3, 64, generator=generator)
    keys, values = (torch.randn(2, 3, length + 40, 64, generator=generator) for _ in range(2))
    whole = slot_chunk_attention(q, keys, values, 1, 0, length, 0.125)
    reference = torch.nn.functional.scaled_dot_product_attention(
        q.permute(1, 2, 0, 3).reshape(1, 3, 3 * length, 64),
        keys[1:, :, :length],
        values[1:, :, :length],
        attn_mask=causal_chunk_mask(0, length, 3, q.device),
        scale=0.125,
    )
    torch.testing.assert_close(whole, reference.view(3, 3, length, 64).permute(2, 0, 1, 3))
    for cut in range(QUERY_BLOCK, length, QUERY_BLOCK):
        for end in (min(cut + 64, length), length):
            part = slot_chunk_attention(q[cut:end], keys, values, 1, cut, end - cut, 0.125)
            assert torch.equal(part, whole[cut:end]), (cut, end)


@pytest.mark.parametrize(
    "kernel",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(
                not cpu_attention.load(), reason="no working C++ compiler for torch extensions here"
            ),
        ),
    ],
)
def test_chunks_end_on_attention_blocks_and_prefixes_are_reused_in_whole_blocks(
    tiny: tuple[Any, Any], kernel: bool
) -> None:
    """PyTorch's attention sums a block of queries at once: chunks and reused prefixes keep to whole blocks. The C++
    kernel attends token by token: a chunk may end anywhere, and a prefix is reused whole."""
    model, tokenizer = tiny
    decoder = PackedDecoder(model, attention_kernel=kernel)
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=2, eos_token_ids=[], prefill_chunk=40, decoder=decoder)
    assert batcher.block == (1 if kernel else QUERY_BLOCK)
    starts: list[tuple[int, int]] = []
    forward = batcher.decoder.forward

    def spy(input_ids: torch.Tensor, layout: Any, cache: Any, logit_index: torch.Tensor) -> torch.Tensor:
        starts.extend((chunk.start, chunk.count) for chunk in layout.chunks)
        return forward(input_ids, layout, cache, logit_index)

    batcher.decoder.forward = spy  # type: ignore[method-assign]
    try:
        prefix = list(torch.randint(3, 259, (45,), generator=torch.Generator().manual_seed(4)).tolist())
        running = batcher.submit(encode(tokenizer, "running"), [SampleSpec(max_tokens=80)])[0]
        first = batcher.submit(prefix + [7] * 70, [SampleSpec(max_tokens=2)])[0].result(timeout=120)
        second = batcher.submit(prefix + [9] * 30, [SampleSpec(max_tokens=2)])[0].result(timeout=120)
        running.result(timeout=120)
        assert batcher.prefix_hits == (45 if kernel else 32)  # 45 shared tokens, reused up to the last whole block
        assert first.token_ids == reference_greedy(model, prefix + [7] * 70, 2)
        assert second.token_ids == reference_greedy(model, prefix + [9] * 30, 2)
        long_chunks = [(start, count) for start, count in starts if count > 8]
        assert long_chunks and all(start % batcher.block == 0 for start, _ in long_chunks)
        if kernel:
            assert (45, 30) in long_chunks  # the second prompt resumed mid-block
    finally:
        batcher.close()


def test_a_chunk_never_cuts_an_attention_block_whatever_budget_is_left() -> None:
    """Many prompts joining at once share a step's budget: what is left for the next one may end inside a block,
    and a block cut in two is summed differently (found at 16 in flight: 2 of 16 answers changed). That prompt
    waits for the next step; one that finishes within what is left is still read."""

    def group(width: int, done: int = 0) -> Any:
        return SimpleNamespace(width=width, done=done)

    first, cut, cut_later, short = group(30), group(100), group(50, done=16), group(5)
    planner = SimpleNamespace(prefill_chunk=40, block=QUERY_BLOCK, _prefilling=[first, cut, cut_later, short])
    chunks, finishing = ContinuousBatcher._plan_chunks(planner, decoding=True)  # type: ignore[arg-type]
    assert chunks == [(first, 30), (short, 5)] and finishing == [first, short]
    for group_, count in chunks:
        assert (group_.done + count) % QUERY_BLOCK == 0 or group_.done + count == group_.width
    planner = SimpleNamespace(prefill_chunk=40, block=QUERY_BLOCK, _prefilling=[cut, cut_later])
    chunks, _ = ContinuousBatcher._plan_chunks(planner, decoding=True)  # type: ignore[arg-type]
    assert chunks == [(cut, 32)]  # 40 rounded down to a block end; 8 left cannot reach the next one's
    tiny_budget = SimpleNamespace(prefill_chunk=8, block=QUERY_BLOCK, _prefilling=[group(100)])
    chunks, _ = ContinuousBatcher._plan_chunks(tiny_budget, decoding=True)  # type: ignore[arg-type]
    assert [count for _, count in chunks] == [8]  # below a block: progress rather than wait forever
    token_by_token = SimpleNamespace(prefill_chunk=40, block=1, _prefilling=[cut, cut_later])  # the C++ kernel's
    chunks, _ = ContinuousBatcher._plan_chunks(token_by_token, decoding=True)  # type: ignore[arg-type]
    assert chunks == [(cut, 40)]  # the whole budget: no block to keep whole
