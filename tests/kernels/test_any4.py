"""any4 and its baselines: level tables, packing, k-means, the dequantise-matmul kernel, model swap."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from veriloop.kernels._triton import triton_installed
from veriloop.kernels.any4 import (
    FP4_LEVELS,
    METHODS,
    NF4_LEVELS,
    QuantLinear,
    calibration_moments,
    dequant_matmul,
    normal_float_levels,
    pack_codes,
    quantize_model_,
    quantize_weight,
    unpack_codes,
    weighted_kmeans_1d,
)
from veriloop.testing import tiny_causal_lm

requires_triton = pytest.mark.skipif(not triton_installed(), reason="the `triton` package (gpu extra) is not installed")


def _gaussian(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.02


def test_normal_float_levels_reproduce_nf4() -> None:
    assert torch.allclose(normal_float_levels(4), torch.tensor(NF4_LEVELS), atol=1e-6)
    assert normal_float_levels(3).shape == (8,) and normal_float_levels(2).tolist()[:2] == [-1.0, 0.0]
    assert sorted(FP4_LEVELS) == list(FP4_LEVELS) and max(FP4_LEVELS) == 1.0


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_pack_unpack_round_trip(bits: int) -> None:
    codes = torch.randint(0, 2**bits, (5, 37))
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.uint8
    assert packed.shape == (5, 10 if bits == 2 else 19)
    assert torch.equal(unpack_codes(packed, bits, 37), codes)


def test_int4_is_exact_on_its_own_grid() -> None:
    low = torch.tensor([-0.3, 0.1])[:, None]
    step = torch.tensor([0.01, 0.02])[:, None]
    weight = low + step * torch.randint(0, 16, (2, 64)).float()
    weight[:, 0], weight[:, 1] = low[:, 0], (low + 15 * step)[:, 0]
    q = quantize_weight(weight, "int4", group_size=64)
    assert torch.allclose(q.dequantize(), weight, atol=1e-6)


def test_storage_is_about_a_sixth_of_fp32_at_model_sizes() -> None:
    q = quantize_weight(_gaussian(576, 576), "any4", 128)
    assert q.nbytes() < 576 * 576 * 4 / 6


def test_weighted_kmeans_never_worse_than_its_start() -> None:
    values = torch.rand(4, 200) * 2 - 1
    weights = torch.rand(4, 200)
    init = torch.tensor(NF4_LEVELS)
    levels, codes = weighted_kmeans_1d(values, weights, init, iters=30)
    start = (weights * (values - init[torch.searchsorted((init[1:] + init[:-1]) / 2, values)]) ** 2).sum(1)
    end = (weights * (values - levels.gather(1, codes)) ** 2).sum(1)
    assert torch.all(end <= start + 1e-7)
    assert torch.all(levels[:, 1:] >= levels[:, :-1])


def test_reconstruction_error_ordering_on_gaussian_weights() -> None:
    weight = _gaussian(64, 512)
    error = {m: (quantize_weight(weight, m, 128).dequantize() - weight).pow(2).mean().item() for m in METHODS}
    assert error["any4"] <= error["nf4"] < error["int4"]
    assert error["nf4"] < error["fp4"]
    assert error["any4"] < error["any3"] < error["any2"]


def test_calibration_weights_shift_error_to_unimportant_channels() -> None:
    weight = _gaussian(32, 256, seed=1)
    moments = torch.ones(256)
    moments[:32] = 100.0
    plain = quantize_weight(weight, "any4", 128)
    weighted = quantize_weight(weight, "any4", 128, input_second_moment=moments)
    err_plain = (plain.dequantize() - weight)[:, :32].pow(2).sum()
    err_weighted = (weighted.dequantize() - weight)[:, :32].pow(2).sum()
    assert err_weighted < err_plain


def test_unknown_method_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown quantisation method"):
        quantize_weight(_gaussian(2, 8), "int8")  # type: ignore[arg-type]


@pytest.mark.parametrize("method", METHODS)
def test_quant_linear_torch_path_equals_linear_on_dequantised_weight(method: str) -> None:
    weight, bias = _gaussian(24, 72), torch.randn(24)
    q = quantize_weight(weight, method, group_size=32)  # type: ignore[arg-type]
    layer = QuantLinear(q, bias, impl="torch")
    x = torch.randn(3, 5, 72)
    assert torch.allclose(layer(x), x @ q.dequantize().t() + bias, atol=1e-6)


@requires_triton
@pytest.mark.parametrize("method", ["int4", "nf4", "any4", "any3", "any2"])
def test_triton_dequant_matmul_matches_reference(device: str, method: str) -> None:
    weight, bias = _gaussian(40, 72), torch.randn(40)
    q = quantize_weight(weight, method, group_size=32).to(device)  # type: ignore[arg-type]
    x = torch.randn(5, 72).to(device)
    got = dequant_matmul(x, q, bias.to(device), impl="triton")
    ref = dequant_matmul(x, q, bias.to(device), impl="torch")
    assert (got - ref).abs().max().item() < 1e-5


def _tiny_llama() -> nn.Module:
    model, _ = tiny_causal_lm(seed=0, layers=2, hidden=64)
    assert isinstance(model, nn.Module)
    return model


def test_quantize_model_swaps_linears_and_keeps_lm_head() -> None:
    model = _tiny_llama()
    ids = torch.randint(0, 259, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    moments = calibration_moments(model, ids)
    assert "model.layers.0.self_attn.q_proj" in moments and moments["model.layers.0.mlp.down_proj"].shape == (128,)
    report = quantize_model_(model, "any4", group_size=16, calibration=moments, impl="torch")
    assert report.layers == 14 and 0 < report.relative_mse < 0.05
    assert report.bytes_quantized < report.bytes_fp32  # tiny rows: the per-row tables weigh in
    assert isinstance(model.get_submodule("model.layers.1.mlp.up_proj"), QuantLinear)
    assert isinstance(model.get_submodule("lm_head"), nn.Linear)
    with torch.no_grad():
        after = model(input_ids=ids).logits
    assert after.shape == before.shape
    coarse = _tiny_llama()
    quantize_model_(coarse, "any2", group_size=16, calibration=moments, impl="torch")
    with torch.no_grad():
        coarse_logits = coarse(input_ids=ids).logits
    # the double's large random weights amplify errors; still 4 bits must stay far closer than 2
    assert (after - before).norm() < 0.6 * before.norm()
    assert (after - before).norm() < 0.5 * (coarse_logits - before).norm()


def test_quantize_model_runs_calibration_from_token_ids() -> None:
    model = _tiny_llama()
    report = quantize_model_(model, "any3", group_size=16, calibration=torch.randint(0, 259, (20,)), impl="torch")
    assert report.method == "any3" and report.layers == 14


@pytest.mark.slow
def test_kernel_modules_import_without_triton() -> None:
    """CPU installs must import the kernels package; Triton loads only when a kernel runs."""
    import subprocess
    import sys

    code = (
        "import sys, veriloop.kernels, veriloop.kernels.fused_ce, veriloop.kernels.any4, "
        "veriloop.kernels.commvq, veriloop.kernels.specprefill; assert 'triton' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
