"""The AVX512-BF16 product (`veriloop.kernels.cpu_bf16`), built for real on this machine: a bf16 matrix product to
float rounding, each row the same bits alone or among others at every row count, bad input refused."""

from __future__ import annotations

import pytest
import torch

from veriloop.kernels import cpu_bf16

pytestmark = pytest.mark.skipif(not cpu_bf16.available(), reason="no AVX512-BF16 or no working C++ compiler here")


def _reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The same product in float64 over the bf16-rounded operands."""
    out = x.to(torch.bfloat16).double() @ weight.to(torch.bfloat16).double().t()
    return (out + bias.double() if bias is not None else out).float()


@pytest.mark.parametrize(
    ("rows", "out_features", "in_features", "with_bias"),
    [
        (1, 960, 576, False),  # the embedded model's fused q/k/v
        (4, 576, 1536, True),  # its down projection
        (7, 100, 33, True),  # outputs that are no multiple of a tile, an odd input count
        (13, 64, 2, False),  # more rows than one pass takes (6), a single input pair
        (3, 1, 1, True),
    ],
)
def test_it_is_the_bf16_product(rows: int, out_features: int, in_features: int, with_bias: bool) -> None:
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, in_features, generator=generator)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.05
    bias = torch.randn(out_features, generator=generator) if with_bias else None
    out = cpu_bf16.linear(x, cpu_bf16.pack(weight), bias, out_features)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    torch.testing.assert_close(out, _reference(x, weight, bias), atol=2e-5, rtol=1e-5)


def test_a_rows_result_does_not_depend_on_the_other_rows() -> None:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(14, 576, generator=generator)
    packed = cpu_bf16.pack(torch.randn(1000, 576, generator=generator))
    bias = torch.randn(1000, generator=generator)
    together = cpu_bf16.linear(x, packed, bias, 1000)
    for count in range(1, 15):  # every group size, and rows split across passes of six
        assert torch.equal(cpu_bf16.linear(x[:count], packed, bias, 1000), together[:count])
    for row in range(14):
        assert torch.equal(cpu_bf16.linear(x[row : row + 1], packed, bias, 1000), together[row : row + 1])
    assert torch.equal(cpu_bf16.linear(x.t().contiguous().t(), packed, bias, 1000), together)  # a strided x


def test_no_rows_and_special_values() -> None:
    packed = cpu_bf16.pack(torch.ones(16, 4))
    assert cpu_bf16.linear(torch.zeros(0, 4), packed, None, 16).shape == (0, 16)
    x = torch.tensor([[float("inf"), 1.0, 1.0, 1.0], [float("nan"), 0.0, 0.0, 0.0], [1e-40, 0.0, 0.0, 0.0]])
    out = cpu_bf16.linear(x, packed, None, 16)
    assert torch.isinf(out[0]).all() and torch.isnan(out[1]).all() and torch.isfinite(out[2]).all()


def test_bad_input_is_refused_not_read_out_of_bounds() -> None:
    packed = cpu_bf16.pack(torch.randn(100, 20))  # two tiles
    x = torch.randn(2, 20)
    with pytest.raises(RuntimeError, match="does not fit"):
        cpu_bf16.linear(x, packed, None, 129)
    with pytest.raises(RuntimeError, match="does not fit"):
        cpu_bf16.linear(x, packed, None, 64)  # a whole tile with no output
    with pytest.raises(RuntimeError, match="inputs"):
        cpu_bf16.linear(torch.randn(2, 22), packed, None, 100)
    with pytest.raises(RuntimeError, match="float32"):
        cpu_bf16.linear(x.double(), packed, None, 100)
    with pytest.raises(RuntimeError, match="float32"):
        cpu_bf16.linear(x[0], packed, None, 100)
    with pytest.raises(RuntimeError, match="bias"):
        cpu_bf16.linear(x, packed, torch.zeros(99), 100)
    with pytest.raises(RuntimeError, match="from pack"):
        cpu_bf16.linear(x, packed.float(), None, 100)
    with pytest.raises(RuntimeError, match="from pack"):
        cpu_bf16.linear(x, packed.transpose(0, 1), None, 100)
    with pytest.raises(ValueError, match="out, in"):
        cpu_bf16.pack(torch.randn(4))
