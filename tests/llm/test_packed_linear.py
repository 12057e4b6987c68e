"""The packed forward's CPU linears (the row-adaptive output projection, fp16 weight copies): close to the
modules' products, never a stale weight."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from veriloop.errors import BackendError
from veriloop.llm.packed import HalfWeightLinear, PackedDecoder, RowAdaptiveLinear


@pytest.mark.skipif(not RowAdaptiveLinear.applies_to(torch.nn.Linear(2, 2)), reason="oneDNN is not in this torch")
def test_packed_rows_equal_the_module_and_follow_weight_updates() -> None:
    torch.manual_seed(0)
    module = torch.nn.Linear(64, 1000, bias=True)
    linear = RowAdaptiveLinear(module)
    with torch.inference_mode():
        for rows in (1, 2, 8, 33):
            x = torch.randn(rows, 64)
            assert torch.allclose(linear(x), module(x), atol=1e-5), rows
        packed = linear.packed_weight()
    with torch.no_grad():
        module.weight.mul_(-2)  # an in-place update (a merged adapter, a training step)
    with torch.inference_mode():
        x = torch.randn(8, 64)
        assert torch.allclose(linear(x), module(x), atol=1e-5)
    assert linear.packed_weight() is not packed
    module.weight = torch.nn.Parameter(torch.randn(1000, 64))  # a new tensor altogether
    with torch.inference_mode():
        assert torch.allclose(linear(x), module(x), atol=1e-5)


def test_only_plain_float32_cpu_linears_are_packed() -> None:
    assert not RowAdaptiveLinear.applies_to(torch.nn.Linear(4, 4).to(torch.bfloat16))
    assert not RowAdaptiveLinear.applies_to(torch.nn.Embedding(4, 4))


@pytest.mark.skipif(not HalfWeightLinear.applies_to([torch.nn.Linear(2, 2)]), reason="FBGEMM is not in this torch")
def test_half_weight_linears_fuse_their_products_and_follow_weight_updates() -> None:
    torch.manual_seed(0)
    parts = [torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(64, 32, bias=True), torch.nn.Linear(64, 8)]
    fused = HalfWeightLinear(parts)
    with torch.inference_mode():
        for rows in (1, 8, 130):
            x = torch.randn(rows, 64)
            outputs = fused(x)
            assert [tuple(out.shape) for out in outputs] == [(rows, 96), (rows, 32), (rows, 8)]
            for out, module in zip(outputs, parts, strict=True):
                expected = module(x)
                assert torch.allclose(out, expected, atol=2e-3, rtol=2e-3), rows
    with torch.no_grad():
        parts[1].weight.mul_(-3)  # an in-place update
        parts[2].bias.add_(5)
    with torch.inference_mode():
        x = torch.randn(4, 64)
        for out, module in zip(fused(x), parts, strict=True):
            assert torch.allclose(out, module(x), atol=2e-3, rtol=2e-3)
    parts[0].weight = torch.nn.Parameter(torch.randn(96, 64))  # a new tensor altogether
    with torch.inference_mode():
        assert torch.allclose(fused(x)[0], parts[0](x), atol=2e-2, rtol=2e-3)


def test_only_float32_cpu_linears_with_one_input_size_get_half_weights() -> None:
    assert not HalfWeightLinear.applies_to([])
    assert not HalfWeightLinear.applies_to([torch.nn.Linear(4, 4).to(torch.bfloat16)])
    assert not HalfWeightLinear.applies_to([torch.nn.Linear(4, 4), torch.nn.Linear(5, 4)])
    assert not HalfWeightLinear.applies_to([torch.nn.Embedding(4, 4)])
    with pytest.raises(ValueError):
        HalfWeightLinear([])


def test_packed_decoder_half_weights_on_a_tiny_llama(tiny: tuple[Any, Any]) -> None:
    """float16 covers q/k/v, o, gate/up, down and lm_head of every layer; float32 leaves the modules alone."""
    model, _ = tiny
    layers = model.config.num_hidden_layers
    fast, exact = PackedDecoder(model, "float16"), PackedDecoder(model, "float32")
    if HalfWeightLinear.applies_to([model.lm_head]):
        assert fast.weights == "float16" and fast.half_linears == 7 * layers + 1
    assert exact.weights == "float32" and exact.half_linears == 0
    with pytest.raises(BackendError):
        PackedDecoder(model, "int3")  # type: ignore[arg-type]
