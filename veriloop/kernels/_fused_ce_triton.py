# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""Triton kernels for the fused linear + label-smoothed cross-entropy (imported only on demand).

Forward: one program per block of tokens walks the vocabulary in blocks, computes each logits
tile as a sum of `tl.dot`s over hidden blocks, and folds it into a running max / sum-exp
(online softmax), the target logit and the logit sum. Only three floats per token leave the chip.

Backward: one program per (token block, vocabulary block) recomputes its logits tile, forms
g·(softmax − (1−ε)·onehot − ε/V) on chip and adds its share of ∂h and ∂W with atomic adds,
as Cut Cross-Entropy does; the full logits never exist in memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from veriloop.kernels._triton import interpreting


@triton.jit
def _forward_kernel(
    h_ptr,
    w_ptr,
    labels_ptr,
    lse_ptr,
    zy_ptr,
    zsum_ptr,
    n_tokens,
    vocab,
    hidden,
    stride_hn,
    stride_wv,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_tokens
    labels = tl.load(labels_ptr + rows, mask=row_ok, other=0)
    running_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_N], tl.float32)
    z_sum = tl.zeros([BLOCK_N], tl.float32)
    z_y = tl.zeros([BLOCK_N], tl.float32)
    for v_start in range(0, vocab, BLOCK_V):
        cols = v_start + tl.arange(0, BLOCK_V)
        col_ok = cols < vocab
        logits = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
        for k_start in range(0, hidden, BLOCK_H):
            ks = k_start + tl.arange(0, BLOCK_H)
            k_ok = ks < hidden
            h = tl.load(
                h_ptr + rows[:, None] * stride_hn + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0
            )
            w = tl.load(
                w_ptr + cols[:, None] * stride_wv + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0
            )
            logits = tl.dot(h, tl.trans(w), logits, input_precision=PRECISION)
        masked = tl.where(col_ok[None, :], logits, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(masked, axis=1))
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.sum(tl.exp(masked - new_max[:, None]), axis=1)
        running_max = new_max
        z_sum += tl.sum(tl.where(col_ok[None, :], logits, 0.0), axis=1)
        z_y += tl.sum(tl.where(cols[None, :] == labels[:, None], logits, 0.0), axis=1)
    tl.store(lse_ptr + rows, running_max + tl.log(running_sum), mask=row_ok)
    tl.store(zy_ptr + rows, z_y, mask=row_ok)
    tl.store(zsum_ptr + rows, z_sum, mask=row_ok)


@triton.jit
def _backward_kernel(
    h_ptr,
    w_ptr,
    labels_ptr,
    lse_ptr,
    g_ptr,
    gh_ptr,
    gw_ptr,
    n_tokens,
    vocab,
    hidden,
    stride_hn,
    stride_wv,
    smoothing,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PRECISION: tl.constexpr,
    NEED_H: tl.constexpr,
    NEED_W: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ok = rows < n_tokens
    col_ok = cols < vocab
    g = tl.load(g_ptr + rows, mask=row_ok, other=0.0)
    if tl.max(tl.abs(g), axis=0) != 0.0:
        labels = tl.load(labels_ptr + rows, mask=row_ok, other=0)
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        logits = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
        for k_start in range(0, hidden, BLOCK_H):
            ks = k_start + tl.arange(0, BLOCK_H)
            k_ok = ks < hidden
            h = tl.load(
                h_ptr + rows[:, None] * stride_hn + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0
            )
            w = tl.load(
                w_ptr + cols[:, None] * stride_wv + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0
            )
            logits = tl.dot(h, tl.trans(w), logits, input_precision=PRECISION)
        dz = tl.exp(logits - lse[:, None]) - smoothing / vocab
        dz -= tl.where(cols[None, :] == labels[:, None], 1.0 - smoothing, 0.0)
        dz = tl.where(row_ok[:, None] & col_ok[None, :], dz * g[:, None], 0.0)
        dz_in = dz.to(h_ptr.dtype.element_ty)
        for k_start in range(0, hidden, BLOCK_H):
            ks = k_start + tl.arange(0, BLOCK_H)
            k_ok = ks < hidden
            if NEED_H:
                w = tl.load(
                    w_ptr + cols[:, None] * stride_wv + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0
                )
                dh = tl.dot(dz_in, w, input_precision=PRECISION)
                tl.atomic_add(gh_ptr + rows[:, None] * hidden + ks[None, :], dh, mask=row_ok[:, None] & k_ok[None, :])
            if NEED_W:
                h = tl.load(
                    h_ptr + rows[:, None] * stride_hn + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0
                )
                dw = tl.dot(tl.trans(dz_in), h, input_precision=PRECISION)
                tl.atomic_add(gw_ptr + cols[:, None] * hidden + ks[None, :], dw, mask=col_ok[:, None] & k_ok[None, :])


def _blocks(hidden: torch.Tensor) -> tuple[int, int, int, int]:
    """Tile sizes: small under the interpreter (numpy cost grows with tile work), larger on GPUs."""
    if interpreting():
        return 16, 32, 32, 1
    return 64, 128, 64, 8


def _precision(dtype: torch.dtype) -> str:
    """fp32 inputs use exact fp32 products (no TF32) so results match the reference to 1e-5."""
    return "ieee" if dtype == torch.float32 else "tf32"


def forward_stats(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token lse, target logit and logit sum (fp32), computed tile by tile."""
    n, h = hidden.shape
    vocab = weight.shape[0]
    lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
    z_y = torch.empty_like(lse)
    z_sum = torch.empty_like(lse)
    block_n, block_v, block_h, warps = _blocks(hidden)
    grid = (triton.cdiv(n, block_n),)
    _forward_kernel[grid](
        hidden,
        weight,
        labels,
        lse,
        z_y,
        z_sum,
        n,
        vocab,
        h,
        hidden.stride(0),
        weight.stride(0),
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        BLOCK_H=block_h,
        PRECISION=_precision(hidden.dtype),
        num_warps=warps,
    )
    return lse, z_y, z_sum


def backward_grads(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    lse: torch.Tensor,
    token_grad: torch.Tensor,
    label_smoothing: float,
    need_hidden: bool,
    need_weight: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """∂h and ∂W accumulated in fp32 by atomic adds, then cast to the inputs' dtypes."""
    n, h = hidden.shape
    vocab = weight.shape[0]
    grad_hidden = torch.zeros((n, h), dtype=torch.float32, device=hidden.device)
    grad_weight = torch.zeros((vocab, h), dtype=torch.float32, device=weight.device) if need_weight else grad_hidden
    block_n, block_v, block_h, warps = _blocks(hidden)
    grid = (triton.cdiv(n, block_n), triton.cdiv(vocab, block_v))
    _backward_kernel[grid](
        hidden,
        weight,
        labels,
        lse,
        token_grad,
        grad_hidden,
        grad_weight,
        n,
        vocab,
        h,
        hidden.stride(0),
        weight.stride(0),
        float(label_smoothing),
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        BLOCK_H=block_h,
        PRECISION=_precision(hidden.dtype),
        NEED_H=need_hidden,
        NEED_W=need_weight,
        num_warps=warps,
    )
    return (
        grad_hidden.to(hidden.dtype) if need_hidden else None,
        grad_weight.to(weight.dtype) if need_weight else None,
    )
