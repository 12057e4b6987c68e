"""The inference kernels switched on from settings: quantized weights, a CommVQ cache, SpecPrefill in the batcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import veriloop.kernels.commvq as commvq_module
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.kernels.any4 import QuantLinear, dequant_matmul
from veriloop.llm import embedded
from veriloop.llm.batcher import ContinuousBatcher, SampleSpec, SpeculativePrefill
from veriloop.llm.commvq_cache import CommVQSlotCache
from veriloop.llm.embedded import EmbeddedBackend
from veriloop.records import SamplingParams
from veriloop.testing import tiny_causal_lm, tiny_model_folder


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random llama saved as a Hugging Face folder, so `settings.llm.model` can name it."""
    return tiny_model_folder(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def fast_commvq(monkeypatch: pytest.MonkeyPatch) -> None:
    """A coarse CommVQ fit keeps the test fast; the full fit's options are the same code path."""
    monkeypatch.setattr(embedded, "COMMVQ_FIT", {"key_stages": 2, "codebook_size": 4, "em_iters": 2, "value_bits": 2})
    monkeypatch.setattr(embedded, "COMMVQ_CALIBRATION_TOKENS", 128)


def settings_for(home: Path, folder: Path, **llm: Any) -> Settings:
    return load_settings(paths={"home": home}, llm={"model": str(folder), **llm})


def test_bad_kernel_settings_are_one_line_config_errors(tmp_path: Path) -> None:
    for field, value in (("quantization", "int8"), ("kv_cache", "paged"), ("prefill", "chunked")):
        with pytest.raises(ConfigError, match=f"llm.{field}") as caught:
            load_settings(paths={"home": tmp_path}, llm={field: value})
        assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="specprefill_keep"):
        load_settings(paths={"home": tmp_path}, llm={"specprefill_keep": 1.5})


async def test_any4_setting_quantizes_the_backend_model_and_it_still_generates(
    tmp_path: Path, tiny_folder: Path
) -> None:
    settings = settings_for(tmp_path, tiny_folder, quantization="any4", quantization_group_size=32)
    backend = EmbeddedBackend.from_settings(settings)
    try:
        quantized = [m for m in backend.model.modules() if isinstance(m, QuantLinear)]
        assert len(quantized) == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers; lm_head stays
        assert all(m.qweight.method == "any4" for m in quantized)
        assert isinstance(backend.model.lm_head, torch.nn.Linear)
        assert backend.kernels["quantization"].relative_mse < 0.05
        # on the CPU each layer keeps its dequantised weight; it computes what the dequantise-matmul computes
        layer = quantized[0]
        assert layer.dense is not None
        x = torch.randn(3, layer.in_features)
        torch.testing.assert_close(layer(x), dequant_matmul(x, layer.qweight, layer.bias, impl="torch"))
        [[completion]] = await backend.generate(["def add(a, b):"], SamplingParams(max_tokens=8, temperature=0.0))
        assert len(completion.token_ids) > 0 and completion.usage.completion_tokens == len(completion.token_ids)
    finally:
        await backend.aclose()


async def test_commvq_setting_makes_the_live_cache_hold_codes_and_caches_the_codebooks(
    tmp_path: Path, tiny_folder: Path, fast_commvq: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(tmp_path, tiny_folder, kv_cache="commvq")
    backend = EmbeddedBackend.from_settings(settings)
    try:
        assert all(isinstance(batcher.cache, CommVQSlotCache) for batcher in backend.batchers)
        assert all(not m._forward_hooks for m in backend.model.modules())  # the cache itself holds codes
        cached = list((settings.paths.cache_dir / "commvq").glob("*.pt"))
        assert len(cached) == 1 and not list(cached[0].parent.glob("*.partial"))
        [[completion]] = await backend.generate(["def add(a, b):"], SamplingParams(max_tokens=8, temperature=0.0))
        assert len(completion.token_ids) > 0
        fitted = backend.kernels["commvq"]
    finally:
        await backend.aclose()

    def no_fit(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the cached codebooks should have been loaded")

    monkeypatch.setattr(commvq_module, "fit_commvq", no_fit)
    again = EmbeddedBackend.from_settings(settings)
    try:
        loaded = again.kernels["commvq"]
        assert all(
            torch.equal(a.za, b.za) and torch.equal(a.zb, b.zb) for a, b in zip(fitted.keys, loaded.keys, strict=True)
        )
        assert torch.equal(fitted.value_scale, loaded.value_scale)
        for batcher in again.batchers:
            cache = batcher.cache
            assert isinstance(cache, CommVQSlotCache) and cache.commvq is loaded
        [[completion]] = await again.generate(["def add(a, b):"], SamplingParams(max_tokens=8, temperature=0.0))
        assert len(completion.token_ids) > 0
    finally:
        await again.aclose()


def test_the_full_cache_setting_leaves_the_model_alone(tmp_path: Path, tiny_folder: Path) -> None:
    backend = EmbeddedBackend.from_settings(settings_for(tmp_path, tiny_folder))
    try:
        assert backend.kernels == {} and all(batcher.speculative is None for batcher in backend.batchers)
        assert not any(isinstance(m, QuantLinear) for m in backend.model.modules())
        assert all(not m._forward_hooks for m in backend.model.modules())
    finally:
        backend.close()


def test_specprefill_setting_reaches_the_batcher(tmp_path: Path, tiny_folder: Path) -> None:
    backend = EmbeddedBackend.from_settings(
        settings_for(tmp_path, tiny_folder, prefill="specprefill", specprefill_keep=0.5)
    )
    try:
        speculative = backend.batchers[0].speculative
        assert all(batcher.speculative is speculative for batcher in backend.batchers)
        assert speculative is not None and speculative.keep_ratio == 0.5
        assert speculative.min_tokens == embedded.SPECPREFILL_MIN_TOKENS
    finally:
        backend.close()


def test_batcher_prefills_long_prompts_speculatively_and_matches_the_kernel() -> None:
    """A long prompt's SpecPrefill row decodes what `specprefill.generate` decodes; short prompts prefill in full."""
    from veriloop.kernels.specprefill import generate

    torch.set_num_threads(1)
    model, tokenizer = tiny_causal_lm(seed=0)
    spec = SpeculativePrefill(keep_ratio=0.5, min_tokens=100, speculator_layers=1, chunk_size=16, look_ahead=4)
    batcher = ContinuousBatcher(model, tokenizer, max_batch_size=4, speculative=spec, eos_token_ids=[])
    try:
        long_prompt = list(torch.randint(3, 259, (160,), generator=torch.Generator().manual_seed(1)).tolist())
        short_prompt = long_prompt[:40]
        long_future, short_future = (
            batcher.submit(long_prompt, [SampleSpec(max_tokens=6)])[0],
            batcher.submit(short_prompt, [SampleSpec(max_tokens=6)])[0],
        )
        long_out, short_out = long_future.result(timeout=60), short_future.result(timeout=60)
        assert batcher.speculative_prefills == 1
        assert long_out.prompt_tokens == 160 and len(long_out.token_ids) == 6
        expected = generate(
            model, torch.tensor(long_prompt), 6, keep_ratio=0.5, speculator_layers=1, chunk_size=16, look_ahead=4
        )
        assert long_out.token_ids == expected.tokens and expected.kept < 160
        full = generate(model, torch.tensor(short_prompt), 6)
        assert short_out.token_ids == full.tokens
    finally:
        batcher.close()


@pytest.mark.slow
@pytest.mark.model
async def test_the_real_model_with_nf4_weights_and_specprefill_answers_a_long_prompt(
    model_home: Path, model_folder: Path
) -> None:
    """SmolLM2 built from settings: quantized layers, and a many-shot prompt prefilled by SpecPrefill."""
    settings = load_settings(
        paths={"home": model_home}, llm={"quantization": "nf4", "prefill": "specprefill", "torch_threads": 1}
    )
    backend = EmbeddedBackend.from_settings(settings)
    try:
        assert sum(isinstance(m, QuantLinear) for m in backend.model.modules()) == 30 * 7
        shots = "".join(f"def add_{i}(a, b):\n    return a + b + {i}\n\n" for i in range(60))
        prompt = shots + "def add_60(a, b):\n"
        assert len(backend.encode(prompt)) >= embedded.SPECPREFILL_MIN_TOKENS
        [[completion]] = await backend.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0))
        assert backend.batcher.speculative_prefills == 1
        assert completion.usage.prompt_tokens == len(backend.encode(prompt))
        # greedy SmolLM2 at keep 0.3 continues the pattern (it writes the next `def add_61`), the prompt's gist kept
        assert "add_6" in completion.text or "return" in completion.text
    finally:
        await backend.aclose()
