"""Fused linear + label-smoothed cross-entropy that never holds the full N×V logits.

For hidden states h (N×H), an output embedding W (V×H) and targets y, with logits z = hWᵀ and
lse = logsumexp(z), the label-smoothed loss (PyTorch's convention) per token is

    L = lse − (1−ε)·z_y − (ε/V)·Σ_j z_j,     ∂L/∂z_j = softmax(z)_j − (1−ε)·1[j=y] − ε/V.

The forward pass keeps three scalars per token (lse, z_y, Σz); the backward pass recomputes
each block of logits, forms ∂L/∂z in place and accumulates ∂h = (∂L/∂z)·W and ∂W = (∂L/∂z)ᵀ·h.
Two implementations share this `autograd.Function`: a token-chunked PyTorch one (CPU and
anywhere) and a Triton one that tiles tokens × vocabulary × hidden on chip (CUDA, or the CPU
interpreter in tests). Tokens whose label is `ignore_index` contribute nothing; the mean is
over the remaining tokens (0 when there are none, where PyTorch would give nan).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F

from veriloop.kernels._triton import resolve_impl

Reduction = Literal["mean", "sum", "none"]

#: Logits held at once by the PyTorch path: chunk_size × V elements (64 MiB in fp32).
DEFAULT_CHUNK_ELEMENTS = 1 << 24


def default_chunk_size(vocab_size: int) -> int:
    """Tokens per chunk so that one chunk of fp32 logits stays near 64 MiB."""
    return max(16, min(4096, DEFAULT_CHUNK_ELEMENTS // max(vocab_size, 1)))


def naive_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """The reference: materialise all logits in fp32 and call `F.cross_entropy`."""
    logits = (hidden.reshape(-1, hidden.shape[-1]) @ weight.t()).float()
    flat = labels.reshape(-1)
    if reduction == "mean":
        losses = F.cross_entropy(
            logits, flat, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="sum"
        )
        return losses / (flat != ignore_index).sum().clamp(min=1)
    out = F.cross_entropy(logits, flat, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction)
    return out if reduction == "sum" else out.reshape(labels.shape)


def _torch_stats(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token lse, z_y and Σ_j z_j, one chunk of logits at a time."""
    n = hidden.shape[0]
    lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
    z_y = torch.empty_like(lse)
    z_sum = torch.empty_like(lse)
    safe = labels.clamp(min=0)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        logits = (hidden[start:stop] @ weight.t()).float()
        lse[start:stop] = torch.logsumexp(logits, dim=-1)
        z_y[start:stop] = logits.gather(1, safe[start:stop, None]).squeeze(1)
        z_sum[start:stop] = logits.sum(dim=-1)
        del logits
    return lse, z_y, z_sum


def _torch_grads(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    lse: torch.Tensor,
    token_grad: torch.Tensor,
    label_smoothing: float,
    chunk_size: int,
    need_hidden: bool,
    need_weight: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Recompute each chunk's logits, turn them into ∂L/∂z in place, and accumulate ∂h and ∂W."""
    n = hidden.shape[0]
    vocab = weight.shape[0]
    grad_hidden = torch.empty_like(hidden) if need_hidden else None
    grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
    safe = labels.clamp(min=0)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        g = token_grad[start:stop]
        if g.device.type != "meta" and not bool(g.any()):  # whole chunk ignored (prompt tokens, padding)
            if grad_hidden is not None:
                grad_hidden[start:stop] = 0
            continue
        dz = (hidden[start:stop] @ weight.t()).float()
        dz.sub_(lse[start:stop, None]).exp_()
        dz.sub_(label_smoothing / vocab)
        dz.scatter_add_(
            1, safe[start:stop, None], torch.full((stop - start, 1), label_smoothing - 1.0, device=dz.device)
        )
        dz.mul_(g[:, None])
        if grad_hidden is not None:
            grad_hidden[start:stop] = (dz.to(weight.dtype) @ weight).to(hidden.dtype)
        if grad_weight is not None:
            grad_weight.addmm_(dz.t(), hidden[start:stop].float())
        del dz
    return grad_hidden, (grad_weight.to(weight.dtype) if grad_weight is not None else None)


class _LinearCrossEntropy(torch.autograd.Function):
    """Autograd glue shared by the PyTorch and Triton implementations."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        label_smoothing: float,
        ignore_index: int,
        reduction: str,
        impl: str,
        chunk_size: int,
    ) -> torch.Tensor:
        valid = labels != ignore_index
        safe_labels = torch.where(valid, labels, torch.zeros_like(labels))
        if impl == "triton":
            from veriloop.kernels import _fused_ce_triton

            lse, z_y, z_sum = _fused_ce_triton.forward_stats(hidden, weight, safe_labels)
        else:
            lse, z_y, z_sum = _torch_stats(hidden, weight, safe_labels, chunk_size)
        vocab = weight.shape[0]
        losses = lse - (1.0 - label_smoothing) * z_y - (label_smoothing / vocab) * z_sum
        losses = torch.where(valid, losses, torch.zeros_like(losses))
        count = valid.sum()
        ctx.save_for_backward(hidden, weight, safe_labels, valid, lse)
        ctx.settings = (label_smoothing, reduction, impl, chunk_size)
        if reduction == "none":
            return losses
        if reduction == "sum":
            return losses.sum()
        return losses.sum() / count.clamp(min=1)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, labels, valid, lse = ctx.saved_tensors
        label_smoothing, reduction, impl, chunk_size = ctx.settings
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if reduction == "none" or reduction == "sum":
            token_grad = grad_output.float() * valid
        else:
            token_grad = grad_output.float() * valid / valid.sum().clamp(min=1)
        token_grad = token_grad.to(torch.float32).contiguous()
        if impl == "triton":
            from veriloop.kernels import _fused_ce_triton

            grad_hidden, grad_weight = _fused_ce_triton.backward_grads(
                hidden, weight, labels, lse, token_grad, label_smoothing, need_hidden, need_weight
            )
        else:
            grad_hidden, grad_weight = _torch_grads(
                hidden, weight, labels, lse, token_grad, label_smoothing, chunk_size, need_hidden, need_weight
            )
        return grad_hidden, grad_weight, None, None, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    label_smoothing: float = 0.0,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
    impl: str = "auto",
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Cross-entropy of `hidden @ weight.T` against `labels` without materialising the logits.

    `hidden` is (..., H), `weight` the (V, H) output embedding (lm_head), `labels` (...) with
    `ignore_index` for tokens to skip. `impl`: `auto` (Triton on CUDA when installed, else
    PyTorch), `torch` or `triton`. `chunk_size` bounds the PyTorch path's logits to
    chunk_size × V. Returns a scalar, or per-token losses (shape of `labels`) for `none`.
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], not {label_smoothing}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be mean, sum or none, not {reduction!r}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden (..., {weight.shape[-1]}) and weight (V, H) disagree: {tuple(hidden.shape)}")
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(f"labels {tuple(labels.shape)} must match hidden's leading shape {tuple(hidden.shape[:-1])}")
    flat_hidden = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    flat_labels = labels.reshape(-1).to(torch.long).contiguous()
    chosen = resolve_impl(impl, flat_hidden)
    chunk = chunk_size or default_chunk_size(weight.shape[0])
    out: torch.Tensor = _LinearCrossEntropy.apply(  # type: ignore[no-untyped-call]
        flat_hidden, weight.contiguous(), flat_labels, float(label_smoothing), ignore_index, reduction, chosen, chunk
    )
    return out.reshape(labels.shape) if reduction == "none" else out


class LinearCrossEntropyLoss(torch.nn.Module):
    """Module form for trainers: `loss_fn(hidden, lm_head.weight, labels)`."""

    def __init__(
        self,
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        reduction: Reduction = "mean",
        impl: str = "auto",
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing
        self.ignore_index = ignore_index
        self.reduction: Reduction = reduction
        self.impl = impl
        self.chunk_size = chunk_size

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(
            hidden,
            weight,
            labels,
            label_smoothing=self.label_smoothing,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            impl=self.impl,
            chunk_size=self.chunk_size,
        )
