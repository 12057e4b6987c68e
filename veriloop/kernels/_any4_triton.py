# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""Triton dequantise-matmul for `QuantizedWeight` (any4/any3/any2, nf4, fp4, int4), imported on demand.

Each program computes a BLOCK_M × BLOCK_N tile of y = x·Wᵀ. Per K step it loads the packed
codes of its BLOCK_N rows, unpacks them, looks each code up in its row's table, applies the
group's scale and offset, and feeds the dequantised tile to `tl.dot`; W is never written out.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from veriloop.kernels._triton import interpreting
from veriloop.kernels.any4 import QuantizedWeight, _codes_per_byte


@triton.jit
def _dequant_matmul_kernel(
    x_ptr,
    codes_ptr,
    lut_ptr,
    scale_ptr,
    offset_ptr,
    bias_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_ym,
    codes_stride,
    n_groups,
    group_size,
    LUT_SIZE: tl.constexpr,
    PER_BYTE: tl.constexpr,
    CODE_BITS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k_start in range(0, K, BLOCK_K):
        rk = k_start + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        w_ok = n_ok[:, None] & k_ok[None, :]
        packed = tl.load(codes_ptr + rn[:, None] * codes_stride + (rk // PER_BYTE)[None, :], mask=w_ok, other=0)
        codes = (packed.to(tl.int32) >> ((rk % PER_BYTE) * CODE_BITS)[None, :]) & ((1 << CODE_BITS) - 1)
        levels = tl.load(lut_ptr + rn[:, None] * LUT_SIZE + codes, mask=w_ok, other=0.0)
        groups = rn[:, None] * n_groups + (rk // group_size)[None, :]
        scale = tl.load(scale_ptr + groups, mask=w_ok, other=0.0)
        offset = tl.load(offset_ptr + groups, mask=w_ok, other=0.0)
        w = (levels * scale + offset).to(x.dtype)
        acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(
        y_ptr + rm[:, None] * stride_ym + rn[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=m_ok[:, None] & n_ok[None, :],
    )


def dequant_matmul(x: torch.Tensor, qweight: QuantizedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x·dequant(W)ᵀ + bias for x (..., in_features), in x's dtype."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    m, k = x2.shape
    n = qweight.out_features
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if interpreting():
        block_m, block_n, block_k, warps = 16, 32, 32, 1
    else:
        block_m, block_n, block_k, warps = (16 if m <= 16 else 64), 64, 64, 4
    per_byte = _codes_per_byte(qweight.bits)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _dequant_matmul_kernel[grid](
        x2,
        qweight.codes,
        qweight.lut,
        qweight.scale,
        qweight.offset,
        bias if bias is not None else y,
        y,
        m,
        n,
        k,
        x2.stride(0),
        y.stride(0),
        qweight.codes.stride(0),
        qweight.scale.shape[1],
        qweight.group_size,
        LUT_SIZE=qweight.lut.shape[1],
        PER_BYTE=per_byte,
        CODE_BITS=8 // per_byte,
        HAS_BIAS=bias is not None,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        num_warps=warps,
    )
    return y.reshape(*lead, n)
