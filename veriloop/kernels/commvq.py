"""CommVQ (Li et al., ICML 2025): KV-cache compression whose key codebook commutes with RoPE.

Keys. A head's key k ∈ R^d is read as P = d/2 complex numbers z_p = k_p + i·k_{p+P}, the pairs
that (rotate-half) RoPE turns together: RoPE at position t is z_p ↦ z_p·e^{iθ_p t}. The key is
split into its norm (kept in fp16) and a unit direction, which R residual stages encode. Each
stage has two tables zA, zB of K complex P-vectors and its centres are c_ab = zA_a + i·zB_b, so
a stage stores one index pair (a, b): 2·log2(K) bits. Every centre, per pair, is a complex
number, i.e. the 2×2 matrix [[x, −y], [y, x]], and such matrices commute with rotations: RoPE of
a decoded key equals decoding with a rotated codebook (`KeyCodebook.rotated`), so keys can be
stored before RoPE and rotated in codebook space. The tables are learned by EM with
deterministic annealing (soft assignments softmax(−‖x − c‖²/τ) with τ falling geometrically;
the M-step is the closed-form weighted least squares under the zA + i·zB structure), one stage
at a time on the previous stages' residual, keeping the iterate with the lowest hard-assignment
error.

Values. Each value is divided by a per-channel scale (its calibration RMS), normalised (the norm
kept in fp16), and passed through an encoder (LayerNorm → Linear → GELU → Linear) whose logits,
in groups of four, pick one of {(1,0), (0,1), (1,1), (0,0)}: two bits per group. The decoder is
an additive binary codebook: x̂ = bits · E, renormalised and rescaled. Training uses
straight-through Gumbel-softmax on the reconstruction error of calibration values.

`fit_commvq` learns one key codebook per (layer, KV head) and one value codec per layer from
calibration KV (`collect_kv`); `attach_commvq_` makes a model's attention see keys and values as
they come back out of the compressed cache (hooks on k_proj / v_proj, before RoPE), which is how
the perplexity and generation figures are measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------- RoPE helpers


def to_pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., d) real → (..., d/2) complex: z_p = x_p + i·x_{p+d/2}, the rotate-half pairs."""
    half = x.shape[-1] // 2
    return torch.complex(x[..., :half].float(), x[..., half:].float())


def from_pairs(z: torch.Tensor) -> torch.Tensor:
    """Inverse of `to_pairs`."""
    return torch.cat([z.real, z.imag], dim=-1)


def rope_phase(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """e^{iθ_p t} for every position t (any shape) and pair p: (*positions.shape, P)."""
    angles = positions.to(torch.float64)[..., None] * inv_freq.to(torch.float64)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (Llama's convention) of real vectors x (..., seq, d) at `positions` (seq,)."""
    return from_pairs(to_pairs(x) * rope_phase(positions, inv_freq)).to(x.dtype)


def pair_matrix(z: torch.Tensor) -> torch.Tensor:
    """The 2×2 real matrix [[x, −y], [y, x]] of each complex number (shape (..., 2, 2))."""
    return torch.stack([torch.stack([z.real, -z.imag], -1), torch.stack([z.imag, z.real], -1)], -2)


# ----------------------------------------------------------------------------- keys


@dataclass
class KeyCodebook:
    """Residual RoPE-commutative codebooks for G independent groups (e.g. layer × KV head).

    za, zb: complex (G, R, K, P). Codes: (G, N, R, 2) indices (a, b) per stage.
    """

    za: torch.Tensor
    zb: torch.Tensor
    _tables: tuple[tuple[int, ...], list[_StageTables]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def stages(self) -> int:
        return int(self.za.shape[-3])

    @property
    def size(self) -> int:
        return int(self.za.shape[-2])

    def bits_per_vector(self) -> int:
        return self.stages * 2 * _index_bits(self.size)

    def centres(self, stage: int) -> torch.Tensor:
        """(G, K, K, P) complex centres zA_a + i·zB_b of one stage."""
        return self.za[:, stage, :, None, :] + 1j * self.zb[:, stage, None, :, :]

    def rotated(self, phase: torch.Tensor) -> KeyCodebook:
        """The codebook turned by RoPE phases: one phase (P,) for all vectors, or one per vector
        (N, P), giving per-vector tables (G, N, R, K, P) that `decode` indexes per vector. Every
        entry stays of the form zA + i·zB, because complex products commute."""
        if phase.dim() == 1:
            return KeyCodebook(self.za * phase, self.zb * phase)
        per_vector = phase[None, :, None, None, :]
        return KeyCodebook(self.za[:, None] * per_vector, self.zb[:, None] * per_vector)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Greedy residual encoding of complex (G, N, P) vectors; returns int64 (G, N, R, 2)."""
        residual = x.clone()
        codes = []
        for stage, tables in enumerate(self.stage_tables()):
            a, b = _nearest_pair(residual, tables.a, tables.b, fixed=tables)
            codes.append(torch.stack([a, b], dim=-1))
            residual = residual - _gather_rows(self.za[:, stage], a) - _gather_rows(tables.b, b)
        return torch.stack(codes, dim=2)

    def stage_tables(self) -> list[_StageTables]:
        """Each stage's codebook-only terms of the distances, computed once per codebook (the live
        cache encodes a few vectors at a time, where recomputing them was a large share of the work)."""
        key = (id(self.za), self.za._version, id(self.zb), self.zb._version)
        if self._tables is None or self._tables[0] != key:
            tables = []
            for stage in range(self.stages):
                a_table, b_table = self.za[:, stage], 1j * self.zb[:, stage]
                b_norms = b_table.abs().pow(2).sum(-1)[:, None, :]
                fixed = a_table.abs().pow(2).sum(-1)[:, :, None] + 2 * _real_dot(a_table, b_table)
                tables.append(_StageTables(a_table, b_table, b_norms, fixed))
            self._tables = (key, tables)
        return self._tables[1]

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of the chosen centres: complex (G, N, P). Position-dependent tables (G, N, R, K, P)
        from `rotated` are indexed per vector."""
        out = torch.zeros(codes.shape[0], codes.shape[1], self.za.shape[-1], dtype=torch.complex64, device=codes.device)
        for stage in range(self.stages):
            out = out + _pick(self.za, stage, codes[..., stage, 0]) + 1j * _pick(self.zb, stage, codes[..., stage, 1])
        return out


@dataclass(frozen=True)
class _StageTables:
    """One stage's tables and the parts of ‖x − (A_a + B_b)‖² that do not depend on x."""

    a: torch.Tensor  # (G, K, P) complex
    b: torch.Tensor  # (G, K, P) complex, already times i
    b_norms: torch.Tensor  # (G, 1, K): ‖B_b‖²
    fixed: torch.Tensor  # (G, K, K): ‖A_a‖² + 2·Re⟨A_a, B_b⟩


def _gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table (G, K, P), index (G, N) → (G, N, P)."""
    return table.gather(1, index[..., None].expand(-1, -1, table.shape[-1]))


def _pick(table: torch.Tensor, stage: int, index: torch.Tensor) -> torch.Tensor:
    """Entries of stage `stage` for (G, N) indices; tables may be per-vector (G, N, R, K, P)."""
    if table.dim() == 4:
        return _gather_rows(table[:, stage], index)
    per_vector = table[:, :, stage]  # (G, N, K, P)
    idx = index[..., None, None].expand(-1, -1, 1, per_vector.shape[-1])
    return per_vector.gather(2, idx).squeeze(2)


def _real_dot(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Real inner products Re Σ_p conj(u_p)·v_p for batched complex u (G, N, P), v (G, K, P) → (G, N, K)."""
    return torch.view_as_real(u).flatten(-2) @ torch.view_as_real(v).flatten(-2).transpose(1, 2)


def _pair_distances(
    x: torch.Tensor, a_table: torch.Tensor, b_table: torch.Tensor, fixed: _StageTables | None = None
) -> torch.Tensor:
    """‖x − (A_a + B_b)‖² for all (a, b) without forming the K² centres: (G, N, K, K). `fixed`: the
    codebook-only terms computed beforehand (`KeyCodebook.stage_tables`), the same numbers."""
    per_a = x.abs().pow(2).sum(-1)[:, :, None] - 2 * _real_dot(x, a_table)  # (G, N, K)
    if fixed is None:
        b_norms = b_table.abs().pow(2).sum(-1)[:, None, :]
        pair_terms = a_table.abs().pow(2).sum(-1)[:, :, None] + 2 * _real_dot(a_table, b_table)  # (G, K, K)
    else:
        b_norms, pair_terms = fixed.b_norms, fixed.fixed
    per_b = b_norms - 2 * _real_dot(x, b_table)  # (G, N, K)
    dist = pair_terms[:, None] + per_a[..., None]
    return dist.add_(per_b[:, :, None, :]).clamp_(min=0)


def _nearest_pair(
    x: torch.Tensor,
    a_table: torch.Tensor,
    b_table: torch.Tensor,
    chunk: int = 4096,
    fixed: _StageTables | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Index pair (a, b) of the nearest centre A_a + B_b for each vector, chunked over vectors."""
    k = a_table.shape[1]
    if x.shape[1] <= chunk:
        best = _pair_distances(x, a_table, b_table, fixed).flatten(2).argmin(dim=-1)
    else:
        parts = []
        for start in range(0, x.shape[1], chunk):
            flat = _pair_distances(x[:, start : start + chunk], a_table, b_table, fixed).flatten(2)
            parts.append(flat.argmin(dim=-1))
        best = torch.cat(parts, dim=1)
    return best // k, best % k


def _em_stage(
    x: torch.Tensor, k: int, iters: int, generator: torch.Generator, tau_start: float, tau_end: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit one stage's (zA, zB) to complex data (G, N, P) by annealed EM; returns the best iterate."""
    g, n, p = x.shape
    energy = x.abs().pow(2).sum(-1).mean(-1).clamp(min=1e-12)  # (G,)
    rows_a = torch.randint(0, n, (g, k), generator=generator)
    za = _gather_rows(x, rows_a.to(x.device)).clone()
    zb = (torch.randn(g, k, p, dtype=torch.complex64, generator=generator) * 0.05).to(x.device)
    zb = zb * energy.sqrt()[:, None, None] / math.sqrt(p)
    best_a, best_b = za.clone(), zb.clone()
    best_err = torch.full((g,), math.inf, device=x.device)
    eye = torch.eye(2 * k, dtype=torch.complex128, device=x.device)
    for it in range(iters):
        a_tab, b_tab = za, 1j * zb
        dist = _pair_distances(x, a_tab, b_tab)  # (G, N, K, K)
        hard = dist.flatten(2).min(dim=-1).values.mean(-1)
        improved = hard < best_err
        best_err = torch.where(improved, hard, best_err)
        best_a = torch.where(improved[:, None, None], za, best_a)
        best_b = torch.where(improved[:, None, None], zb, best_b)
        tau = tau_start * (tau_end / tau_start) ** (it / max(iters - 1, 1))
        resp = torch.softmax(-dist.flatten(2) / (tau * energy[:, None, None]), dim=-1).view(g, n, k, k)
        pa, pb = resp.sum(3), resp.sum(2)  # (G, N, K)
        nab = resp.sum(1).to(torch.complex128)  # (G, K, K)
        xc = x.to(torch.complex128)
        ma = pa.transpose(1, 2).to(torch.complex128) @ xc
        mb = pb.transpose(1, 2).to(torch.complex128) @ xc
        matrix = torch.zeros(g, 2 * k, 2 * k, dtype=torch.complex128, device=x.device)
        matrix[:, :k, :k] = torch.diag_embed(nab.sum(2))
        matrix[:, k:, k:] = torch.diag_embed(nab.sum(1))
        matrix[:, :k, k:] = 1j * nab
        matrix[:, k:, :k] = -1j * nab.transpose(1, 2)
        ridge = 1e-6 * matrix.diagonal(dim1=1, dim2=2).real.mean(-1).clamp(min=1e-12) + 1e-9
        rhs = torch.cat([ma, -1j * mb], dim=1)
        solution = torch.linalg.solve(matrix + ridge[:, None, None] * eye, rhs)
        za, zb = solution[:, :k].to(torch.complex64), solution[:, k:].to(torch.complex64)
    hard = _pair_distances(x, za, 1j * zb).flatten(2).min(dim=-1).values.mean(-1)
    improved = hard < best_err
    return torch.where(improved[:, None, None], za, best_a), torch.where(improved[:, None, None], zb, best_b)


def fit_key_codebook(
    keys: torch.Tensor,
    stages: int = 16,
    codebook_size: int = 16,
    iters: int = 12,
    tau_start: float = 0.1,
    tau_end: float = 1e-3,
    seed: int = 0,
) -> KeyCodebook:
    """Learn residual codebooks for unit key directions, complex (G, N, P), stage by stage.

    Groups are fitted a few at a time so the (groups, N, K, K) responsibilities stay small.
    """
    generator = torch.Generator().manual_seed(seed)
    residual = keys.to(torch.complex64)
    n = residual.shape[1]
    chunk = max(1, (1 << 22) // max(n * codebook_size**2, 1))
    za_stages, zb_stages = [], []
    for _ in range(stages):
        parts = [
            _em_stage(residual[i : i + chunk], codebook_size, iters, generator, tau_start, tau_end)
            for i in range(0, residual.shape[0], chunk)
        ]
        za = torch.cat([part[0] for part in parts])
        zb = torch.cat([part[1] for part in parts])
        a, b = _nearest_pair(residual, za, 1j * zb)
        residual = residual - _gather_rows(za, a) - 1j * _gather_rows(zb, b)
        za_stages.append(za)
        zb_stages.append(zb)
    return KeyCodebook(torch.stack(za_stages, 1), torch.stack(zb_stages, 1))


# ----------------------------------------------------------------------------- values

_CATEGORY_BITS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
#: Multiples of a group's step that categories 0..3 stand for when the codebook starts as a
#: uniform scalar quantiser (e1 = step, e2 = 2·step): (1,0)→1, (0,1)→2, (1,1)→3, (0,0)→0.
_CATEGORY_DIGITS = torch.tensor([1.0, 2.0, 3.0, 0.0])


class ValueCodec(nn.Module):
    """Encoder + additive binary codebook for G groups (layers) of unit value directions.

    A code is `n_cat` categorical choices of 2 bits each; decoding is bias + bits·E, renormalised.
    Encoding runs the encoder (LayerNorm → Linear → GELU → Linear, argmax per group of four
    logits) and then `refine_sweeps` sweeps of iterated conditional modes, which re-pick each
    group's category given the others and can only lower the error.
    """

    def __init__(self, groups: int, dim: int, bits: int = 2, hidden: int | None = None) -> None:
        super().__init__()
        if (dim * bits) % 2:
            raise ValueError("dim × bits must be even (codes are groups of 2 bits)")
        self.dim = dim
        self.bits = bits
        self.code_bits = dim * bits
        self.n_cat = self.code_bits // 2
        self.refine_sweeps = 2
        width = 4 * self.n_cat
        hidden = hidden or dim  # CommVQ uses min(4096, width); dim keeps CPU training cheap
        gen = torch.Generator().manual_seed(0)

        def init(*shape: int, fan_in: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=gen) / math.sqrt(fan_in))

        self.ln_weight = nn.Parameter(torch.ones(groups, dim))
        self.ln_bias = nn.Parameter(torch.zeros(groups, dim))
        self.w1 = init(groups, dim, hidden, fan_in=dim)
        self.b1 = nn.Parameter(torch.zeros(groups, 1, hidden))
        self.w2 = init(groups, hidden, width, fan_in=hidden)
        self.b2 = nn.Parameter(torch.zeros(groups, 1, width))
        self.codebook = init(groups, self.code_bits, dim, fan_in=self.code_bits)
        self.bias = nn.Parameter(torch.zeros(groups, 1, dim))
        self.register_buffer("category_bits", _CATEGORY_BITS.clone(), persistent=False)

    category_bits: torch.Tensor

    def _rows(self, tensor: torch.Tensor, layer: int | None) -> torch.Tensor:
        return tensor if layer is None else tensor[layer : layer + 1]

    def logits(self, x: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """(G, N, dim) unit vectors (G = 1 with `layer`) → (G, N, n_cat, 4) category logits."""
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        h = (x - mean) / torch.sqrt(var + 1e-5)
        h = h * self._rows(self.ln_weight, layer)[:, None] + self._rows(self.ln_bias, layer)[:, None]
        h = F.gelu(torch.baddbmm(self._rows(self.b1, layer), h, self._rows(self.w1, layer)))
        out = torch.baddbmm(self._rows(self.b2, layer), h, self._rows(self.w2, layer))
        return out.view(*x.shape[:-1], self.n_cat, 4)

    def options(self, layer: int | None = None) -> torch.Tensor:
        """The four vectors each group can add: (G, n_cat, 4, dim) = category bits · its two rows."""
        rows = self._rows(self.codebook, layer).view(-1, self.n_cat, 2, self.dim)
        return self.category_bits @ rows

    def decode_categories(self, cats: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """(G, N, n_cat) categories → unnormalised bias + Σ_groups option (G, N, dim)."""
        return self.decode_raw(self.bits_from_categories(cats), layer)

    def bits_from_categories(self, cats: torch.Tensor) -> torch.Tensor:
        """(G, N, n_cat) categories → (G, N, code_bits) binary code."""
        return self.category_bits[cats].flatten(-2)

    def decode_raw(self, code: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        return torch.baddbmm(self._rows(self.bias, layer), code.float(), self._rows(self.codebook, layer))

    def refine(self, x: torch.Tensor, cats: torch.Tensor, sweeps: int, layer: int | None = None) -> torch.Tensor:
        """Iterated conditional modes: each group in turn takes the option that best fits what the
        others leave; returns improved categories (G, N, n_cat)."""
        options = self.options(layer)  # (G, n_cat, 4, dim)
        norms = options.pow(2).sum(-1)  # (G, n_cat, 4)
        gather_idx = cats[..., None, None].expand(-1, -1, -1, 1, self.dim)
        chosen_all = options[:, None].expand(-1, x.shape[1], -1, -1, -1).gather(3, gather_idx).squeeze(3)
        residual = x - self._rows(self.bias, layer) - chosen_all.sum(2)  # (G, N, dim)
        if not sweeps:
            return cats.clone()
        # Per group, once: its options, their norms, and twice their transpose (2·t·o = t·(2·o) exactly).
        # Few ops per group matter: the live cache refines a few vectors at a time.
        group_options = options.unbind(1)  # n_cat × (G, 4, dim)
        group_norms = [norm[:, None, :] for norm in norms.unbind(1)]  # n_cat × (G, 1, 4)
        twice = [(2 * option).transpose(1, 2) for option in group_options]  # n_cat × (G, dim, 4)
        index_shape = (*residual.shape[:2], self.dim)
        chosen = list(chosen_all.unbind(2))
        best_per_group: list[torch.Tensor] = list(cats.unbind(2))
        for _ in range(sweeps):
            for group in range(self.n_cat):
                target = residual + chosen[group]
                best = (group_norms[group] - target @ twice[group]).argmin(-1)  # (G, N)
                new = group_options[group].gather(1, best[..., None].expand(index_shape))
                residual = target - new
                chosen[group] = new
                best_per_group[group] = best
        return torch.stack(best_per_group, dim=2)

    def encode(self, x: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """Unit vectors (G, N, dim) → binary codes (G, N, code_bits) as uint8 0/1."""
        with torch.no_grad():
            cats = self.logits(x, layer).argmax(-1)
            if self.refine_sweeps:
                cats = self.refine(x, cats, self.refine_sweeps, layer)
            return self.bits_from_categories(cats).to(torch.uint8)

    def decode(self, code: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """Binary codes (G, N, code_bits) → unit vectors (G, N, dim)."""
        out = self.decode_raw(code, layer)
        unit: torch.Tensor = out / out.norm(dim=-1, keepdim=True).clamp(min=1e-8)
        return unit

    @torch.no_grad()
    def init_scalar(self, x: torch.Tensor) -> torch.Tensor:
        """Start as a uniform scalar quantiser in each layer's principal axes; returns the categories.

        Group g quantises axis g mod dim, as digit g // dim of a base-4 number, so every axis gets
        4^m uniform levels from its m groups (for 2 bits: four levels per axis, 2 bits each).
        """
        g, n, d = x.shape
        mean = x.mean(1, keepdim=True)
        centred = x - mean
        cov = centred.transpose(1, 2) @ centred / n
        _, axes = torch.linalg.eigh(cov)  # ascending: most variance last
        axes = axes.flip(-1)  # (G, d, d), columns
        proj = centred @ axes  # (G, N, d)
        sigma = proj.std(1).clamp(min=1e-6)  # (G, d)
        per_axis = torch.zeros(d, dtype=torch.long)
        for group in range(self.n_cat):
            per_axis[group % d] += 1
        levels = (4**per_axis).float()  # (d,)
        span = torch.where(levels <= 4, torch.tensor(2.0), torch.tensor(2.7)) * 2
        step = sigma * (span / levels)[None, :]  # (G, d)
        rows = torch.zeros(g, self.n_cat, 2, d)
        offset = (mean.squeeze(1)[:, None, :] @ axes).squeeze(1) - (levels - 1) / 2 * step * (per_axis > 0)
        cats = torch.zeros(g, n, self.n_cat, dtype=torch.long)
        start = (x @ axes - offset[:, None, :]) / step.clamp(min=1e-12)[:, None, :]  # in steps, per axis
        for group in range(self.n_cat):
            axis, digit = group % d, group // d
            unit = step[:, axis] * 4**digit
            rows[:, group, 0] = unit[:, None] * axes[:, :, axis]
            rows[:, group, 1] = 2 * unit[:, None] * axes[:, :, axis]
            value = torch.div(start[:, :, axis].round().clamp(0, levels[axis] - 1), 4**digit, rounding_mode="floor") % 4
            cats[:, :, group] = torch.tensor([3, 0, 1, 2])[value.long()]
        self.codebook.copy_(rows.view(g, self.code_bits, d))
        self.bias.copy_(offset[:, None, :] @ axes.transpose(1, 2))
        return cats

    @torch.no_grad()
    def fit_codebook(self, x: torch.Tensor, cats: torch.Tensor, ridge: float = 1e-4) -> None:
        """Least-squares bias and codebook for fixed codes: x ≈ [1, bits]·[bias; E]."""
        bits = self.bits_from_categories(cats)
        design = torch.cat([torch.ones(*bits.shape[:2], 1), bits], dim=-1)  # (G, N, 1 + code_bits)
        gram = design.transpose(1, 2) @ design
        gram = gram + ridge * torch.eye(gram.shape[-1]) * gram.diagonal(dim1=1, dim2=2).mean(-1)[:, None, None]
        solution = torch.linalg.solve(gram, design.transpose(1, 2) @ x)
        self.bias.copy_(solution[:, :1])
        self.codebook.copy_(solution[:, 1:])


def fit_value_codec(
    values: torch.Tensor,
    bits: int = 2,
    rounds: int = 4,
    sweeps: int = 2,
    steps: int = 30,
    batch: int = 1024,
    lr: float = 1e-3,
    hidden: int | None = None,
    seed: int = 0,
) -> ValueCodec:
    """Fit a `ValueCodec` to unit value directions (G, N, dim).

    The codebook starts as a uniform scalar quantiser in principal axes, then `rounds` of
    alternating minimisation (codes by ICM sweeps, codebook by least squares) lower the error;
    finally the encoder learns to predict those codes (cross-entropy, `steps` AdamW steps). At
    the small budgets used on CPUs the encoder's guess is rough and the ICM sweeps at encode
    time do most of the work (starting them from all-zero codes does about as well).
    """
    torch.manual_seed(seed)
    groups, n, dim = values.shape
    codec = ValueCodec(groups, dim, bits, hidden).to(values.device)
    cats = codec.init_scalar(values)
    for _ in range(rounds):
        cats = codec.refine(values, cats, sweeps)
        codec.fit_codebook(values, cats)
    cats = codec.refine(values, cats, sweeps)
    encoder = [codec.ln_weight, codec.ln_bias, codec.w1, codec.b1, codec.w2, codec.b2]
    optimizer = torch.optim.AdamW(encoder, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1))
    for _ in range(steps):
        idx = torch.randint(0, n, (min(batch, n),), device=values.device)
        logits = codec.logits(values[:, idx])
        loss = F.cross_entropy(logits.reshape(-1, 4), cats[:, idx].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        optimizer.step()
        schedule.step()
    codec.refine_sweeps = sweeps
    return codec.eval()


# ----------------------------------------------------------------------------- the cache codec


@dataclass
class CompressedKV:
    """What a CommVQ cache stores for one layer: per (batch, head, token) codes and fp16 norms."""

    key_codes: torch.Tensor  # uint8 (B, H, S, ceil(R · 2 · log2 K / 8)), packed index bits
    key_norms: torch.Tensor  # float16 (B, H, S)
    value_bits: torch.Tensor  # uint8 (B, H, S, ceil(code_bits / 8)), packed bits
    value_norms: torch.Tensor  # float16 (B, H, S)

    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.key_codes, self.key_norms, self.value_bits, self.value_norms)
        )


@dataclass
class CommVQ:
    """Per-layer key codebooks (one per KV head) and value codecs with their channel scales."""

    keys: list[KeyCodebook]  # one per layer, G = KV heads
    values: ValueCodec  # G = layers
    value_scale: torch.Tensor  # (layers, heads, dim): values are divided by it before coding
    head_dim: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return len(self.keys)

    def bytes_per_token(self, kv_heads: int) -> float:
        """Cache bytes per token over all layers: packed key codes + value bits + two fp16 norms per head."""
        key_bits = self.keys[0].bits_per_vector()
        value_bits = self.values.code_bits
        per_head = math.ceil(key_bits / 8) + math.ceil(value_bits / 8) + 2 * 2
        return float(per_head * kv_heads * self.layers)

    # keys -------------------------------------------------------------------------------
    def encode_keys(self, layer: int, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-RoPE keys (B, H, S, d) → bit-packed stage indices uint8 (B, H, S, bytes) and fp16 norms."""
        b, h, s, _ = keys.shape
        norms = keys.float().norm(dim=-1)
        unit = to_pairs(keys.float() / norms[..., None].clamp(min=1e-8))
        grouped = unit.permute(1, 0, 2, 3).reshape(h, b * s, -1)
        book = self.keys[layer]
        codes = book.encode(grouped)  # (H, B*S, R, 2)
        codes = codes.view(h, b, s, -1).permute(1, 0, 2, 3).reshape(b * h * s, -1)
        packed = _pack_bits(_indices_to_bits(codes, _index_bits(book.size)))
        return packed.view(b, h, s, -1), norms.to(torch.float16)

    def decode_keys(
        self,
        layer: int,
        codes: torch.Tensor,
        norms: torch.Tensor,
        positions: torch.Tensor | None = None,
        inv_freq: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Codes → keys (B, H, S, d); with `positions` (S,) and `inv_freq` the keys come out with
        RoPE applied, by rotating the codebook (rotate-then-decode), never the decoded key."""
        b, h, s = norms.shape
        book = self.keys[layer]
        width = _index_bits(book.size)
        flat = _bits_to_indices(_unpack_bits(codes.reshape(b * h * s, -1), book.stages * 2 * width), width)
        grouped = flat.view(b, h, s, book.stages, 2).permute(1, 0, 2, 3, 4).reshape(h, b * s, book.stages, 2)
        if positions is not None:
            if inv_freq is None:
                raise ValueError("decoding with positions needs the RoPE inverse frequencies")
            phase = rope_phase(positions, inv_freq).to(codes.device)  # (S, P)
            book = book.rotated(phase.repeat(b, 1))  # per vector, (H, B*S, R, K, P)
        unit = from_pairs(book.decode(grouped))  # (H, B*S, d)
        unit = unit.view(h, b, s, -1).permute(1, 0, 2, 3)
        return unit * norms.float()[..., None]

    # values -----------------------------------------------------------------------------
    def encode_values(self, layer: int, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (B, H, S, d) → packed code bits uint8 (B, H, S, code_bits/8) and fp16 norms."""
        b, h, s, d = values.shape
        scaled = values.float() / self.value_scale[layer][None, :, None, :]
        norms = scaled.norm(dim=-1)
        unit = (scaled / norms[..., None].clamp(min=1e-8)).reshape(1, -1, d)
        bits = self.values.encode(unit, layer)[0]
        return _pack_bits(bits).view(b, h, s, -1), norms.to(torch.float16)

    def decode_values(self, layer: int, packed: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        b, h, s = norms.shape
        bits = _unpack_bits(packed.reshape(-1, packed.shape[-1]), self.values.code_bits)
        with torch.no_grad():
            unit = self.values.decode(bits[None], layer)[0].view(b, h, s, -1)
        return unit * norms.float()[..., None] * self.value_scale[layer][None, :, None, :]

    def compress(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> CompressedKV:
        key_codes, key_norms = self.encode_keys(layer, keys)
        value_bits, value_norms = self.encode_values(layer, values)
        return CompressedKV(key_codes, key_norms, value_bits, value_norms)

    def decompress(self, layer: int, stored: CompressedKV) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-RoPE keys and values back from what the cache stores."""
        return (
            self.decode_keys(layer, stored.key_codes, stored.key_norms),
            self.decode_values(layer, stored.value_bits, stored.value_norms),
        )


def _pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """(N, nbits) 0/1 → (N, ceil(nbits/8)) uint8."""
    n, nbits = bits.shape
    padded = torch.zeros(n, math.ceil(nbits / 8) * 8, dtype=torch.uint8, device=bits.device)
    padded[:, :nbits] = bits
    weights = (2 ** torch.arange(8, device=bits.device)).to(torch.uint8)
    return (padded.view(n, -1, 8) * weights).sum(-1).to(torch.uint8)


def _unpack_bits(packed: torch.Tensor, nbits: int) -> torch.Tensor:
    shifts = torch.arange(8, device=packed.device)
    return ((packed[..., None] >> shifts) & 1).flatten(-2)[..., :nbits]


def _index_bits(size: int) -> int:
    return max(1, math.ceil(math.log2(size)))


def _indices_to_bits(indices: torch.Tensor, width: int) -> torch.Tensor:
    """(N, M) indices < 2^width → (N, M·width) bits, least significant first."""
    shifts = torch.arange(width, device=indices.device)
    return ((indices[..., None] >> shifts) & 1).flatten(-2).to(torch.uint8)


def _bits_to_indices(bits: torch.Tensor, width: int) -> torch.Tensor:
    weights = 2 ** torch.arange(width, device=bits.device)
    return (bits.view(bits.shape[0], -1, width).long() * weights).sum(-1)


# ----------------------------------------------------------------------------- model glue


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules (with k_proj and v_proj) of a Llama-style model, in order."""
    return [m for m in model.modules() if hasattr(m, "k_proj") and hasattr(m, "v_proj")]


@dataclass
class CalibrationKV:
    """Pre-RoPE keys and values of every layer, (layers, kv_heads, T, d) each."""

    keys: torch.Tensor
    values: torch.Tensor


def collect_kv(model: nn.Module, input_ids: torch.Tensor, head_dim: int) -> CalibrationKV:
    """Run one calibration sample and capture every layer's k_proj / v_proj outputs."""
    layers = attention_layers(model)
    captured: dict[tuple[str, int], torch.Tensor] = {}
    handles = []
    for i, attn in enumerate(layers):
        for kind in ("k_proj", "v_proj"):

            def hook(module: nn.Module, inputs: Any, output: torch.Tensor, key: tuple[str, int] = (kind, i)) -> None:
                captured[key] = output.detach()[0].view(output.shape[1], -1, head_dim).transpose(0, 1).float()

            handles.append(attn.get_submodule(kind).register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=input_ids.reshape(1, -1).to(next(model.parameters()).device))
    finally:
        for handle in handles:
            handle.remove()
    keys = torch.stack([captured[("k_proj", i)] for i in range(len(layers))])
    values = torch.stack([captured[("v_proj", i)] for i in range(len(layers))])
    return CalibrationKV(keys, values)


def fit_commvq(
    calibration: CalibrationKV,
    key_stages: int = 16,
    codebook_size: int = 16,
    em_iters: int = 8,
    value_bits: int = 2,
    value_rounds: int = 4,
    value_sweeps: int = 2,
    value_steps: int = 30,
    value_hidden: int | None = None,
    seed: int = 0,
) -> CommVQ:
    """Learn CommVQ from calibration KV: a key codebook per (layer, KV head), a value codec per
    layer (values divided by their per-channel RMS first, CommVQ's frozen scale)."""
    keys, values = calibration.keys, calibration.values
    n_layers, heads, tokens, dim = keys.shape
    unit_keys = keys / keys.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    pairs = to_pairs(unit_keys).reshape(n_layers * heads, tokens, dim // 2)
    book = fit_key_codebook(pairs, key_stages, codebook_size, em_iters, seed=seed)
    books = [
        KeyCodebook(book.za[i * heads : (i + 1) * heads], book.zb[i * heads : (i + 1) * heads]) for i in range(n_layers)
    ]
    scale = values.pow(2).mean(dim=2).sqrt().clamp(min=1e-6)  # (layers, heads, d)
    scaled = values / scale[:, :, None, :]
    unit = scaled / scaled.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    codec = fit_value_codec(
        unit.reshape(n_layers, heads * tokens, dim),
        value_bits,
        rounds=value_rounds,
        sweeps=value_sweeps,
        steps=value_steps,
        hidden=value_hidden,
        seed=seed,
    )
    return CommVQ(books, codec, scale, dim)


def attach_commvq_(model: nn.Module, commvq: CommVQ) -> Callable[[], None]:
    """Make every attention layer see its keys and values as a CommVQ cache returns them.

    Hooks on k_proj / v_proj replace their outputs (pre-RoPE) by compress-then-decompress; since
    the key codebook commutes with RoPE this equals rotating the stored codes' codebook. Returns
    a function that removes the hooks.
    """
    layers = attention_layers(model)
    if len(layers) != commvq.layers:
        raise ValueError(f"model has {len(layers)} attention layers, CommVQ was fitted on {commvq.layers}")
    dim = commvq.head_dim
    handles = []
    for i, attn in enumerate(layers):

        def key_hook(module: nn.Module, inputs: Any, output: torch.Tensor, layer: int = i) -> torch.Tensor:
            b, s, _ = output.shape
            k = output.view(b, s, -1, dim).transpose(1, 2)
            codes, norms = commvq.encode_keys(layer, k)
            out = commvq.decode_keys(layer, codes, norms)
            return out.transpose(1, 2).reshape(b, s, -1).to(output.dtype)

        def value_hook(module: nn.Module, inputs: Any, output: torch.Tensor, layer: int = i) -> torch.Tensor:
            b, s, _ = output.shape
            v = output.view(b, s, -1, dim).transpose(1, 2)
            packed, norms = commvq.encode_values(layer, v)
            out = commvq.decode_values(layer, packed, norms)
            return out.transpose(1, 2).reshape(b, s, -1).to(output.dtype)

        handles.append(attn.get_submodule("k_proj").register_forward_hook(key_hook))
        handles.append(attn.get_submodule("v_proj").register_forward_hook(value_hook))

    def remove() -> None:
        for handle in handles:
            handle.remove()

    return remove
