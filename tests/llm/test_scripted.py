"""The scripted decode step (`veriloop.llm.scripted`): the Python loop's results bit for bit, never a stale
weight, safe from two threads, and a clean fall-back (tiny random llama; the real model's step is
compared in test_embedded_model.py)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import torch

from veriloop.errors import BackendError
from veriloop.kernels import cpu_attention
from veriloop.llm.batcher import ContinuousBatcher, SampleSpec
from veriloop.llm.kv_cache import QUERY_BLOCK, Chunk, SlotKVCache, StepLayout, lengths_mask
from veriloop.llm.packed import BrainFloatLinear, HalfWeightLinear, PackedDecoder
from veriloop.llm.scripted import ScriptedLayers
from veriloop.testing import tiny_causal_lm

pytestmark = pytest.mark.skipif(
    not HalfWeightLinear.applies_to([torch.nn.Linear(2, 2)]), reason="FBGEMM's fp16 products are not in this torch"
)


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_causal_lm(seed=3)[0]


def _cache(decoder: PackedDecoder, slots: int = 4, columns: int = 40) -> SlotKVCache:
    cache = SlotKVCache(
        len(decoder.layers), slots, decoder.kv_heads, decoder.head_dim,
        dtype=decoder.kv_dtype, device=decoder.device, max_columns=columns,
    )  # fmt: skip
    cache.ensure(columns)
    generator = torch.Generator().manual_seed(7)
    for buffer in cache.keys + cache.values:
        buffer.copy_(torch.randn(buffer.shape, generator=generator))
    return cache


def _layout(slots: list[int], lengths: list[int], used: int) -> StepLayout:
    """A decode-only step: row i sits in slot slots[i], holding lengths[i] columns before this step."""
    per_slot = [1] * used
    for slot, length in zip(slots, lengths, strict=True):
        per_slot[slot] = length + 1
    decode_lengths = torch.tensor(per_slot)
    longest = max(per_slot)
    return StepLayout(
        slots=torch.tensor(slots),
        columns=torch.tensor(lengths),
        positions=torch.tensor(lengths),
        decode=len(slots),
        decode_slots=torch.tensor(slots),
        decode_lengths=decode_lengths,
        slots_used=used,
        chunks=(),
        longest=longest,
        in_order=slots == list(range(used)),
        mask=lengths_mask(decode_lengths, longest),
    )


def _steps(decoder: PackedDecoder, cache: SlotKVCache, slots: list[int], lengths: list[int], used: int) -> list[Any]:
    """Five consecutive decode steps (past TorchScript's profiling runs); the logits of each."""
    out = []
    ids = torch.tensor([(5 * slot + 11) % 250 for slot in slots])
    with torch.inference_mode():
        for step in range(5):
            layout = _layout(slots, [length + step for length in lengths], used)
            logits = decoder.forward(ids, layout, cache, torch.arange(len(slots)))
            out.append(logits)
            ids = logits.argmax(-1)
    return out


LAYOUTS = [
    ([0], [9], 1),  # one row
    ([0, 1, 2], [3, 17, 8], 3),  # rows in slot order, different lengths
    ([2, 0], [12, 5], 3),  # rows out of slot order, a free slot between them
]


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize(("slots", "lengths", "used"), LAYOUTS)
def test_scripted_steps_equal_the_python_loop_bit_for_bit(
    model: Any, slots: list[int], lengths: list[int], used: int, kernel: bool
) -> None:
    scripted = PackedDecoder(model, "float16", attention_kernel=kernel)
    plain = PackedDecoder(model, "float16", script=False, attention_kernel=kernel)
    assert scripted.scripted is not None and plain.scripted is None
    assert scripted.attention_kernel == plain.attention_kernel == (kernel and cpu_attention.load())
    fast_cache, slow_cache = _cache(scripted), _cache(plain)
    fast, slow = _steps(scripted, fast_cache, slots, lengths, used), _steps(plain, slow_cache, slots, lengths, used)
    assert scripted.scripted_steps == 5 and plain.scripted_steps == 0
    assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))
    for a, b in zip(fast_cache.keys + fast_cache.values, slow_cache.keys + slow_cache.values, strict=True):
        assert torch.equal(a, b)  # the same cache writes, and nothing written outside the rows' columns


def test_scripted_layers_follow_weight_updates(model: Any) -> None:
    """An in-place update of a projection or a norm, or a replaced norm weight, reaches the next step."""
    model = tiny_causal_lm(seed=4)[0]
    scripted, plain = PackedDecoder(model, "float16"), PackedDecoder(model, "float16", script=False)
    assert scripted.scripted is not None
    before = _steps(scripted, _cache(scripted), [0, 1], [4, 6], 2)
    layer = model.model.layers[1]
    with torch.no_grad():
        layer.self_attn.k_proj.weight.mul_(1.5)
        layer.mlp.down_proj.weight.add_(0.25)
        model.model.layers[0].input_layernorm.weight.mul_(0.5)
        layer.post_attention_layernorm.weight = torch.nn.Parameter(layer.post_attention_layernorm.weight * 2)
    after = _steps(scripted, _cache(scripted), [0, 1], [4, 6], 2)
    expected = _steps(plain, _cache(plain), [0, 1], [4, 6], 2)
    assert not torch.equal(before[0], after[0])
    assert all(torch.equal(a, b) for a, b in zip(after, expected, strict=True))
    assert scripted.scripted.builds == 2  # rebuilt once for the update, not once per step


def test_two_threads_step_through_one_scripted_stack(model: Any) -> None:
    """Replicas share one decoder: concurrent steps on their own caches answer as they do one at a time."""
    decoder = PackedDecoder(model, "float16")
    expected = [_steps(decoder, _cache(decoder), [0, 1, 2], [3 + k, 9, 1], 3) for k in range(2)]
    results: dict[int, list[Any]] = {}

    def run(k: int) -> None:
        torch.set_num_threads(1)
        for _ in range(4):
            results[k] = _steps(decoder, _cache(decoder), [0, 1, 2], [3 + k, 9, 1], 3)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(2):
        assert all(torch.equal(a, b) for a, b in zip(results[k], expected[k], strict=True))


def test_scripted_only_where_it_runs_the_same_operations(model: Any) -> None:
    assert PackedDecoder(model, "float32").scripted is None  # float32: the modules' own products
    assert PackedDecoder(model, "float16", script=False).scripted is None
    swished = tiny_causal_lm(seed=3)[0]
    for layer in swished.model.layers:
        layer.mlp.act_fn = torch.nn.GELU()
    assert not ScriptedLayers.applies_to(PackedDecoder(swished, "float16", script=False))
    assert PackedDecoder(swished, "float16").scripted is None


def _mixed_layout(rows: list[tuple[int, int]], chunks: list[tuple[int, int, int]]) -> StepLayout:
    """Decoding rows (slot, length) then prefill chunks (slot, start, count), as the batcher lays a step out."""
    slots = [slot for slot, _ in rows]
    columns = [length for _, length in rows]
    laid = []
    for slot, start, count in chunks:
        laid.append(Chunk(slot=slot, start=start, count=count, offset=len(slots)))
        slots += [slot] * count
        columns += list(range(start, start + count))
    used = max((slot for slot, _ in rows), default=-1) + 1
    per_slot = [1] * used
    for slot, length in rows:
        per_slot[slot] = length + 1
    decode_lengths = torch.tensor(per_slot, dtype=torch.long)
    longest = max(per_slot, default=0)
    return StepLayout(
        slots=torch.tensor(slots),
        columns=torch.tensor(columns),
        positions=torch.tensor(columns),
        decode=len(rows),
        decode_slots=torch.tensor([slot for slot, _ in rows], dtype=torch.long),
        decode_lengths=decode_lengths,
        slots_used=used,
        chunks=tuple(laid),
        longest=longest,
        in_order=[slot for slot, _ in rows] == list(range(used)),
        mask=lengths_mask(decode_lengths, longest) if rows else None,
    )


MIXED = [
    ([], [(0, 0, 9)]),  # a prompt's first chunk, nothing decoding
    ([(0, 12), (2, 5)], [(1, 0, 7)]),  # two rows decode while a prompt fills the slot between them
    ([(1, 20)], [(0, 7, 5), (3, 0, 4)]),  # a prompt's second chunk and another prompt's first
]


FBGEMM_AVX512 = torch.backends.cpu.get_cpu_capability() == "AVX512"
"""Whether FBGEMM's fp16 products run its AVX-512 kernels, which give each row the same bits at every row count."""

PREFILL = [
    "float16",
    pytest.param(
        "bfloat16",
        marks=pytest.mark.skipif(not BrainFloatLinear.kernel_available(), reason="this CPU has no bf16 dot products"),
    ),
]


@pytest.mark.parametrize("prefill", PREFILL)
@pytest.mark.parametrize(("rows", "chunks"), MIXED)
def test_scripted_prefill_steps_equal_the_python_loop_bit_for_bit(
    model: Any, rows: list[tuple[int, int]], chunks: list[tuple[int, int, int]], prefill: Any
) -> None:
    scripted = PackedDecoder(model, "float16", prefill_weights=prefill)
    plain = PackedDecoder(model, "float16", script=False, prefill_weights=prefill)
    fast_cache, slow_cache = _cache(scripted), _cache(plain)
    layout = _mixed_layout(rows, chunks)
    tokens = int(layout.slots.shape[0])
    ids = torch.tensor([(7 * index + 3) % 250 for index in range(tokens)])
    every = torch.arange(tokens)
    with torch.inference_mode():
        fast = [scripted.forward(ids, layout, fast_cache, every) for _ in range(3)]
        slow = [plain.forward(ids, layout, slow_cache, every) for _ in range(3)]
    assert scripted.scripted_steps == 3
    assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))
    for a, b in zip(fast_cache.keys + fast_cache.values, slow_cache.keys + slow_cache.values, strict=True):
        assert torch.equal(a, b)


@pytest.mark.skipif(not BrainFloatLinear.kernel_available(), reason="this CPU has no bf16 dot products")
@pytest.mark.parametrize("script", [True, False])
def test_decoding_rows_answer_the_same_beside_a_bf16_prompt(model: Any, script: bool) -> None:
    """Prompt rows multiply in bf16 and decoding rows in fp16: a decoding row's logits and cache writes do not
    depend on whether a prompt is read in its step, and the prompt's do differ from an all-fp16 step."""
    split = PackedDecoder(model, "float16", script=script, prefill_weights="bfloat16")
    half = PackedDecoder(model, "float16", script=script, prefill_weights="float16")
    alone, beside, all_half = (_mixed_layout([(0, 12), (2, 5)], chunks) for chunks in ([], [(1, 0, 7)], [(1, 0, 7)]))
    outputs = []
    for decoder, layout in ((split, alone), (split, beside), (half, all_half)):
        cache = _cache(decoder)
        tokens = int(layout.slots.shape[0])
        ids = torch.tensor([(7 * index + 3) % 250 for index in range(tokens)])
        with torch.inference_mode():
            logits = decoder.forward(ids, layout, cache, torch.arange(tokens))
        outputs.append((logits, cache))
    (alone_logits, alone_cache), (beside_logits, beside_cache), (half_logits, _) = outputs
    assert torch.equal(alone_logits, beside_logits[:2]) and torch.equal(beside_logits[:2], half_logits[:2])
    for layer in range(len(split.layers)):
        for slot in (0, 2):
            assert torch.equal(alone_cache.keys[layer][slot], beside_cache.keys[layer][slot])
            assert torch.equal(alone_cache.values[layer][slot], beside_cache.values[layer][slot])
    assert not torch.equal(beside_logits[2:], half_logits[2:])  # the prompt's rows did go through bf16
    reference = _mixed_layout([(0, 12), (2, 5)], [(1, 0, 7)])
    exact = PackedDecoder(model, "float32")
    with torch.inference_mode():
        float32_logits = exact.forward(torch.tensor([(7 * i + 3) % 250 for i in range(9)]), reference, _cache(exact),
                                       torch.arange(9))  # fmt: skip
    bf16_error = (beside_logits[2:] - float32_logits[2:]).abs().max()
    fp16_error = (half_logits[2:] - float32_logits[2:]).abs().max()
    assert bf16_error < 0.25 and fp16_error < bf16_error  # bf16 rounds inputs and weights to 8 bits, fp16 to 11


@pytest.mark.parametrize("prefill", PREFILL)
@pytest.mark.parametrize("script", [True, False])
def test_a_prompt_prefills_the_same_in_any_block_aligned_chunks(model: Any, prefill: Any, script: bool) -> None:
    """One chunk, or chunks ending on attention blocks (a reused prefix, a step's budget): the same cache and logits.
    Through the C++ kernel, which attends token by token, chunks that end anywhere too.

    The attention gives each token the same bits in any chunking on every CPU (PyTorch's over whole blocks, the
    kernel over each token's own columns in a fixed order). The products give a prompt row the same bits at every
    row count only where their kernels do: bf16 prompt rows (`BrainDotLinear`, per row by construction) and
    FBGEMM's fp16 products on AVX-512. FBGEMM's AVX2 fp16 kernels round a block of one or two rows differently
    from a wider block, so a chunk's last rows differ in the last bits there: to fp16 rounding only."""
    decoder = PackedDecoder(model, "float16", script=script, prefill_weights=prefill)
    ids = torch.tensor([(11 * index + 5) % 250 for index in range(45)])
    results = []
    splits = [[45], [QUERY_BLOCK, 45], [2 * QUERY_BLOCK, 45], [QUERY_BLOCK, 2 * QUERY_BLOCK, 45]]
    if decoder.attention_kernel:
        splits += [[7, 45], [5, 23, 44, 45], [1, 2, 45]]
    for cuts in splits:
        cache = _cache(decoder, slots=2, columns=48)
        start = 0
        with torch.inference_mode():
            for end in cuts:
                layout = _mixed_layout([], [(1, start, end - start)])
                logits = decoder.forward(ids[start:end], layout, cache, torch.tensor([end - start - 1]))
                start = end
        results.append((logits, [buffer[1, :, :45].clone() for buffer in cache.keys + cache.values]))
    exact = prefill == "bfloat16" or FBGEMM_AVX512
    for logits, buffers in results[1:]:
        if exact:
            assert torch.equal(logits, results[0][0])
            assert all(torch.equal(a, b) for a, b in zip(buffers, results[0][1], strict=True))
        torch.testing.assert_close(logits, results[0][0], atol=1e-4, rtol=1e-4)
        for a, b in zip(buffers, results[0][1], strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.skipif(not cpu_attention.load(), reason="no working C++ compiler for torch extensions here")
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_the_attention_kernel_decodes_as_pytorchs_attention(model: Any, kv_dtype: Any) -> None:
    """The C++ decode attention against PyTorch's, through whole steps (rows out of slot order, a prompt beside),
    over a float32 cache and over a float16 one (which PyTorch's kernel reads widened)."""
    fast = PackedDecoder(model, "float16", kv_dtype=kv_dtype)
    sdpa = PackedDecoder(model, "float16", attention_kernel=False, kv_dtype=kv_dtype)
    assert fast.attention_kernel and not sdpa.attention_kernel
    assert fast.kv_dtype == sdpa.kv_dtype == getattr(torch, kv_dtype)
    for slots, lengths, used in LAYOUTS:
        kernel_steps = _steps(fast, _cache(fast), slots, lengths, used)
        for a, b in zip(kernel_steps, _steps(sdpa, _cache(sdpa), slots, lengths, used), strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    layout = _mixed_layout([(0, 12), (2, 5)], [(1, 0, 7)])
    ids = torch.tensor([(7 * index + 3) % 250 for index in range(9)])
    with torch.inference_mode():
        a = fast.forward(ids, layout, _cache(fast), torch.arange(9))
        b = sdpa.forward(ids, layout, _cache(sdpa), torch.arange(9))
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_cache_is_float16_only_beside_low_precision_weights_and_the_kernel(model: Any) -> None:
    kernel = cpu_attention.load()
    for weights in ("float16", "bfloat16"):
        assert PackedDecoder(model, weights).kv_dtype == (torch.float16 if kernel else torch.float32)
        assert PackedDecoder(model, weights, attention_kernel=False).kv_dtype == torch.float32
        assert PackedDecoder(model, weights, kv_dtype="float32").kv_dtype == torch.float32
    assert PackedDecoder(model, "float32").kv_dtype == torch.float32  # the exact path stays exact
    assert PackedDecoder(model, "float32", kv_dtype="float16").kv_dtype == torch.float16  # asked for: honoured
    with pytest.raises(BackendError, match="kv dtype 'bfloat16'"):
        PackedDecoder(model, "float16", kv_dtype="bfloat16")  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", [True, False])
def test_a_float16_cache_answers_the_same_at_every_concurrency(kernel: bool) -> None:
    """Greedy answers over a float16 cache, through the kernel or PyTorch's attention, alone and four at a time."""
    model, tokenizer = tiny_causal_lm(seed=6)
    prompts = ["def add(a, b):", "hello", "x" * 30, "The quick brown fox", "abc", "import os"]
    answers = []
    for slots in (1, 4):
        decoder = PackedDecoder(model, "float16", attention_kernel=kernel, kv_dtype="float16")
        batcher = ContinuousBatcher(model, tokenizer, max_batch_size=slots, decoder=decoder)
        try:
            futures = [
                batcher.submit(tokenizer(prompt)["input_ids"], [SampleSpec(max_tokens=10 + 4 * index)])[0]
                for index, prompt in enumerate(prompts)
            ]
            answers.append([future.result(timeout=60).token_ids for future in futures])
            cache = batcher.cache
            assert isinstance(cache, SlotKVCache) and cache.keys[0].dtype == torch.float16
        finally:
            batcher.close()
    assert answers[0] == answers[1]


def test_another_cache_takes_the_python_loop(model: Any) -> None:
    decoder = PackedDecoder(model, "float16")

    class OtherCache(SlotKVCache):
        """Any store but the plain slot cache (CommVQ's, say) is read through its own methods."""

    cache = OtherCache(
        len(decoder.layers), 2, decoder.kv_heads, decoder.head_dim,
        dtype=decoder.dtype, device=decoder.device, max_columns=16,
    )  # fmt: skip
    cache.ensure(16)
    with torch.inference_mode():
        decoder.forward(torch.tensor([5]), _layout([0], [3], 1), cache, torch.arange(1))
    assert decoder.scripted_steps == 0


def test_scripting_failure_keeps_the_python_loop(
    model: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("Can't get source for _Stack")

    monkeypatch.setattr(torch.jit, "script", refuse)
    with caplog.at_level(logging.WARNING, logger="veriloop.llm.scripted"):
        decoder = PackedDecoder(model, "float16")
    assert decoder.scripted is None and "TorchScript could not script" in caplog.text
    assert len(_steps(decoder, _cache(decoder), [0], [2], 1)) == 5


def test_batcher_answers_the_same_with_and_without_the_script() -> None:
    model, tokenizer = tiny_causal_lm(seed=5)
    prompts = ["def add(a, b):", "hello", "x" * 30, "The quick brown fox", "abc"]
    answers = []
    for script in (True, False):
        decoder = PackedDecoder(model, "float16", script=script)
        batcher = ContinuousBatcher(model, tokenizer, max_batch_size=4, decoder=decoder)
        try:
            futures = [
                batcher.submit(tokenizer(prompt)["input_ids"], [SampleSpec(max_tokens=12 + 3 * index)])[0]
                for index, prompt in enumerate(prompts)
            ]
            answers.append([future.result(timeout=60).token_ids for future in futures])
        finally:
            batcher.close()
        assert (decoder.scripted_steps > 0) == script
    assert answers[0] == answers[1]
