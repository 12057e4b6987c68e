"""A few rows times a bf16 weight by AVX512-BF16 dot products: decoding steps' linear layers on the CPU.

A decoding step multiplies one to a few rows by every weight of the model. At one row the product
only streams the weight; each further row adds multiply-adds. FBGEMM's fp16 kernel converts each
weight to float32 and multiplies in float32, so on this project's 2-core AVX512-BF16 machine every
further row adds about a sixth of a one-row step. `vdpbf16ps` multiplies bf16 pairs straight from the
weight, 32 multiply-adds an instruction: measured over the embedded model's 120 layer products
(`veriloop bench bf16_linear`), 1 row 12.0 ms against FBGEMM's 12.9, 6 rows 11.7 against 20.1.

The weight is packed once (`pack`) into tiles of 64 outputs whose bf16 pairs lie in reading order;
the product walks each tile once for up to six rows at a time, with the rows' sums in registers.
Each row's sums run in the same order whatever the row count, so a row's result never depends on
the rows beside it. Inputs are rounded to bf16 (nearest even), sums are float32, the bias is added
in float32. The CPU must have AVX512-BF16 (`available()`); elsewhere callers keep FBGEMM's kernel.
"""

from __future__ import annotations

import torch

from veriloop.kernels.cpu_build import InlineOps, cpu_capabilities

TILE = 64
"""Outputs per packed tile (four 16-lane float32 accumulators per row)."""

_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <cstdint>
#include <vector>

#if defined(__AVX512BF16__)
namespace {

constexpr int64_t kTile = 64;
constexpr int64_t kGroup = 6;  // rows per pass over a tile: 24 accumulators, 6 inputs, 1 weight vector

// R rows (each `k2` bf16 pairs in `pairs`) times one tile (`k2` x 64 outputs x 2): the sums stay in registers,
// then `out` gets sum + bias for the tile's first `valid` outputs. No software prefetch: the hardware's
// stream prefetcher keeps a one-row pass at memory speed, and prefetches issued a few iterations ahead
// measured a third slower.
template <int R>
inline void tile_rows(const uint32_t* pairs, int64_t k2, const uint16_t* tile, const float* bias, float* out,
                      int64_t out_stride, int64_t valid) {
  __m512 acc[R * 4];
#pragma GCC unroll 32
  for (int i = 0; i < R * 4; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k2; ++p) {
    const uint16_t* w = tile + p * 2 * kTile;
    __m512bh x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[r * k2 + p]));
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      const __m512bh wb = (__m512bh)_mm512_loadu_si512(w + 32 * b);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r * 4 + b] = _mm512_dpbf16_ps(acc[r * 4 + b], x[r], wb);
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b) {
    const int64_t left = valid - b * 16;
    const int64_t lanes = left >= 16 ? 16 : (left <= 0 ? 0 : left);
    const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
    const __m512 add = bias ? _mm512_maskz_loadu_ps(mask, bias + b * 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(out + r * out_stride + b * 16, mask, _mm512_add_ps(acc[r * 4 + b], add));
  }
}

}  // namespace
#endif

// x (rows, in) float32; packed (tiles, in_pairs, 64, 2) bf16; bias (out,) float32 or empty -> (rows, out) float32.
at::Tensor bf16_linear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor& bias_in,
                       int64_t out_features) {
#if defined(__AVX512BF16__)
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "bf16_linear: x must be (rows, in) float32");
  TORCH_CHECK(packed.dim() == 4 && packed.size(2) == kTile && packed.size(3) == 2 &&
                  packed.scalar_type() == at::kBFloat16 && packed.is_contiguous(),
              "bf16_linear: packed must be a contiguous (tiles, in_pairs, 64, 2) bf16 tensor from pack()");
  const int64_t tiles = packed.size(0), k2 = packed.size(1), in = x_in.size(1), rows = x_in.size(0);
  TORCH_CHECK((in + 1) / 2 == k2, "bf16_linear: x has ", in, " inputs, the packed weight ", 2 * k2);
  TORCH_CHECK(out_features > (tiles - 1) * kTile && out_features <= tiles * kTile,
              "bf16_linear: out_features ", out_features, " does not fit ", tiles, " tiles");
  TORCH_CHECK(bias_in.numel() == 0 || (bias_in.dim() == 1 && bias_in.numel() == out_features),
              "bf16_linear: bias must be (out_features,) or empty");
  const auto x = x_in.contiguous();
  const auto bias = bias_in.numel() ? bias_in.to(at::kFloat).contiguous() : bias_in;
  auto out = at::empty({rows, out_features}, x.options());
  if (rows == 0 || out_features == 0) return out;
  std::vector<uint32_t> pairs(rows * k2);
  const float* xp = x.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p = 0; p < k2; ++p) {
      const uint32_t low = c10::BFloat16(xp[r * in + 2 * p]).x;
      const uint32_t high = 2 * p + 1 < in ? c10::BFloat16(xp[r * in + 2 * p + 1]).x : 0u;
      pairs[r * k2 + p] = low | (high << 16);
    }
  }
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr());
  const float* bp = bias.numel() ? bias.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  at::parallel_for(0, tiles, 4, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const uint16_t* tile = wp + t * k2 * 2 * kTile;
      const int64_t valid = out_features - t * kTile < kTile ? out_features - t * kTile : kTile;
      const float* tile_bias = bp ? bp + t * kTile : nullptr;
      for (int64_t r = 0; r < rows; r += kGroup) {
        const uint32_t* rp = pairs.data() + r * k2;
        float* o = op + r * out_features + t * kTile;
        switch (rows - r < kGroup ? rows - r : kGroup) {
          case 1: tile_rows<1>(rp, k2, tile, tile_bias, o, out_features, valid); break;
          case 2: tile_rows<2>(rp, k2, tile, tile_bias, o, out_features, valid); break;
          case 3: tile_rows<3>(rp, k2, tile, tile_bias, o, out_features, valid); break;
          case 4: tile_rows<4>(rp, k2, tile, tile_bias, o, out_features, valid); break;
          case 5: tile_rows<5>(rp, k2, tile, tile_bias, o, out_features, valid); break;
          default: tile_rows<6>(rp, k2, tile, tile_bias, o, out_features, valid); break;
        }
      }
    }
  });
  return out;
#else
  TORCH_CHECK(false, "bf16_linear: built for a CPU without AVX512-BF16");
#endif
}

// Whether this build has the AVX512-BF16 loop (a build for a lesser CPU, `VERILOOP_CPU_KERNEL_FLAGS`, may not).
bool has_bf16_loop() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

TORCH_LIBRARY(veriloop_bf16, m) {
  m.def("linear(Tensor x, Tensor packed, Tensor bias, int out_features) -> Tensor");
  m.def("has_bf16_loop() -> bool", &has_bf16_loop);
}

TORCH_LIBRARY_IMPL(veriloop_bf16, CPU, m) { m.impl("linear", &bf16_linear); }
"""

OPS = InlineOps("veriloop_cpu_bf16", "veriloop_bf16", "linear", _SOURCE, "the CPU bf16 linear kernel")


def available() -> bool:
    """Whether this CPU has AVX512-BF16 and the kernel is built with its loop (compiled on the first call, once per
    machine; flags for a lesser CPU in `VERILOOP_CPU_KERNEL_FLAGS` build it without)."""
    return "avx512_bf16" in cpu_capabilities() and OPS.load() and bool(torch.ops.veriloop_bf16.has_bf16_loop())


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A float (out, in) weight as `linear` reads it: bf16 (nearest even), tiles of 64 outputs, pairs of inputs."""
    if weight.dim() != 2:
        raise ValueError(f"a weight is (out, in); got shape {tuple(weight.shape)}")
    out, inputs = weight.shape
    tiles, pairs = -(-out // TILE), -(-inputs // 2)
    padded = torch.zeros(tiles * TILE, pairs * 2, dtype=torch.bfloat16)
    padded[:out, :inputs] = weight.detach().to(torch.bfloat16)
    return padded.view(tiles, TILE, pairs, 2).permute(0, 2, 1, 3).contiguous()


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
    """x (rows, in) float32 times the `pack`ed weight, plus `bias` (out,) -> (rows, out_features) float32."""
    out: torch.Tensor = torch.ops.veriloop_bf16.linear(
        x, packed, bias if bias is not None else torch.zeros(0), out_features
    )
    return out
