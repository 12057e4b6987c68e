"""The packed forward's CPU linears (the row-adaptive output projection, fp16 weight copies): close to the
modules' products, never a stale weight."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from veriloop.errors import BackendError
from veriloop.llm.packed import (
    BrainDotLinear,
    BrainFloatLinear,
    HalfWeightLinear,
    PackedDecoder,
    RowAdaptiveLinear,
    RowSplitLinear,
    default_prefill_weights,
    product_kind,
    resolve_linear_weights,
)


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
        assert fast.weights == "float16" and fast.fused_linears == 7 * layers + 1
    assert exact.weights == "float32" and exact.fused_linears == 0
    with pytest.raises(BackendError):
        PackedDecoder(model, "int3")  # type: ignore[arg-type]


needs_bf16 = pytest.mark.skipif(not BrainFloatLinear.kernel_available(), reason="this CPU has no bf16 dot products")


@needs_bf16
def test_bf16_linears_fuse_their_products_row_by_row_and_follow_weight_updates() -> None:
    """bf16 copies: close to the float32 modules, each row's result the same at every row count, never stale."""
    torch.manual_seed(0)
    parts = [torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(64, 32, bias=True)]
    fused = BrainFloatLinear(parts)
    with torch.inference_mode():
        x = torch.randn(130, 64)
        whole = fused(x)
        for out, module in zip(whole, parts, strict=True):
            torch.testing.assert_close(out, module(x), atol=3e-2, rtol=2e-2)
        for rows in (1, 3, 8, 57):
            assert all(torch.equal(part, full[:rows]) for part, full in zip(fused(x[:rows]), whole, strict=True))
    with torch.no_grad():
        parts[0].weight.mul_(-3)  # an in-place update
        parts[1].bias.add_(5)
    with torch.inference_mode():
        for out, module in zip(fused(x[:4]), parts, strict=True):
            torch.testing.assert_close(out, module(x[:4]), atol=1e-1, rtol=2e-2)


@needs_bf16
def test_a_lone_bf16_row_gets_what_it_gets_among_others() -> None:
    """oneDNN's one-row kernel sums a long row in another order; a lone prompt token must not answer differently."""
    torch.manual_seed(2)
    fused = BrainFloatLinear([torch.nn.Linear(1536, 576, bias=False)])
    x = torch.randn(64, 1536)
    with torch.inference_mode():
        (whole,) = fused(x)
        for row in range(64):
            for rows in (1, 2, 3):
                if row + rows <= 64:
                    assert torch.equal(fused(x[row : row + rows])[0], whole[row : row + rows]), (row, rows)


@needs_bf16
def test_row_split_products_give_decoding_rows_fp16_and_prompt_rows_bf16() -> None:
    torch.manual_seed(1)
    parts = [torch.nn.Linear(48, 80), torch.nn.Linear(48, 16)]
    split = RowSplitLinear(parts, HalfWeightLinear, BrainFloatLinear)
    half, brain = HalfWeightLinear(parts), BrainFloatLinear(parts)
    x = torch.randn(20, 48)
    with torch.inference_mode():
        for decode in (0, 3, 20):
            for out, rows_half, rows_brain in zip(split(x, decode), half(x), brain(x), strict=True):
                assert torch.equal(out[:decode], rows_half[:decode])
                assert torch.equal(out[decode:], rows_brain[decode:])
    same = RowSplitLinear(parts, HalfWeightLinear, HalfWeightLinear)
    assert same.prefill is None
    with torch.inference_mode():
        assert all(torch.equal(a, b) for a, b in zip(same(x, 3), half(x), strict=True))


def test_prefill_weights_default_to_bf16_only_beside_low_precision_decoding(tiny: tuple[Any, Any]) -> None:
    assert default_prefill_weights("float32") == "float32"
    expected = "bfloat16" if BrainFloatLinear.kernel_available() else "float16"
    assert default_prefill_weights("float16") == expected
    model, _ = tiny
    with pytest.raises(BackendError, match="go together"):
        PackedDecoder(model, "float16", prefill_weights="float32")
    with pytest.raises(BackendError, match="prefill weights"):
        PackedDecoder(model, "float16", prefill_weights="int8")  # type: ignore[arg-type]
    if BrainFloatLinear.kernel_available():
        decoder = PackedDecoder(model, "float16", prefill_weights="bfloat16")
        assert decoder.weights == "float16" and decoder.prefill_weights == "bfloat16"
        assert PackedDecoder(model, "bfloat16").prefill_weights == "bfloat16"


needs_bf16_kernel = pytest.mark.skipif(
    not BrainDotLinear.kernel_available(), reason="no AVX512-BF16, or the C++ kernel does not build here"
)


@needs_bf16_kernel
def test_bf16_kernel_linears_match_onednn_to_rounding_row_by_row_and_follow_updates() -> None:
    """The decoding rows' bf16 kind: the product of the bf16-rounded inputs and weights in float32 (oneDNN's also
    rounds its output to bf16), each row's bits the same at every row count, never a stale weight."""
    torch.manual_seed(3)
    parts = [torch.nn.Linear(96, 130, bias=True), torch.nn.Linear(96, 7, bias=False)]
    dot, onednn = BrainDotLinear(parts), BrainFloatLinear(parts)
    x = torch.randn(9, 96)
    with torch.inference_mode():
        whole = dot(x)
        for out, module, rounded in zip(whole, parts, onednn(x), strict=True):
            exact = x.to(torch.bfloat16).double() @ module.weight.to(torch.bfloat16).double().t()
            exact = exact + module.bias.double() if module.bias is not None else exact
            torch.testing.assert_close(out, exact.float(), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out, rounded, atol=1e-2, rtol=1e-2)
        for rows in range(1, 9):
            assert all(torch.equal(part, full[:rows]) for part, full in zip(dot(x[:rows]), whole, strict=True))
    with torch.no_grad():
        parts[0].weight.mul_(-2)
        parts[1].weight.add_(1)
    with torch.inference_mode():
        for out, module in zip(dot(x), parts, strict=True):
            torch.testing.assert_close(out, module(x), atol=1e-1, rtol=2e-2)


def test_auto_weights_are_bf16_where_the_kernel_builds_else_fp16(tiny: tuple[Any, Any]) -> None:
    expected = "bfloat16" if BrainDotLinear.kernel_available() else "float16"
    assert resolve_linear_weights("auto") == expected
    assert [resolve_linear_weights(kind) for kind in ("float32", "float16", "bfloat16")] == [
        "float32",
        "float16",
        "bfloat16",
    ]
    with pytest.raises(BackendError, match="auto, float32"):
        resolve_linear_weights("int4")
    if not BrainDotLinear.kernel_available():
        return
    model, _ = tiny
    decoder = PackedDecoder(model, "bfloat16")
    qkv = decoder.linears[0].fused_parts()
    assert qkv is not None
    assert isinstance(qkv[0].decoding, BrainDotLinear) and qkv[0].prefill is None  # prompt rows: the same kernel
    beside_fp16 = PackedDecoder(model, "float16").linears[0].fused_parts()  # bf16 prompt rows by the kernel too
    assert beside_fp16 is not None and isinstance(beside_fp16[0].prefill, BrainDotLinear)
    assert decoder.fused_linears == 7 * model.config.num_hidden_layers + 1  # the output projection too
    hidden = torch.randn(5, model.config.hidden_size)
    with torch.inference_mode():
        logits = decoder.lm_head(hidden)
        torch.testing.assert_close(logits, model.lm_head(hidden), atol=5e-2, rtol=2e-2)
        assert torch.equal(decoder.lm_head(hidden[2:3]), logits[2:3])


def test_without_the_bf16_kernel_auto_is_fp16_and_bf16_rows_take_onednn(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU without AVX512-BF16, or no compiler: `auto` falls back to FBGEMM's fp16 weights, and bf16 asked for
    outright runs decoding rows through oneDNN with the output projection on fp16."""
    monkeypatch.setattr(BrainDotLinear, "kernel_available", staticmethod(lambda: False))
    assert resolve_linear_weights("auto") == "float16"
    assert product_kind("float16") is HalfWeightLinear and product_kind("float32") is None
    if not BrainFloatLinear.kernel_available():
        assert product_kind("bfloat16") is BrainFloatLinear  # asked for; `applies_to` then leaves the modules
        return
    model, _ = tiny
    decoder = PackedDecoder(model, "bfloat16")
    parts = decoder.linears[0].fused_parts()
    assert parts is not None and isinstance(parts[0].decoding, BrainFloatLinear) and parts[0].prefill is None
    hidden = torch.randn(3, model.config.hidden_size)
    with torch.inference_mode():
        torch.testing.assert_close(decoder.lm_head(hidden), model.lm_head(hidden), atol=2e-2, rtol=1e-2)
