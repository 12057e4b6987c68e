"""The CPU output projection's row-adaptive linear: same products as the module, never a stale weight."""

from __future__ import annotations

import pytest
import torch

from veriloop.llm.packed import RowAdaptiveLinear


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
