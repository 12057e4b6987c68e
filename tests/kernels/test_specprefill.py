"""SpecPrefill: speculator view, look-ahead attention importance, chunk selection, gapped prefill."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from veriloop.kernels.specprefill import (
    CausalLM,
    causal_mask,
    continuation_nll,
    generate,
    layer_speculator,
    prefill,
    select_chunks,
    token_importance,
)
from veriloop.testing import tiny_causal_lm


@pytest.fixture(scope="module")
def tiny() -> Any:
    model, _ = tiny_causal_lm(seed=3, layers=3, hidden=32, context=512)
    return model


def _prompt(length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 259, (length,), generator=torch.Generator().manual_seed(seed))


def test_full_prefill_decoding_matches_transformers_greedy(tiny: Any) -> None:
    ids = _prompt(60)
    expected = tiny.generate(ids[None], max_new_tokens=12, do_sample=False)[0, 60:].tolist()
    got = generate(tiny, ids, 12, eos_token_ids=[2]).tokens
    assert got == expected[: len(got)] and len(got) == len(expected)


def test_speculator_is_a_view_that_leaves_the_model_alone(tiny: Any) -> None:
    ids = _prompt(20)
    short = layer_speculator(tiny, 2)
    assert len(tiny.model.layers) == 3 and tiny.config.num_hidden_layers == 3
    assert len(short.model.layers) == 2 and short.model.layers[0] is tiny.model.layers[0]
    full_view = layer_speculator(tiny, 3)
    with torch.no_grad():
        assert torch.allclose(full_view(input_ids=ids[None]).logits, tiny(input_ids=ids[None]).logits, atol=1e-5)
    with pytest.raises(ValueError, match="speculator_layers"):
        layer_speculator(tiny, 4)


def test_importance_equals_look_ahead_attention_from_transformers() -> None:
    """Max over layers×heads of the look-ahead queries' attention over the prompt, renormalised
    to prompt keys, averaged over steps: checked against eager attention weights."""
    tiny, _ = tiny_causal_lm(seed=3, layers=3, hidden=32, context=512)
    tiny.set_attn_implementation("eager")
    ids = _prompt(40, seed=1)
    steps = 3
    importance = token_importance(tiny, ids, speculator_layers=2, look_ahead=steps, pool_kernel=1)
    short = layer_speculator(tiny, 2)
    look = short.generate(ids[None], max_new_tokens=steps, do_sample=False)[0, 40:]
    sequence = torch.cat([ids, look])
    with torch.no_grad():
        out = short(input_ids=sequence[None], output_attentions=True)
    rows = torch.stack(out.attentions)[:, 0, :, 40 : 40 + steps, :40]  # (layers, heads, steps, prompt)
    rows = rows / rows.sum(-1, keepdim=True)
    expected = rows.flatten(0, 1).amax(0).mean(0)
    assert importance.shape == (40,)
    assert torch.allclose(importance, expected, atol=1e-5)


def test_importance_pooling_smooths_but_keeps_mass(tiny: Any) -> None:
    ids = _prompt(64, seed=2)
    raw = token_importance(tiny, ids, speculator_layers=1, look_ahead=2, pool_kernel=1)
    pooled = token_importance(tiny, ids, speculator_layers=1, look_ahead=2, pool_kernel=5)
    assert pooled.shape == raw.shape and torch.all(pooled >= 0)
    assert pooled.std() < raw.std()


def test_select_chunks_keeps_the_best_chunks_and_the_last() -> None:
    importance = torch.zeros(100)
    importance[10:20] = 5.0  # chunk 1 (size 10)
    importance[40:50] = 3.0  # chunk 4
    importance[60:70] = 1.0  # chunk 6
    kept = select_chunks(importance, keep_ratio=0.3, chunk_size=10)
    assert kept.tolist() == [*range(10, 20), *range(40, 50), *range(90, 100)]
    everything = select_chunks(importance, keep_ratio=1.0, chunk_size=32)
    assert everything.tolist() == list(range(100))
    ragged = select_chunks(torch.arange(70.0), keep_ratio=0.1, chunk_size=32)
    assert ragged.tolist() == list(range(64, 70))  # the ragged last chunk is the best and the last
    with pytest.raises(ValueError, match="keep_ratio"):
        select_chunks(importance, keep_ratio=0.0)


def test_gapped_prefill_uses_original_positions(tiny: Any) -> None:
    ids = _prompt(96, seed=4)
    state = prefill(tiny, ids, keep_ratio=0.5, speculator_layers=2, look_ahead=2, chunk_size=16)
    kept = state.positions
    assert state.kept == kept.numel() == 48 and state.prompt_length == 96
    assert torch.all(kept[1:] > kept[:-1]) and kept[-1].item() == 95
    with torch.no_grad():
        expected = tiny(
            input_ids=ids[kept][None],
            position_ids=kept[None],
            attention_mask=causal_mask(kept, kept, torch.float32),
        ).logits[0, -1]
    assert torch.allclose(state.logits[-1], expected, atol=1e-5)
    with torch.no_grad():
        shifted = tiny(input_ids=ids[kept][None]).logits[0, -1]  # positions 0..47 instead
    assert not torch.allclose(state.logits[-1], shifted, atol=1e-3)


def test_continuation_nll_after_full_prefill_matches_one_forward(tiny: Any) -> None:
    ids, answer = _prompt(30, seed=5), _prompt(7, seed=6)
    state = prefill(tiny, ids)
    with torch.no_grad():
        logits = tiny(input_ids=torch.cat([ids, answer])[None]).logits[0, 29:-1]
    expected = torch.nn.functional.cross_entropy(logits, answer).item()
    assert math.isclose(continuation_nll(tiny, state, answer), expected, rel_tol=1e-5)


def test_specprefill_generation_continues_after_the_prompt(tiny: Any) -> None:
    ids = _prompt(128, seed=7)
    gen = generate(tiny, ids, 6, keep_ratio=0.25, speculator_layers=1, look_ahead=2, chunk_size=16)
    assert gen.kept == 32 and gen.prompt_length == 128 and len(gen.tokens) == 6
    assert 0 < gen.ttft_s <= gen.total_s


def test_causal_lm_wrapper_finds_the_cache_argument(tiny: Any) -> None:
    run = CausalLM(tiny)
    assert run.cache_arg in ("cache", "past_key_values")
    logits, cache = run(_prompt(5), torch.arange(5), last_only=True)
    assert logits.shape == (1, 259) and cache is not None
