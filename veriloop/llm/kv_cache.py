"""The batcher's KV cache: one slot per row, a row's token j at column j of its slot.

Why slots and not one left-padded rectangle: a row that leaves frees its slot and nothing else
moves; a row that joins writes into a free slot from column 0; and a row's attention is masked to
its own columns, never to padding left by rows that came before it. Only growing the capacity
copies the buffers (rare: capacity grows in chunks).

Two stores share one interface (`write`, `decode_attention`, `chunk_attention`, `copy_out`,
`copy_in`, `bytes_per_token`): `SlotKVCache` keeps keys (after RoPE) and values in the model's
dtype; `veriloop.llm.commvq_cache.CommVQSlotCache` keeps CommVQ codes and decodes from them.
Queries and keys come in per token, grouped by KV head: q (N, kv_heads, group, head_dim) where
`group` query heads share one KV head (grouped-query attention needs no repeated keys).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

CAPACITY_CHUNK = 256
"""Columns added whenever the buffers grow; growing copies them, so grow in chunks."""

RopeFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(keys (N, kv_heads, d), positions (N,)) -> keys with RoPE applied at those positions."""


@dataclass(frozen=True)
class Chunk:
    """Prefill tokens of one row in this step: tokens [offset, offset + count) of the step, written at
    columns [start, start + count) of `slot`; they attend causally over columns [0, start + count)."""

    slot: int
    start: int
    count: int
    offset: int


@dataclass(frozen=True)
class StepLayout:
    """Where a step's tokens go: the first `decode` tokens are one per decoding row, the rest are chunks."""

    slots: torch.Tensor  # (N,) long
    columns: torch.Tensor  # (N,) long
    positions: torch.Tensor  # (N,) long: RoPE positions (differ from columns after SpecPrefill)
    decode: int
    decode_slots: torch.Tensor  # (decode,) long
    decode_lengths: torch.Tensor  # (slots_used,) long: columns each slot attends over (1 for unused slots)
    slots_used: int
    chunks: tuple[Chunk, ...]
    longest: int = 0
    """max(decode_lengths), known on the host (0: read it from the tensor); every layer needs it."""
    in_order: bool = False
    """Decoding row i sits in slot i for every i < slots_used (its queries need no scattering)."""
    mask: torch.Tensor | None = None
    """`decode_mask` built once for the step (every layer reuses it)."""


class KVStore(Protocol):
    """What the packed forward needs from a cache."""

    slots: int

    def ensure(self, columns: int) -> None: ...

    def write(self, layer: int, layout: StepLayout, keys: torch.Tensor, values: torch.Tensor, rope: RopeFn) -> None: ...

    def decode_attention(self, layer: int, layout: StepLayout, q: torch.Tensor, scale: float) -> torch.Tensor: ...

    def chunk_attention(self, layer: int, chunk: Chunk, q: torch.Tensor, scale: float) -> torch.Tensor: ...

    def copy_out(self, slot: int, end: int) -> list[tuple[torch.Tensor, ...]]: ...

    def copy_in(self, slot: int, saved: Sequence[tuple[torch.Tensor, ...]], end: int | None = None) -> None: ...

    def bytes_per_token(self) -> float: ...

    def nbytes(self) -> int: ...


def grown_capacity(columns: int) -> int:
    """Columns to allocate for `columns`: rounded up in chunks, with half a chunk of headroom."""
    return -(-(columns + CAPACITY_CHUNK // 2) // CAPACITY_CHUNK) * CAPACITY_CHUNK


def lengths_mask(lengths: torch.Tensor, longest: int) -> torch.Tensor:
    """(len(lengths), 1, 1, longest) boolean: row s sees its first lengths[s] columns."""
    columns = torch.arange(longest, device=lengths.device)
    return (columns[None, :] < lengths[:, None])[:, None, None, :]


def decode_mask(layout: StepLayout, device: torch.device) -> torch.Tensor:
    """(slots_used, 1, 1, longest) boolean: slot s sees its first decode_lengths[s] columns."""
    if layout.mask is not None:
        return layout.mask.to(device)
    longest = int(layout.decode_lengths.max())
    columns = torch.arange(longest, device=device)
    return (columns[None, :] < layout.decode_lengths.to(device)[:, None])[:, None, None, :]


def causal_chunk_mask(start: int, count: int, group: int, device: torch.device) -> torch.Tensor:
    """(group·count, start + count) boolean: query t (of each head in a group) sees columns ≤ start + t."""
    rows = torch.arange(count, device=device).repeat(group) + start
    return torch.arange(start + count, device=device)[None, :] <= rows[:, None]


def _queries_in_order(layout: StepLayout) -> bool:
    """Decoding row i sits in slot i for every slot used (as the layout says, or read from its tensors)."""
    if layout.in_order or layout.longest:  # `longest` precomputed: so is `in_order`
        return layout.in_order
    order = torch.arange(layout.decode, device=layout.decode_slots.device)
    return layout.decode == layout.slots_used and bool((layout.decode_slots == order).all())


def slot_decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    decode_slots: torch.Tensor,
    used: int,
    longest: int,
    in_order: bool,
    scale: float,
) -> torch.Tensor:
    """Decode attention over one layer's slot buffers (slots, kv_heads, capacity, d): q (decode, kv_heads,
    group, d) holds one token per decoding row; each attends over its slot's columns as `mask` says.

    A plain function, so the Python loop and the scripted layers (`veriloop.llm.scripted`) run one code.
    """
    cached_keys = keys[:used, :, :longest].to(q.dtype)  # a float16 cache widens here (PyTorch's kernel wants one dtype)
    cached_values = values[:used, :, :longest].to(q.dtype)
    if in_order:
        full = q
    else:
        full = q.new_zeros([used, q.shape[1], q.shape[2], q.shape[3]])
        full[decode_slots] = q
    out = F.scaled_dot_product_attention(full, cached_keys, cached_values, attn_mask=mask, scale=scale)
    if not in_order:
        out = out[decode_slots]
    return out


QUERY_BLOCK = 16
"""Prompt positions whose queries go to one attention call: blocks start at multiples of this, whatever chunk
they arrive in, so a prompt's attention comes out the same however it was split (see `slot_chunk_attention`)."""


def slot_chunk_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot: int,
    start: int,
    count: int,
    scale: float,
    block: int = QUERY_BLOCK,  # an argument: TorchScript reads no globals
) -> torch.Tensor:
    """A row's prefill chunk over one layer's slot buffers, causal: q (count, kv_heads, group, d) -> the same.

    The queries go in blocks of the positions [k·QUERY_BLOCK, (k+1)·QUERY_BLOCK), each over the columns up
    to its end: the attention kernel's sums depend on how many queries it gets, so this way a position's
    result does not depend on where the chunk began (a reused prefix, the batcher's chunk budget). With
    chunks that start at block boundaries (the batcher's) every block is the same call every time; with
    bf16 products, whose rounding turns a last-bit difference into a larger one, that keeps greedy answers
    the same at every concurrency.
    """
    heads, group, dim = q.shape[1], q.shape[2], q.shape[3]
    out = torch.empty_like(q)
    end = start + count
    first = start
    while first < end:
        last = min((first // block + 1) * block, end)
        size = last - first
        queries = q[first - start : last - start].permute(1, 2, 0, 3).reshape(1, heads, group * size, dim)
        mask = causal_chunk_mask(first, size, group, q.device)
        attended = F.scaled_dot_product_attention(
            queries,
            keys[slot : slot + 1, :, :last].to(q.dtype),
            values[slot : slot + 1, :, :last].to(q.dtype),
            attn_mask=mask,
            scale=scale,
        )
        out[first - start : last - start] = attended.view(heads, group, size, dim).permute(2, 0, 1, 3)
        first = last
    return out


class SlotKVCache:
    """Keys (after RoPE) and values per layer in buffers of shape (slots, kv_heads, capacity, head_dim).

    `dtype` may be narrower than the model's (`PackedDecoder.kv_dtype`): values are rounded as they are written
    and widened as attention reads them.
    """

    def __init__(
        self,
        layers: int,
        slots: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        max_columns: int,
    ) -> None:
        self.layers, self.slots, self.kv_heads, self.head_dim = layers, slots, kv_heads, head_dim
        self.dtype, self.device, self.max_columns = dtype, device, max_columns
        self.capacity = 0
        self.grows = 0
        """How often the buffers were reallocated (the only time the cache is copied as a whole)."""
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def ensure(self, columns: int) -> None:
        """Make room for `columns` columns per slot (grows in chunks, copying once)."""
        if columns <= self.capacity:
            return
        capacity = max(columns, min(self.max_columns, grown_capacity(columns)))
        shape = (self.slots, self.kv_heads, capacity, self.head_dim)
        # Zeros, not empty: masked columns get zero weight, and 0 * NaN garbage would still be NaN.
        keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        for new, old in zip(keys + values, self.keys + self.values, strict=False):
            new[:, :, : self.capacity] = old
        self.keys, self.values, self.capacity = keys, values, capacity
        self.grows += 1

    def write(self, layer: int, layout: StepLayout, keys: torch.Tensor, values: torch.Tensor, rope: RopeFn) -> None:
        """Store the step's keys (N, kv_heads, d), given before RoPE, and values at their (slot, column)."""
        rotated = rope(keys, layout.positions)
        self.keys[layer][layout.slots, :, layout.columns] = rotated.to(self.dtype)
        self.values[layer][layout.slots, :, layout.columns] = values.to(self.dtype)

    def decode_attention(self, layer: int, layout: StepLayout, q: torch.Tensor, scale: float) -> torch.Tensor:
        """One query token per decoding row, each over its own slot's columns: (decode, kv_heads, group, d)."""
        longest = layout.longest or int(layout.decode_lengths.max())
        return slot_decode_attention(
            q, self.keys[layer], self.values[layer], decode_mask(layout, q.device), layout.decode_slots.to(q.device),
            layout.slots_used, longest, _queries_in_order(layout), scale,
        )  # fmt: skip

    def chunk_attention(self, layer: int, chunk: Chunk, q: torch.Tensor, scale: float) -> torch.Tensor:
        """A row's prefill chunk, causal over its slot: q (count, kv_heads, group, d) -> the same shape."""
        keys, values = self.keys[layer], self.values[layer]
        return slot_chunk_attention(q, keys, values, chunk.slot, chunk.start, chunk.count, scale)

    def copy_out(self, slot: int, end: int) -> list[tuple[torch.Tensor, ...]]:
        """A copy of a slot's first `end` columns, per layer (keys, values), for reuse by other rows."""
        return [
            (keys[slot, :, :end].clone(), values[slot, :, :end].clone())
            for keys, values in zip(self.keys, self.values, strict=True)
        ]

    def copy_in(self, slot: int, saved: Sequence[tuple[torch.Tensor, ...]], end: int | None = None) -> None:
        """Write the first `end` (default: all) columns saved by `copy_out` into the start of `slot`."""
        for keys, values, (saved_keys, saved_values) in zip(self.keys, self.values, saved, strict=True):
            stop = saved_keys.shape[1] if end is None else end
            keys[slot, :, :stop] = saved_keys[:, :stop]
            values[slot, :, :stop] = saved_values[:, :stop]

    def bytes_per_token(self) -> float:
        """Bytes the allocated buffers spend per (slot, column), all layers, keys and values."""
        if not self.capacity:
            self.ensure(1)
        return self.nbytes() / (self.slots * self.capacity)

    def nbytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in self.keys + self.values)


def saved_nbytes(saved: Sequence[tuple[torch.Tensor, ...]]) -> int:
    return sum(tensor.numel() * tensor.element_size() for layer in saved for tensor in layer)


def saved_columns(saved: Sequence[tuple[torch.Tensor, ...]]) -> int:
    return int(saved[0][0].shape[1]) if saved else 0
