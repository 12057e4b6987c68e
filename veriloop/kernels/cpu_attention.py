"""Attention on the CPU as one C++ loop per row: what PyTorch's flash kernel spends in small-matrix calls.

A decoding row's attention is three query vectors per key head against a few hundred cached columns:
a few hundred thousand multiply-adds. PyTorch's CPU flash kernel runs it as two small matrix products
per (row, head) plus its blocking and a float mask, about 60 µs per row and layer for 200 columns on
this project's machine; this loop reads each cached key and value once for the whole query group and
takes 20 to 30 µs (`veriloop bench llm_step` measures a whole step). The sums run in a fixed order over
each row's own columns, so a row's result never depends on which rows share its step.

Where the CPU has AVX-512 and the head width is a multiple of 16 (groups of up to 8 queries), the
scores and the weighted values run as explicit 16-lane loops; on an AVX2 CPU (with FMA and F16C) the
same loops run on pairs of 8-lane registers. Elsewhere, or with `-DVERILOOP_PORTABLE_ATTENTION` in
`VERILOOP_CPU_KERNEL_FLAGS`, the portable C++ loops run (vectorized as the compiler sees fit).
In a real step the cache comes from memory, not the core's caches (the weights stream through them
between layers), and the hardware prefetcher stops at every 4 KiB page: the loop fetches keys 32
columns ahead and each column's value while it scores the key. Measured over 30 layers' caches at 300
columns, one row: 68 µs per layer before, 38 to 40 µs after (20.8 µs with the cache already in the
core's caches).

A "row" is any query token with its slot and its column count: a prompt token is a row over the
columns up to its own, so the batcher sends a step's decoding rows and prompt chunks in one call, and
each token's result is the same however its prompt was chunked. The cache may be float32 or fp16
(`llm.kv_dtype`); fp16 values are widened as they are read (`vcvtph2ps`, exact), halving the bytes a
row's attention reads: at 300 columns, 28.9 against 44.0 µs per row and layer out of the core's caches.

The source is compiled once per machine (`veriloop.kernels.cpu_build`, about 40 s) and registered as
`torch.ops.veriloop_cpu.decode_attention`, which TorchScript calls without the GIL. Where no C++
compiler works, `load()` says so once in the log and callers keep PyTorch's kernel.
"""

from __future__ import annotations

import torch

from veriloop.kernels.cpu_build import InlineOps

_SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#if !defined(VERILOOP_PORTABLE_ATTENTION) && defined(__AVX512F__)
#define VERILOOP_VECTOR_LOOPS 16
#elif !defined(VERILOOP_PORTABLE_ATTENTION) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VERILOOP_VECTOR_LOOPS 8
#else
#define VERILOOP_VECTOR_LOOPS 0
#endif
#if VERILOOP_VECTOR_LOOPS
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kLanes = 16;

// One dot product of two `d`-wide rows (the second float or half), in kLanes partial sums then in a fixed order.
template <typename T>
inline float dot(const float* a, const T* b, int64_t d) {
  float lanes[kLanes] = {0.f};
  int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a[c + l] * static_cast<float>(b[c + l]);
  }
  float total = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) total += lanes[l];
  for (; c < d; ++c) total += a[c] * static_cast<float>(b[c]);
  return total;
}

// exp(x) for the softmax's x <= 0 (scores less their maximum), vectorizable: x = n·ln2 + r with |r| <= ln2/2,
// exp(r) by Cephes' degree-6 polynomial (about 1 ulp), times 2^n built in the exponent bits. Below -87 the
// result stays at exp(-87), about 1.6e-38, which no softmax sum that holds exp(0) = 1 can tell apart.
inline float exp_nonpositive(float x) {
  x = x < -87.f ? -87.f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// The largest and the sum of `count` values, each in kLanes partial results then in a fixed order.
inline float largest(const float* x, int64_t count) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -INFINITY);
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = lanes[l] > x[j + l] ? lanes[l] : x[j + l];
  }
  float top = -INFINITY;
  for (int64_t l = 0; l < kLanes; ++l) top = top > lanes[l] ? top : lanes[l];
  for (; j < count; ++j) top = top > x[j] ? top : x[j];
  return top;
}

inline float total(const float* x, int64_t count) {
  float lanes[kLanes] = {0.f};
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  float sum = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  for (; j < count; ++j) sum += x[j];
  return sum;
}

#if VERILOOP_VECTOR_LOOPS
constexpr int64_t kAhead = 32;  // key rows fetched ahead (32 x 256 bytes at the embedded model's width in float)

// Sixteen float lanes: one AVX-512 register, or two AVX2 ones. The loops below are written once against these;
// fp16 values are widened as they are loaded (`vcvtph2ps`, exact), so a half cache and its float32 widening run
// the same arithmetic.
#if VERILOOP_VECTOR_LOOPS == 16
struct Vec16 {
  __m512 v;
};
inline Vec16 zero16() { return {_mm512_setzero_ps()}; }
inline Vec16 load16(const float* p) { return {_mm512_loadu_ps(p)}; }
inline Vec16 load16(const at::Half* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline Vec16 broadcast16(float x) { return {_mm512_set1_ps(x)}; }
inline Vec16 fma16(Vec16 a, Vec16 b, Vec16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline float sum16(Vec16 a) { return _mm512_reduce_add_ps(a.v); }
inline void store16(float* p, Vec16 a) { _mm512_storeu_ps(p, a.v); }
#else
struct Vec16 {
  __m256 lo, hi;
};
inline Vec16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline Vec16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline Vec16 load16(const at::Half* p) {
  const auto* half = reinterpret_cast<const __m128i*>(p);
  return {_mm256_cvtph_ps(_mm_loadu_si128(half)), _mm256_cvtph_ps(_mm_loadu_si128(half + 1))};
}
inline Vec16 broadcast16(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline Vec16 fma16(Vec16 a, Vec16 b, Vec16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
// A fixed tree: the two halves, then the 128-bit halves, then pairs, then the last two lanes.
inline float sum16(Vec16 a) {
  const __m256 eight = _mm256_add_ps(a.lo, a.hi);
  __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  four = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(four, _mm_shuffle_ps(four, four, 1)));
}
inline void store16(float* p, Vec16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
#endif

template <typename T>
inline void prefetch_row(const T* row, int64_t d) {
  constexpr int64_t per_line = 64 / sizeof(T);
  for (int64_t c = 0; c < d; c += per_line) _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}

// Scores of a query group (G queries, `d` a multiple of 16) against `length` keys: each score's 16 lane partial
// sums then a fixed reduction tree (`_mm512_reduce_add_ps`), with every key row read once for the group.
template <int G, typename T>
void group_scores(const float* queries, const T* key_rows, int64_t key_stride, const T* value_rows,
                  int64_t value_stride, int64_t length, int64_t d, float factor, float* scores) {
  for (int64_t j = 0; j < kAhead && j < length; ++j) prefetch_row(key_rows + j * key_stride, d);
  for (int64_t j = 0; j < length; ++j) {
    const T* key = key_rows + j * key_stride;
    // The cache lives in memory, not in the core's caches (a step streams the weights between layers), and the
    // hardware prefetcher stops at each 4 KiB page: fetch keys a few pages ahead, and this column's value now.
    if (j + kAhead < length) prefetch_row(key_rows + (j + kAhead) * key_stride, d);
    prefetch_row(value_rows + j * value_stride, d);
    Vec16 acc[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[g] = zero16();
    for (int64_t c = 0; c < d; c += 16) {
      const Vec16 k = load16(key + c);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) acc[g] = fma16(load16(queries + g * d + c), k, acc[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) scores[g * length + j] = sum16(acc[g]) * factor;
  }
}

// out[g] = sum over j of weights[g][j] * value j, 16 columns at a time, summed in column order j = 0, 1, ...
template <int G, typename T>
void group_values(const float* weights, const T* value_rows, int64_t value_stride, int64_t length, int64_t d,
                  float* out) {
  for (int64_t c = 0; c < d; c += 16) {
    Vec16 acc[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[g] = zero16();
    for (int64_t j = 0; j < length; ++j) {
      const Vec16 v = load16(value_rows + j * value_stride + c);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) acc[g] = fma16(broadcast16(weights[g * length + j]), v, acc[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) store16(out + g * d + c, acc[g]);
  }
}

#define VERILOOP_GROUPS(CALL) \
  switch (group) {            \
    case 1: CALL(1); break;   \
    case 2: CALL(2); break;   \
    case 3: CALL(3); break;   \
    case 4: CALL(4); break;   \
    case 5: CALL(5); break;   \
    case 6: CALL(6); break;   \
    case 7: CALL(7); break;   \
    case 8: CALL(8); break;   \
    default: break;           \
  }
#endif

}  // namespace

// The loop of `decode_attention` over a cache of element type T (float, or at::Half widened as it is read).
template <typename T>
void attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& slots,
                 const at::Tensor& lengths, double scale, at::Tensor& out) {
  const int64_t rows = q.size(0), heads = q.size(1), group = q.size(2), d = q.size(3);
  const float* qp = q.data_ptr<float>();
  const T* kp = keys.data_ptr<T>();
  const T* vp = values.data_ptr<T>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lengths.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float factor = static_cast<float>(scale);
  std::vector<float> scores;
#if VERILOOP_VECTOR_LOOPS
  const bool vectorized = d % 16 == 0 && group >= 1 && group <= 8;  // else the portable loops below
#else
  const bool vectorized = false;
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t slot = sp[r], length = lp[r];
    TORCH_CHECK(slot >= 0 && slot < keys.size(0), "decode_attention: slot out of range");
    TORCH_CHECK(length >= 1 && length <= keys.size(2), "decode_attention: length out of range");
    scores.resize(group * length);
    for (int64_t h = 0; h < heads; ++h) {
      const float* queries = qp + (r * heads + h) * group * d;
      const T* key_rows = kp + slot * keys.stride(0) + h * keys.stride(1);
      const T* value_rows = vp + slot * values.stride(0) + h * values.stride(1);
      float* o_group = op + (r * heads + h) * group * d;
      if (vectorized) {
#if VERILOOP_VECTOR_LOOPS
#define VERILOOP_SCORES(G) \
  group_scores<G, T>(queries, key_rows, keys.stride(2), value_rows, values.stride(2), length, d, factor, scores.data())
        VERILOOP_GROUPS(VERILOOP_SCORES)
#undef VERILOOP_SCORES
#endif
      } else {
        for (int64_t j = 0; j < length; ++j) {
          const T* key = key_rows + j * keys.stride(2);
          for (int64_t g = 0; g < group; ++g) scores[g * length + j] = dot(queries + g * d, key, d) * factor;
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores.data() + g * length;
        const float top = largest(s, length);
        for (int64_t j = 0; j < length; ++j) s[j] = exp_nonpositive(s[j] - top);
        const float inverse = 1.f / total(s, length);
        for (int64_t j = 0; j < length; ++j) s[j] *= inverse;
      }
      if (vectorized) {
#if VERILOOP_VECTOR_LOOPS
#define VERILOOP_VALUES(G) group_values<G, T>(scores.data(), value_rows, values.stride(2), length, d, o_group)
        VERILOOP_GROUPS(VERILOOP_VALUES)
#undef VERILOOP_VALUES
#endif
      } else {
        for (int64_t g = 0; g < group; ++g) {
          const float* s = scores.data() + g * length;
          float* o = o_group + g * d;
          std::fill(o, o + d, 0.f);
          for (int64_t j = 0; j < length; ++j) {
            const T* value = value_rows + j * values.stride(2);
            for (int64_t c = 0; c < d; ++c) o[c] += s[j] * static_cast<float>(value[c]);
          }
        }
      }
    }
  }
}

// q (rows, kv_heads, group, d) float32; keys, values (slots, kv_heads, capacity, d), both float32 or both float16,
// last dim contiguous; slots, lengths (rows,) int64: row r attends over columns [0, lengths[r]) of slot slots[r].
at::Tensor decode_attention(const at::Tensor& q_in, const at::Tensor& keys, const at::Tensor& values,
                            const at::Tensor& slots_in, const at::Tensor& lengths_in, double scale) {
  TORCH_CHECK(q_in.dim() == 4 && keys.dim() == 4 && values.dim() == 4, "decode_attention: 4-d q, keys, values");
  TORCH_CHECK(q_in.scalar_type() == at::kFloat, "decode_attention: float32 queries");
  TORCH_CHECK(keys.scalar_type() == values.scalar_type() &&
                  (keys.scalar_type() == at::kFloat || keys.scalar_type() == at::kHalf),
              "decode_attention: keys and values both float32 or both float16");
  TORCH_CHECK(keys.stride(3) == 1 && values.stride(3) == 1, "decode_attention: contiguous key and value rows");
  const auto q = q_in.contiguous();
  const auto slots = slots_in.to(at::kLong).contiguous();
  const auto lengths = lengths_in.to(at::kLong).contiguous();
  const int64_t rows = q.size(0), heads = q.size(1), d = q.size(3);
  TORCH_CHECK(keys.size(1) == heads && keys.size(3) == d && values.sizes() == keys.sizes(), "decode_attention: shapes");
  TORCH_CHECK(slots.numel() == rows && lengths.numel() == rows, "decode_attention: one slot and length per row");
  auto out = at::empty_like(q);
  if (keys.scalar_type() == at::kHalf) {
    attend_rows<at::Half>(q, keys, values, slots, lengths, scale, out);
  } else {
    attend_rows<float>(q, keys, values, slots, lengths, scale, out);
  }
  return out;
}

// 16 (AVX-512), 8 (AVX2 with FMA and F16C: two registers per 16 lanes) or 0 (the portable loops only).
int64_t vector_lanes() { return VERILOOP_VECTOR_LOOPS; }

TORCH_LIBRARY(veriloop_cpu, m) {
  m.def("decode_attention(Tensor q, Tensor keys, Tensor values, Tensor slots, Tensor lengths, float scale) -> Tensor");
  m.def("vector_lanes() -> int", &vector_lanes);
}

TORCH_LIBRARY_IMPL(veriloop_cpu, CPU, m) { m.impl("decode_attention", &decode_attention); }
"""

OPS = InlineOps(
    "veriloop_cpu_attention", "veriloop_cpu", "decode_attention", _SOURCE, "the CPU decode-attention kernel"
)


def registered() -> bool:
    """Whether `torch.ops.veriloop_cpu.decode_attention` exists in this process."""
    return OPS.registered()


def load() -> bool:
    """Compile (once per machine) and register the kernel; False, logged once, where that cannot be done."""
    return OPS.load()


def vector_lanes() -> int:
    """The loops the built kernel has: 16 (AVX-512), 8 (AVX2), 0 (portable only, or not built)."""
    if not registered():
        return 0
    return int(torch.ops.veriloop_cpu.vector_lanes())


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q (rows, kv_heads, group, d) over row r's slot's first `lengths[r]` columns -> (rows, kv_heads, group, d)."""
    out: torch.Tensor = torch.ops.veriloop_cpu.decode_attention(q, keys, values, slots, lengths, scale)
    return out
