"""The C++ decode-attention loop (`veriloop.kernels.cpu_attention`), built for real on this machine: PyTorch's
attention to float rounding (over a float32 or a float16 cache), each row the same bits alone or among others, bad
input refused, and a clean fall-back where it cannot be built."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from veriloop.kernels import cpu_attention
from veriloop.kernels.cpu_build import InlineOps, cpu_capabilities

pytestmark = pytest.mark.skipif(not cpu_attention.load(), reason="no working C++ compiler for torch extensions here")

EXPECTED_LANES_ENV = "VERILOOP_EXPECT_ATTENTION_LANES"
"""Set by test_cpu_attention_builds.py, which runs this file again on the AVX2 and portable builds."""

VECTOR_LOOPS = cpu_attention.vector_lanes() > 0
"""Whether the kernel has its explicit vector loops (AVX-512, or AVX2 with FMA and F16C). It is built with
`-march=native` plus `VERILOOP_CPU_KERNEL_FLAGS`, so the loops follow this CPU unless those flags take some away."""


def test_the_build_has_the_vector_loops_this_cpu_allows() -> None:
    capabilities = set(cpu_capabilities())
    native = 16 if "avx512_f" in capabilities else 8 if "avx2" in capabilities else 0
    expected = int(os.environ.get(EXPECTED_LANES_ENV, native))
    assert cpu_attention.vector_lanes() == expected


def _buffers(slots: int, heads: int, capacity: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(slots, heads, capacity, dim, generator=generator) for _ in range(2))  # type: ignore[return-value]


def _reference(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slots: list[int], lengths: list[int], scale: float = 0.3
) -> Any:
    """PyTorch's attention row by row, over float32 copies of the cached columns."""
    rows = []
    for row, (slot, length) in enumerate(zip(slots, lengths, strict=True)):
        rows.append(
            F.scaled_dot_product_attention(
                q[row : row + 1],
                keys[slot : slot + 1, :, :length].float(),
                values[slot : slot + 1, :, :length].float(),
                scale=scale,
            )
        )
    return torch.cat(rows)


@pytest.mark.parametrize(
    ("heads", "group", "dim", "slots", "lengths"),
    [
        (3, 3, 64, [0], [1]),  # a row's first token: one column
        (3, 3, 64, [2, 0, 5], [300, 17, 64]),  # the embedded model's shapes, rows out of slot order
        (2, 4, 40, [1, 3], [33, 90]),  # a width that is no multiple of the loop's 16 lanes
        (1, 1, 8, [0, 1, 2, 3], [5, 6, 7, 8]),  # 8 wide: the portable loops, not the vector ones
        (2, 9, 32, [4, 1], [70, 2]),  # a group of nine queries: the portable loops too
    ],
)
def test_rows_attend_over_their_own_columns_as_pytorch_does(
    heads: int, group: int, dim: int, slots: list[int], lengths: list[int]
) -> None:
    keys, values = _buffers(6, heads, 320, dim, seed=len(slots))
    q = torch.randn(len(slots), heads, group, dim, generator=torch.Generator().manual_seed(9))
    out = cpu_attention.decode_attention(q, keys, values, torch.tensor(slots), torch.tensor(lengths), 0.3)
    torch.testing.assert_close(out, _reference(q, keys, values, slots, lengths), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("heads", "group", "dim", "vectorized"),
    [(3, 3, 64, True), (2, 8, 32, True), (2, 4, 40, False), (2, 9, 32, False)],
)
def test_a_float16_cache_reads_as_its_float32_widening(heads: int, group: int, dim: int, vectorized: bool) -> None:
    """fp16 keys and values are widened exactly as they are read, so the result is the widened float32 cache's to
    float rounding everywhere. Bit for bit only in the vector loops (`vectorized`: a width that is a multiple of
    16, at most 8 queries, on a CPU with AVX-512F or AVX2), by construction: both caches run the same instructions,
    the fp16 one with one exact `vcvtph2ps` per load. The portable loops are plain C++ compiled twice from one template
    (float and half elements), and the compiler may vectorize and fuse the multiply-adds of each differently (on an
    AVX2 CPU they differ in the last bits), so there the two agree to rounding only."""
    keys, values = (buffer.half() for buffer in _buffers(4, heads, 300, dim, seed=dim))
    q = torch.randn(3, heads, group, dim, generator=torch.Generator().manual_seed(4))
    slots, lengths = torch.tensor([3, 0, 1]), torch.tensor([300, 1, 129])
    half = cpu_attention.decode_attention(q, keys, values, slots, lengths, 0.125)
    widened = cpu_attention.decode_attention(q, keys.float(), values.float(), slots, lengths, 0.125)
    if vectorized and VECTOR_LOOPS:
        assert torch.equal(half, widened)
    torch.testing.assert_close(half, widened, atol=1e-6, rtol=1e-6)
    expected = _reference(q, keys, values, [3, 0, 1], [300, 1, 129], scale=0.125)
    torch.testing.assert_close(half, expected, atol=2e-6, rtol=1e-5)


def test_a_rows_result_does_not_depend_on_the_other_rows() -> None:
    """Bit for bit on every CPU, by construction: a row's sums run in a fixed order over its own columns, in the
    same compiled loop whichever rows share the call (vector or portable, chosen by shape, not by the batch)."""
    keys, values = _buffers(8, 3, 200, 64, seed=1)
    q = torch.randn(8, 3, 3, 64, generator=torch.Generator().manual_seed(2))
    slots, lengths = torch.arange(8), torch.tensor([200, 1, 57, 199, 128, 64, 3, 150])
    together = cpu_attention.decode_attention(q, keys, values, slots, lengths, 0.125)
    for row in range(8):
        alone = cpu_attention.decode_attention(
            q[row : row + 1], keys, values, slots[row : row + 1], lengths[row : row + 1], 0.125
        )
        assert torch.equal(alone, together[row : row + 1])
    strided = cpu_attention.decode_attention(q, keys[:, :, :], values, slots, lengths, 0.125)
    assert torch.equal(strided, together)


def test_bad_input_is_refused_not_read_out_of_bounds() -> None:
    keys, values = _buffers(2, 3, 16, 64, seed=3)
    q = torch.randn(1, 3, 3, 64)
    with pytest.raises(RuntimeError, match="slot out of range"):
        cpu_attention.decode_attention(q, keys, values, torch.tensor([2]), torch.tensor([4]), 0.1)
    with pytest.raises(RuntimeError, match="length out of range"):
        cpu_attention.decode_attention(q, keys, values, torch.tensor([0]), torch.tensor([17]), 0.1)
    with pytest.raises(RuntimeError, match="length out of range"):
        cpu_attention.decode_attention(q, keys, values, torch.tensor([0]), torch.tensor([0]), 0.1)
    with pytest.raises(RuntimeError, match="float32 queries"):
        cpu_attention.decode_attention(q.double(), keys, values, torch.tensor([0]), torch.tensor([4]), 0.1)
    with pytest.raises(RuntimeError, match="both float32 or both float16"):
        cpu_attention.decode_attention(q, keys.half(), values, torch.tensor([0]), torch.tensor([4]), 0.1)
    with pytest.raises(RuntimeError, match="both float32 or both float16"):
        cpu_attention.decode_attention(q, keys.bfloat16(), values.bfloat16(), torch.tensor([0]), torch.tensor([4]), 0.1)
    with pytest.raises(RuntimeError, match="one slot and length per row"):
        cpu_attention.decode_attention(q, keys, values, torch.tensor([0, 1]), torch.tensor([4]), 0.1)
    with pytest.raises(RuntimeError, match="contiguous key and value rows"):
        cpu_attention.decode_attention(q, keys.transpose(2, 3), values, torch.tensor([0]), torch.tensor([4]), 0.1)


def test_a_failed_build_leaves_pytorchs_kernel(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch.utils.cpp_extension

    def no_compiler(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Error building extension: c++: not found")

    # A library no build has registered: the fall-back path, whatever this machine has built already.
    monkeypatch.setattr(cpu_attention, "OPS", InlineOps("absent", "veriloop_absent", "nothing", "", "a kernel"))
    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", no_compiler)
    with caplog.at_level(logging.WARNING, logger="veriloop.kernels.cpu_build"):
        assert cpu_attention.load() is False
        assert cpu_attention.load() is False  # decided once
    assert caplog.text.count("did not build") == 1
