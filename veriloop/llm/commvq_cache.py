"""A live CommVQ KV cache for the batcher: slots hold codes, and attention reads the codes.

Per (slot, KV head, column) it stores:

* the key's residual codes, one byte per stage (index pair (a, b) as a·K + b, so K ≤ 16), and the
  key's norm in fp16. Keys are encoded before RoPE; the RoPE-commutative codebook (every centre
  zA_a + i·zB_b is a complex number per rotate-half pair, i.e. a 2×2 matrix that commutes with the
  rotation) means a key rotated to its position is the sum of rotated centres, which is what the
  attention step computes: it sums the stage centres (a table lookup per stage) and rotates the
  sum at the key's own position;
* the value's binary code, bit-packed, and one fp16 factor (the value's norm divided by the norm
  of its raw decoding, so no renormalisation is needed when reading). Attention never decodes a
  value: with weights p_j, Σ_j p_j·v_j = scale ⊙ ((Σ_j w_j)·bias + (Σ_j w_j·bits_j)·E) with
  w_j = p_j·factor_j, so it sums code bits weighted by attention and multiplies by the codebook
  once per query;
* the key's position (int32, shared by all layers), since SpecPrefill leaves gaps.

Beside the codes, each slot keeps its first `sink` tokens and its latest `window` tokens in fp16
(keys before RoPE, like the codes, and values), and attention reads those columns from them instead
of the codes (it rotates the keys it reads from both at once):
the tokens attention weighs most (the attention sinks at the start, the recent context) keep their
precision, and only older tokens are read from codes (as KIVI and StreamingLLM keep a recent or a
sink window exact). The window is a ring of `window` columns per slot (column j at j mod window);
a step writes only each slot's last `window` new columns into it. Its fixed size per slot is
counted in the measured bytes per token.

Codes are written lazily: a column's codes are read only after it has left the recent window, so
a decoding slot's columns wait in the ring and are encoded together (from their fp16 copies, the
input every code is encoded from) when the first of them is about to leave it, once every
`window` + 1 steps; `copy_out` flushes the slot first. Encoding four to eight vectors per step and
layer was the decode step's main cost (tiny ops dominated by per-call overhead).

Measured bytes per token come from these buffers (`bytes_per_token`), not from a formula.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from veriloop.kernels.commvq import CommVQ, from_pairs, to_pairs
from veriloop.llm.kv_cache import Chunk, RopeFn, StepLayout, causal_chunk_mask, decode_mask, grown_capacity
from veriloop.llm.packed import PackedDecoder

RECENT_WINDOW = 32
"""Latest tokens per slot read in fp16 instead of from their codes."""

SINK_TOKENS = 4
"""First tokens per slot read in fp16 instead of from their codes."""


@dataclass(frozen=True)
class _Flush:
    """The columns one step encodes: the ring's pending columns (old_slots, old_columns) first, then the
    step's rows `rows`; `slots` and `columns` list where all their codes go, in that order."""

    layout: StepLayout
    encodes: bool
    rows: torch.Tensor
    old_slots: torch.Tensor
    old_columns: torch.Tensor
    slots: torch.Tensor
    columns: torch.Tensor


class CommVQSlotCache:
    """The `KVStore` of `llm.kv_cache = "commvq"`: codes per slot, decoded inside attention."""

    def __init__(
        self,
        commvq: CommVQ,
        decoder: PackedDecoder,
        slots: int,
        max_columns: int,
        *,
        window: int = RECENT_WINDOW,
        sink: int = SINK_TOKENS,
    ) -> None:
        if window < 0 or sink < 0:
            raise ValueError("window and sink are token counts (0 or more)")
        if commvq.layers != len(decoder.layers) or commvq.head_dim != decoder.head_dim:
            raise ValueError("the CommVQ codebooks were fitted for another model shape")
        size = commvq.keys[0].size
        if size > 16:
            raise ValueError("the live CommVQ cache stores a stage's index pair in one byte: codebook_size ≤ 16")
        self.commvq, self.decoder = commvq, decoder
        self.layers, self.slots = len(decoder.layers), slots
        self.kv_heads, self.head_dim = decoder.kv_heads, decoder.head_dim
        self.max_columns = max_columns
        self.device = decoder.device
        self.stages = commvq.keys[0].stages
        self.size = size
        self.code_bits = commvq.values.code_bits
        if self.code_bits % 8:
            raise ValueError("the live CommVQ cache packs value codes in bytes: head_dim × value_bits must divide by 8")
        self.capacity = 0
        self.grows = 0
        # Per layer: centre tables (kv_heads·stages·K², d) of pre-RoPE unit keys, and the value codebook.
        self._key_tables: list[torch.Tensor] = []
        for book in commvq.keys:
            centres = book.za[:, :, :, None, :] + 1j * book.zb[:, :, None, :, :]  # (H, R, K, K, P)
            real = from_pairs(centres.reshape(self.kv_heads, self.stages, size * size, -1))
            self._key_tables.append(real.reshape(-1, self.head_dim).float().to(self.device))
        stage_offsets = torch.arange(self.kv_heads * self.stages, device=self.device) * size * size
        self._offsets = stage_offsets.view(self.kv_heads, self.stages)
        codec = commvq.values
        self._value_books = [codec.codebook[layer].detach().float().to(self.device) for layer in range(self.layers)]
        self._value_bias = [codec.bias[layer, 0].detach().float().to(self.device) for layer in range(self.layers)]
        self._value_scale = commvq.value_scale.float().to(self.device)  # (layers, heads, d)
        self._shifts = torch.arange(8, device=self.device, dtype=torch.uint8)
        self.key_codes: list[torch.Tensor] = []
        self.key_norms: list[torch.Tensor] = []
        self.value_codes: list[torch.Tensor] = []
        self.value_norms: list[torch.Tensor] = []
        self.positions = torch.zeros(0, 0, dtype=torch.int32, device=self.device)
        self.window, self.sink = window, sink
        exact = (slots, self.kv_heads, window, self.head_dim)
        first = (slots, self.kv_heads, sink, self.head_dim)
        self.recent_keys = [torch.zeros(exact, dtype=torch.float16, device=self.device) for _ in range(self.layers)]
        self.recent_values = [torch.zeros(exact, dtype=torch.float16, device=self.device) for _ in range(self.layers)]
        self.sink_keys = [torch.zeros(first, dtype=torch.float16, device=self.device) for _ in range(self.layers)]
        self.sink_values = [torch.zeros(first, dtype=torch.float16, device=self.device) for _ in range(self.layers)]
        self._step: tuple[StepLayout, torch.Tensor, torch.Tensor] | None = None
        self._flush: _Flush | None = None
        self._done = [0] * slots  # per slot: columns [0, done) have codes
        self._positions_version = 0  # bumped whenever `positions` changes: the cached cos/sin follow it
        self._rotations: tuple[int, dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]]] = (-1, {})
        self._end = [0] * slots  # per slot: columns written so far

    # ----------------------------------------------------------------- storage

    def ensure(self, columns: int) -> None:
        if columns <= self.capacity:
            return
        capacity = max(columns, min(self.max_columns, grown_capacity(columns)))
        s, h = self.slots, self.kv_heads

        def grow(old: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            new = torch.zeros(shape, dtype=dtype, device=self.device)
            if old.numel():
                new[:, :, : self.capacity] = old
            return new

        empty = torch.zeros(0)
        for layer in range(self.layers):
            if len(self.key_codes) <= layer:
                self.key_codes.append(empty)
                self.key_norms.append(empty)
                self.value_codes.append(empty)
                self.value_norms.append(empty)
            self.key_codes[layer] = grow(self.key_codes[layer], (s, h, capacity, self.stages), torch.uint8)
            self.key_norms[layer] = grow(self.key_norms[layer], (s, h, capacity), torch.float16)
            self.value_codes[layer] = grow(self.value_codes[layer], (s, h, capacity, self.code_bits // 8), torch.uint8)
            self.value_norms[layer] = grow(self.value_norms[layer], (s, h, capacity), torch.float16)
        positions = torch.zeros(s, capacity, dtype=torch.int32, device=self.device)
        if self.capacity:
            positions[:, : self.capacity] = self.positions
        self.positions = positions
        self._positions_version += 1
        self.capacity = capacity
        self.grows += 1

    def write(self, layer: int, layout: StepLayout, keys: torch.Tensor, values: torch.Tensor, rope: RopeFn) -> None:
        """Store the step's pre-RoPE keys and values (N, kv_heads, d): in the fp16 columns at once, in codes
        when their slot flushes (`_plan`). `rope` is not needed: the fp16 keys are kept before RoPE."""
        plan = self._plan(layout)
        half_keys, half_values = keys.to(torch.float16), values.to(torch.float16)
        if plan.encodes:
            rows_keys, rows_values = half_keys[plan.rows], half_values[plan.rows]
            if plan.old_slots.numel():
                ring = plan.old_columns % self.window
                rows_keys = torch.cat([self.recent_keys[layer][plan.old_slots, :, ring], rows_keys])
                rows_values = torch.cat([self.recent_values[layer][plan.old_slots, :, ring], rows_values])
            self._encode(layer, plan.slots, plan.columns, rows_keys, rows_values)
        if layer == 0:
            self.positions[layout.slots, layout.columns] = layout.positions.to(torch.int32)
            self._positions_version += 1
        if self.window or self.sink:
            self._write_exact(layer, layout, half_keys, half_values)

    def _encode(
        self, layer: int, slots: torch.Tensor, columns: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Encode fp16 pre-RoPE keys and values (M, kv_heads, d) into the codes of their (slot, column).

        Codes always come from the fp16 copies, so a column encoded with its step or later from the
        ring gets the same codes."""
        commvq = self.commvq
        n = keys.shape[0]
        key_float = keys.float()
        norms = key_float.norm(dim=-1)  # (N, H)
        unit = to_pairs(key_float / norms[..., None].clamp(min=1e-8)).transpose(0, 1)  # (H, N, P)
        codes = commvq.keys[layer].encode(unit)  # (H, N, R, 2)
        packed = (codes[..., 0] * self.size + codes[..., 1]).to(torch.uint8).transpose(0, 1)  # (N, H, R)
        scaled = values.float() / self._value_scale[layer][None]
        value_norms = scaled.norm(dim=-1)
        value_unit = (scaled / value_norms[..., None].clamp(min=1e-8)).reshape(1, -1, self.head_dim)
        bits = commvq.values.encode(value_unit, layer)[0]  # (N·H, code_bits) 0/1
        raw = self._value_bias[layer] + bits.float() @ self._value_books[layer]
        factor = value_norms.reshape(-1) / raw.norm(dim=-1).clamp(min=1e-8)
        value_packed = _pack(bits).view(n, self.kv_heads, -1)
        self.key_codes[layer][slots, :, columns] = packed
        self.key_norms[layer][slots, :, columns] = norms.to(torch.float16)
        self.value_codes[layer][slots, :, columns] = value_packed
        self.value_norms[layer][slots, :, columns] = factor.view(n, self.kv_heads).to(torch.float16)

    def _plan(self, layout: StepLayout) -> _Flush:
        """Which columns this step encodes, decided once a step (at its first layer's write).

        A column's codes are read only once it has left its slot's recent window, so columns are
        encoded lazily: a slot's pending columns (all in the ring) and the step's new ones are encoded
        together when the step would leave a pending column outside the window, i.e. once every
        `window` + 1 decode steps, in one batch, instead of one tiny encode per step and layer."""
        if self._flush is not None and self._flush.layout is layout:
            return self._flush
        slots, columns = layout.slots.tolist(), layout.columns.tolist()
        first: dict[int, int] = {}
        end: dict[int, int] = {}
        for slot, column in zip(slots, columns, strict=True):
            first[slot] = min(first.get(slot, column), column)
            end[slot] = max(end.get(slot, 0), column + 1)
        old_slots: list[int] = []
        old_columns: list[int] = []
        flushing: set[int] = set()
        for slot, start in first.items():
            done = min(self._done[slot], start)  # a new row in a reused slot starts over
            if end[slot] - self.window > done:
                old_slots += [slot] * (start - done)
                old_columns += range(done, start)
                flushing.add(slot)
                done = end[slot]
            self._done[slot], self._end[slot] = done, end[slot]
        rows = [index for index, slot in enumerate(slots) if slot in flushing]
        device = self.device
        old_slot_tensor = torch.tensor(old_slots, dtype=torch.long, device=device)
        old_column_tensor = torch.tensor(old_columns, dtype=torch.long, device=device)
        row_tensor = torch.tensor(rows, dtype=torch.long, device=layout.slots.device)
        self._flush = _Flush(
            layout=layout,
            encodes=bool(rows or old_slots),
            rows=row_tensor,
            old_slots=old_slot_tensor,
            old_columns=old_column_tensor,
            slots=torch.cat([old_slot_tensor, layout.slots[row_tensor].to(device)]),
            columns=torch.cat([old_column_tensor, layout.columns[row_tensor].to(device)]),
        )
        return self._flush

    @torch.inference_mode()
    def flush(self, slot: int | None = None) -> None:
        """Encode the pending columns of `slot` (every slot when None) from the ring, so every code is set."""
        for index in range(self.slots) if slot is None else (slot,):
            done, end = self._done[index], self._end[index]
            if done >= end:
                continue
            columns = torch.arange(done, end, device=self.device)
            slots = torch.full_like(columns, index)
            ring = columns % self.window
            for layer in range(self.layers):
                keys = self.recent_keys[layer][index, :, ring].transpose(0, 1)
                values = self.recent_values[layer][index, :, ring].transpose(0, 1)
                self._encode(layer, slots, columns, keys, values)
            self._done[index] = end

    def _exact_rows(self, layout: StepLayout) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens of the step that go into their slot's recent ring, tokens that are sink columns), once a step."""
        if self._step is None or self._step[0] is not layout:
            columns = layout.columns
            ends = columns + 1  # a decoding row's length after this step
            for chunk in layout.chunks:  # a chunk's tokens: the slot's length after the whole chunk
                ends[chunk.offset : chunk.offset + chunk.count] = chunk.start + chunk.count
            recent = torch.nonzero(columns >= ends - self.window).flatten()
            first = torch.nonzero(columns < self.sink).flatten()
            self._step = (layout, recent, first)
        return self._step[1], self._step[2]

    def _write_exact(self, layer: int, layout: StepLayout, keys: torch.Tensor, values: torch.Tensor) -> None:
        recent, first = self._exact_rows(layout)
        slots, columns = layout.slots, layout.columns
        if self.window and recent.numel():
            ring = columns[recent] % self.window
            self.recent_keys[layer][slots[recent], :, ring] = keys[recent]
            self.recent_values[layer][slots[recent], :, ring] = values[recent]
        if self.sink and first.numel():
            self.sink_keys[layer][slots[first], :, columns[first]] = keys[first]
            self.sink_values[layer][slots[first], :, columns[first]] = values[first]

    # ----------------------------------------------------------------- reading

    def _unrotated_keys(self, layer: int, slots: slice, start: int, end: int) -> torch.Tensor:
        """Pre-RoPE keys of columns [start, end), summed from the codebook: (S, H, end - start, d) float."""
        codes = self.key_codes[layer][slots, :, start:end].long()  # (S, H, L, R)
        s, h, length, stages = codes.shape
        index = (codes + self._offsets[None, :, None, :]).reshape(-1, stages)
        unit = F.embedding_bag(index, self._key_tables[layer], mode="sum")  # (S·H·L, d)
        return unit.view(s, h, length, -1) * self.key_norms[layer][slots, :, start:end].float()[..., None]

    def _rotate(self, keys: torch.Tensor, slots: slice, end: int) -> torch.Tensor:
        """RoPE of keys (S, H, end, d) at their columns' positions (the decoder's rotate-half formula, in place
        of its `rope` so the keys need no transposing and cos/sin are computed once a step, not per layer)."""
        cos, sin = self._cos_sin(slots, end)
        x = keys.to(self.decoder.dtype)
        half = x.shape[-1] // 2
        return (x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin).float()

    def _cos_sin(self, slots: slice, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) at the positions of `slots`' first `end` columns, each (S, 1, end, d)."""
        if self._rotations[0] != self._positions_version:
            self._rotations = (self._positions_version, {})
        key = (slots.start, slots.stop, end)
        if key not in self._rotations[1]:
            positions = self.positions[slots, :end].long()  # (S, L)
            cos, sin = self.decoder.cos_sin(positions.reshape(-1))
            shape = (positions.shape[0], 1, end, -1)
            self._rotations[1][key] = (cos.view(shape), sin.view(shape))
        return self._rotations[1][key]

    def _keys(self, layer: int, slots: slice, end: int) -> torch.Tensor:
        """Keys with RoPE at their positions, summed from the codebook: (S, H, end, d) float."""
        return self._rotate(self._unrotated_keys(layer, slots, 0, end), slots, end)

    def _exact(
        self, recent: list[torch.Tensor], first: list[torch.Tensor], layer: int, slots: slice, end: int
    ) -> torch.Tensor:
        """The fp16 columns laid out at their columns: (S, H, end, d) float (the ring's slot j at every j ≡ it)."""
        out = recent[layer][slots].float()
        if self.window:
            out = out.index_select(2, torch.arange(end, device=self.device) % self.window)
        else:
            out = out.new_zeros((*out.shape[:2], end, self.head_dim))
        stop = min(self.sink, end)
        if stop:
            out[:, :, :stop] = first[layer][slots, :, :stop].float()
        return out

    def _exact_columns(self, lengths: torch.Tensor, end: int) -> torch.Tensor:
        """(S, end) boolean: the columns each slot (holding `lengths` columns) reads in fp16."""
        columns = torch.arange(end, device=self.device)[None, :]
        return ((columns >= lengths[:, None] - self.window) & (columns < lengths[:, None])) | (columns < self.sink)

    def _attend(
        self,
        layer: int,
        slots: slice,
        end: int,
        q: torch.Tensor,
        mask: torch.Tensor,
        scale: float,
        lengths: torch.Tensor,
    ) -> torch.Tensor:
        """q (S, H, Q, d), mask broadcastable to (S, H, Q, end): attention read from the codes, and from
        the fp16 sink and recent columns of slots holding `lengths` (S,) columns."""
        keys = self._unrotated_keys(layer, slots, 0, end)
        exact = self._exact_columns(lengths, end)[:, None, :, None] if self.window or self.sink else None
        if exact is not None:
            keys = torch.where(exact, self._exact(self.recent_keys, self.sink_keys, layer, slots, end), keys)
        keys = self._rotate(keys, slots, end)  # the fp16 columns hold keys before RoPE, as the codes do
        scores = (q.float() @ keys.transpose(-1, -2)) * scale
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (S, H, Q, L)
        exact_out: torch.Tensor | float = 0.0
        if exact is not None:
            exact_weights = weights * exact[..., 0][:, :, None, :]
            exact_out = exact_weights @ self._exact(self.recent_values, self.sink_values, layer, slots, end)
            weights = weights - exact_weights
        weights = weights * self.value_norms[layer][slots, :, :end].float()[:, :, None, :]
        bits = _unpack(self.value_codes[layer][slots, :, :end], self.code_bits)  # (S, H, L, bits)
        summed = weights @ bits  # (S, H, Q, code_bits)
        out = summed @ self._value_books[layer] + weights.sum(-1, keepdim=True) * self._value_bias[layer]
        return out * self._value_scale[layer][None, :, None, :] + exact_out

    def decode_attention(self, layer: int, layout: StepLayout, q: torch.Tensor, scale: float) -> torch.Tensor:
        used = layout.slots_used
        longest = layout.longest or int(layout.decode_lengths.max())
        full = q.new_zeros((used, *q.shape[1:]))
        full[layout.decode_slots] = q
        lengths = layout.decode_lengths.to(self.device)
        out = self._attend(layer, slice(0, used), longest, full, decode_mask(layout, q.device), scale, lengths)
        return out[layout.decode_slots].to(q.dtype)

    def chunk_attention(self, layer: int, chunk: Chunk, q: torch.Tensor, scale: float) -> torch.Tensor:
        end = chunk.start + chunk.count
        count, heads, group, dim = q.shape
        queries = q.permute(1, 2, 0, 3).reshape(1, heads, group * count, dim)
        mask = causal_chunk_mask(chunk.start, count, group, q.device)[None, None]
        lengths = torch.tensor([end], device=self.device)
        out = self._attend(layer, slice(chunk.slot, chunk.slot + 1), end, queries, mask, scale, lengths)
        return out.view(heads, group, count, dim).permute(2, 0, 1, 3).to(q.dtype)

    # ----------------------------------------------------------------- sharing and size

    def copy_out(self, slot: int, end: int) -> list[tuple[torch.Tensor, ...]]:
        self.flush(slot)  # the copy's codes must all be set: its ring may be partly overwritten when reused
        saved: list[tuple[torch.Tensor, ...]] = [
            (
                self.key_codes[layer][slot, :, :end].clone(),
                self.key_norms[layer][slot, :, :end].clone(),
                self.value_codes[layer][slot, :, :end].clone(),
                self.value_norms[layer][slot, :, :end].clone(),
                self.recent_keys[layer][slot].clone(),
                self.recent_values[layer][slot].clone(),
                self.sink_keys[layer][slot].clone(),
                self.sink_values[layer][slot].clone(),
            )
            for layer in range(self.layers)
        ]
        saved.append((self.positions[slot, :end].clone(),))
        return saved

    def copy_in(self, slot: int, saved: Sequence[tuple[torch.Tensor, ...]], end: int | None = None) -> None:
        width = int(saved[-1][0].shape[0])
        stop = width if end is None else end
        self.positions[slot, :stop] = saved[-1][0][:stop]
        self._positions_version += 1
        self._done[slot] = self._end[slot] = stop  # the saved codes are complete (copy_out flushed them)
        for layer in range(self.layers):
            key_codes, key_norms, value_codes, value_norms, ring_keys, ring_values, sink_keys, sink_values = saved[
                layer
            ]
            self.key_codes[layer][slot, :, :stop] = key_codes[:, :stop]
            self.key_norms[layer][slot, :, :stop] = key_norms[:, :stop]
            self.value_codes[layer][slot, :, :stop] = value_codes[:, :stop]
            self.value_norms[layer][slot, :, :stop] = value_norms[:, :stop]
            self.sink_keys[layer][slot] = sink_keys
            self.sink_values[layer][slot] = sink_values
            if not self.window:
                continue
            low = max(0, stop - self.window)
            if low < width - self.window:  # part of the new ring was overwritten in the saved one: read its codes
                self._ring_from_codes(layer, slot, low, stop)
                kept = torch.arange(max(low, min(stop, width - self.window)), stop, device=self.device) % self.window
            else:
                kept = torch.arange(low, stop, device=self.device) % self.window
            self.recent_keys[layer][slot, :, kept] = ring_keys[:, kept]
            self.recent_values[layer][slot, :, kept] = ring_values[:, kept]

    def _ring_from_codes(self, layer: int, slot: int, low: int, stop: int) -> None:
        """Fill the ring's columns [low, stop) of `slot` with keys and values decoded from their codes."""
        ring = torch.arange(low, stop, device=self.device) % self.window
        keys = self._unrotated_keys(layer, slice(slot, slot + 1), low, stop)[0]  # (H, n, d)
        bits = _unpack(self.value_codes[layer][slot, :, low:stop], self.code_bits)  # (H, n, bits)
        raw = bits @ self._value_books[layer] + self._value_bias[layer]
        factor = self.value_norms[layer][slot, :, low:stop].float()[..., None]
        values = raw * factor * self._value_scale[layer][:, None, :]
        self.recent_keys[layer][slot, :, ring] = keys.to(torch.float16)
        self.recent_values[layer][slot, :, ring] = values.to(torch.float16)

    def nbytes(self) -> int:
        tensors = self.key_codes + self.key_norms + self.value_codes + self.value_norms + [self.positions]
        tensors += self.recent_keys + self.recent_values + self.sink_keys + self.sink_values
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors)

    def bytes_per_token(self) -> float:
        """Bytes the allocated buffers spend per (slot, column): measured from the live tensors."""
        if not self.capacity:
            self.ensure(1)
        return self.nbytes() / (self.slots * self.capacity)


def _pack(bits: torch.Tensor) -> torch.Tensor:
    """(N, nbits) 0/1 → (N, nbits/8) uint8, least significant bit first."""
    n, nbits = bits.shape
    weights = (2 ** torch.arange(8, device=bits.device)).to(torch.uint8)
    return (bits.to(torch.uint8).view(n, nbits // 8, 8) * weights).sum(-1).to(torch.uint8)


def _unpack(packed: torch.Tensor, nbits: int) -> torch.Tensor:
    """(..., nbits/8) uint8 → (..., nbits) float 0/1."""
    shifts = torch.arange(8, device=packed.device, dtype=torch.uint8)
    return ((packed[..., None] >> shifts) & 1).flatten(-2)[..., :nbits].float()
