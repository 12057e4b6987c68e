"""Fused linear + label-smoothed cross-entropy against the naive full-logits computation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from veriloop.kernels._triton import triton_installed
from veriloop.kernels.fused_ce import LinearCrossEntropyLoss, linear_cross_entropy, naive_linear_cross_entropy

requires_triton = pytest.mark.skipif(not triton_installed(), reason="the `triton` package (gpu extra) is not installed")
TOL = 1e-5
RTOL = 1e-6  # a summed loss of ~200 carries a few fp32 ulps (1.5e-5 each) of rounding


def _inputs(
    n: int, h: int, v: int, device: str, ignored: float = 0.2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=gen).to(device)
    weight = (torch.randn(v, h, generator=gen) / h**0.5).to(device)
    labels = torch.randint(0, v, (n,), generator=gen)
    labels[torch.rand(n, generator=gen) < ignored] = -100
    return hidden, weight, labels.to(device)


def _loss_and_grads(
    fn: Callable[..., torch.Tensor], hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    loss = fn(h, w, labels, **kwargs)
    upstream = torch.linspace(0.5, 1.5, loss.numel(), device=loss.device).reshape(loss.shape)
    (loss * upstream).sum().backward()
    return loss.detach(), h.grad, w.grad


def _assert_matches(
    impl: str,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None = None,
    **kwargs: Any,
) -> None:
    ref = _loss_and_grads(naive_linear_cross_entropy, hidden, weight, labels, **kwargs)
    got = _loss_and_grads(linear_cross_entropy, hidden, weight, labels, impl=impl, chunk_size=chunk_size, **kwargs)
    for name, a, b in zip(("loss", "grad_hidden", "grad_weight"), got, ref, strict=True):
        assert a is not None and b is not None
        excess = ((a - b).abs() - TOL - RTOL * b.abs()).max().item()
        assert excess <= 0, f"{name} differs by {(a - b).abs().max().item()}"


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_torch_matches_naive(smoothing: float, reduction: str) -> None:
    hidden, weight, labels = _inputs(n=53, h=24, v=301, device="cpu")
    _assert_matches("torch", hidden, weight, labels, label_smoothing=smoothing, reduction=reduction, chunk_size=8)


def test_chunked_torch_3d_inputs_and_module_form() -> None:
    hidden, weight, labels = _inputs(n=2 * 19, h=16, v=97, device="cpu")
    hidden3, labels3 = hidden.reshape(2, 19, 16), labels.reshape(2, 19)
    loss_fn = LinearCrossEntropyLoss(label_smoothing=0.1, impl="torch", chunk_size=5)
    got = loss_fn(hidden3, weight, labels3)
    ref = naive_linear_cross_entropy(hidden, weight, labels, label_smoothing=0.1)
    assert abs(got.item() - ref.item()) <= TOL
    per_token = linear_cross_entropy(hidden3, weight, labels3, reduction="none", impl="torch")
    assert per_token.shape == (2, 19)
    assert torch.all(per_token[labels3 == -100] == 0)


def test_frozen_weight_gets_no_gradient() -> None:
    hidden, weight, labels = _inputs(n=20, h=8, v=50, device="cpu")
    h = hidden.clone().requires_grad_(True)
    linear_cross_entropy(h, weight, labels, label_smoothing=0.1, impl="torch").backward()
    assert weight.grad is None
    ref_h = hidden.clone().requires_grad_(True)
    naive_linear_cross_entropy(ref_h, weight, labels, label_smoothing=0.1).backward()
    assert h.grad is not None and ref_h.grad is not None
    assert (h.grad - ref_h.grad).abs().max().item() <= TOL


def test_all_ignored_gives_zero_loss_and_gradients() -> None:
    hidden, weight, _ = _inputs(n=10, h=8, v=30, device="cpu")
    labels = torch.full((10,), -100)
    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    loss = linear_cross_entropy(h, w, labels, label_smoothing=0.1, impl="torch")
    loss.backward()
    assert loss.item() == 0.0
    assert h.grad is not None and w.grad is not None
    assert not h.grad.any() and not w.grad.any()


def test_bad_arguments_raise_value_errors() -> None:
    hidden, weight, labels = _inputs(n=4, h=8, v=30, device="cpu")
    with pytest.raises(ValueError, match="label_smoothing"):
        linear_cross_entropy(hidden, weight, labels, label_smoothing=1.5)
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(hidden, weight, labels, reduction="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="disagree"):
        linear_cross_entropy(hidden[:, :4], weight, labels)
    with pytest.raises(ValueError, match="labels"):
        linear_cross_entropy(hidden, weight, labels[:3])


def test_auto_uses_torch_on_cpu() -> None:
    hidden, weight, labels = _inputs(n=12, h=8, v=40, device="cpu")
    got = linear_cross_entropy(hidden, weight, labels, label_smoothing=0.1)
    ref = naive_linear_cross_entropy(hidden, weight, labels, label_smoothing=0.1)
    assert abs(got.item() - ref.item()) <= TOL


@requires_triton
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_triton_kernel_matches_naive(device: str, smoothing: float, reduction: str) -> None:
    hidden, weight, labels = _inputs(n=37, h=40, v=70, device=device)
    _assert_matches("triton", hidden, weight, labels, label_smoothing=smoothing, reduction=reduction)


@requires_triton
def test_triton_kernel_frozen_weight(device: str) -> None:
    hidden, weight, labels = _inputs(n=16, h=32, v=40, device=device)
    h = hidden.clone().requires_grad_(True)
    linear_cross_entropy(h, weight, labels, label_smoothing=0.1, impl="triton").backward()
    ref_h = hidden.clone().requires_grad_(True)
    naive_linear_cross_entropy(ref_h, weight, labels, label_smoothing=0.1).backward()
    assert h.grad is not None and ref_h.grad is not None
    assert (h.grad - ref_h.grad).abs().max().item() <= TOL
