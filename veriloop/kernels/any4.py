"""any4 (Elhoushi & Johnson, ICML 2025): learned 4-bit lookup tables, with int4/nf4/fp4 baselines.

Every scheme here stores a weight W (out × in) the same way, so one dequantise-matmul serves them
all: per input group of `group_size` columns a scale s and an offset o, per row a table of
2^bits levels, and per weight a code, with

    W[i, j] ≈ lut[i, code[i, j]] · s[i, g(j)] + o[i, g(j)].

- int4: asymmetric min/max per group, levels 0..15 (o = group min, s = range / 15).
- nf4 / fp4: absmax per group (o = 0), the fixed NormalFloat-4 or E2M1 levels for every row.
- any4 / any3 / any2: absmax per group, and each row learns its own 2^bits levels by weighted
  k-means (Lloyd) on its group-normalised weights. The weight of element (i, j) is
  s[i, g(j)]² · E[x_j²], the squared group scale (which makes the objective the real weight
  error) times the second moment of input channel j from one calibration sample (which makes it
  approximate the output error). k-means starts from the NormalFloat levels of the same bit
  width: from there it can only improve on nf4's normalised error, whereas quantile starts
  converged worse than nf4 on the embedded model (measured here; `veriloop bench kernels` reports it).

`quantize_model_` swaps a model's `nn.Linear` layers for `QuantLinear`, whose forward runs the
Triton dequantise-matmul on CUDA for decode-sized inputs and dequantise-then-`F.linear` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from veriloop.kernels._triton import resolve_impl

Method = Literal["int4", "nf4", "fp4", "any4", "any3", "any2"]
METHODS: tuple[Method, ...] = ("int4", "nf4", "fp4", "any4", "any3", "any2")
BITS: dict[str, int] = {"int4": 4, "nf4": 4, "fp4": 4, "any4": 4, "any3": 3, "any2": 2}

#: bitsandbytes' NormalFloat-4 levels (normal quantiles with an exact zero, scaled to [-1, 1]).
NF4_LEVELS = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)

#: FP4 E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign, scaled to [-1, 1]; −0 repeats 0.
FP4_LEVELS = tuple(v / 6.0 for v in (-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0, 0.5, 1, 1.5, 2, 3, 4, 6))

#: One short, varied calibration sample (prose, code, maths, lists, dialogue), as in any4's
#: `calibrate.py`, written for this project; held-out evaluations must use other text.
CALIBRATION_TEXT = """\
The lighthouse keeper counted the ships each evening and wrote their names in a blue notebook.
When the storm came in October, she lit every lamp and waited until the last boat was home.

def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    \"\"\"Merge overlapping closed intervals and return them sorted.\"\"\"
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged

Q: If 3x + 7 = 22, what is x? A: Subtract 7 from both sides to get 3x = 15, so x = 5.
The derivative of sin(x) * e^x is e^x (sin(x) + cos(x)); integrate by parts to go back.
Shopping list: 2 kg flour, 12 eggs, olive oil, basil, 500 g tomatoes, sea salt.
User: Can you explain what a hash map is?
Assistant: A hash map stores key-value pairs and finds a value from its key in constant time on
average, by hashing the key to a bucket index.
SELECT name, COUNT(*) FROM orders WHERE created_at > '2024-01-01' GROUP BY name ORDER BY 2 DESC;
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
Les enfants jouent dans le jardin pendant que le soleil se couche derrière les collines.
"""


def normal_float_levels(bits: int, offset: float = 0.9677083) -> torch.Tensor:
    """NormalFloat levels for `bits` bits (bitsandbytes' construction): 2^(b-1) positive normal
    quantiles, 2^(b-1) − 1 negative ones and an exact zero, scaled to [-1, 1]."""
    half = 2 ** (bits - 1)
    pos = torch.special.ndtri(torch.linspace(offset, 0.5, half + 1, dtype=torch.float64)[:-1])
    neg = -torch.special.ndtri(torch.linspace(offset, 0.5, half, dtype=torch.float64)[:-1])
    levels = torch.cat([pos, torch.zeros(1, dtype=torch.float64), neg]).sort().values
    return (levels / levels.abs().max()).float()


def _codes_per_byte(bits: int) -> int:
    """Codes are packed 4 to a byte for 2 bits, else 2 to a byte (3-bit codes use a nibble)."""
    return 4 if bits <= 2 else 2


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack (rows, cols) codes < 2^bits into bytes, low bits first."""
    per = _codes_per_byte(bits)
    width = 8 // per
    rows, cols = codes.shape
    padded = torch.zeros(rows, math.ceil(cols / per) * per, dtype=torch.uint8, device=codes.device)
    padded[:, :cols] = codes.to(torch.uint8)
    parts = padded.view(rows, -1, per)
    packed = torch.zeros(rows, parts.shape[1], dtype=torch.uint8, device=codes.device)
    for slot in range(per):
        packed |= parts[:, :, slot] << (slot * width)
    return packed


def unpack_codes(packed: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    """Inverse of `pack_codes`, as int64 indices."""
    per = _codes_per_byte(bits)
    width = 8 // per
    mask = (1 << width) - 1
    slots = [(packed >> (slot * width)) & mask for slot in range(per)]
    return torch.stack(slots, dim=-1).reshape(packed.shape[0], -1)[:, :cols].long()


@dataclass
class QuantizedWeight:
    """A quantised matrix: packed codes, per-row levels, per-group scale and offset."""

    codes: torch.Tensor  # uint8 (out, ceil(in / codes_per_byte))
    lut: torch.Tensor  # float32 (out, 2**bits)
    scale: torch.Tensor  # float32 (out, n_groups)
    offset: torch.Tensor  # float32 (out, n_groups)
    in_features: int
    group_size: int
    bits: int
    method: str

    @property
    def out_features(self) -> int:
        return int(self.codes.shape[0])

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The reference dequantisation: lut[i, code] · scale + offset, group by group."""
        codes = unpack_codes(self.codes, self.bits, self.in_features)
        levels = self.lut.gather(1, codes)
        scale = self.scale.repeat_interleave(self.group_size, dim=1)[:, : self.in_features]
        offset = self.offset.repeat_interleave(self.group_size, dim=1)[:, : self.in_features]
        return (levels * scale + offset).to(dtype)

    def nbytes(self) -> int:
        """Storage in bytes: codes, tables, scales and offsets (offsets are zero for symmetric schemes)."""
        tensors = [self.codes, self.lut, self.scale]
        if self.method == "int4":
            tensors.append(self.offset)
        return sum(t.numel() * t.element_size() for t in tensors)

    def to(self, device: torch.device | str) -> QuantizedWeight:
        return QuantizedWeight(
            self.codes.to(device),
            self.lut.to(device),
            self.scale.to(device),
            self.offset.to(device),
            self.in_features,
            self.group_size,
            self.bits,
            self.method,
        )


def _grouped(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """(out, in) → (out, n_groups, group_size), padding the ragged last group with zeros."""
    out_f, in_f = weight.shape
    n_groups = math.ceil(in_f / group_size)
    padded = torch.zeros(out_f, n_groups * group_size, dtype=torch.float32, device=weight.device)
    padded[:, :in_f] = weight.float()
    return padded.view(out_f, n_groups, group_size)


def _nearest(values: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Index of the nearest level per value; `levels` (rows, K) sorted ascending, `values` (rows, C)."""
    bounds = (levels[:, 1:] + levels[:, :-1]) / 2
    return torch.searchsorted(bounds.contiguous(), values.contiguous())


def weighted_kmeans_1d(
    values: torch.Tensor, weights: torch.Tensor, init: torch.Tensor, iters: int = 20
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's algorithm on each row's scalars at once: minimises Σ_j w_j (x_j − c[code_j])² per row.

    `values`, `weights` (rows, C); `init` (K,) or (rows, K). Returns sorted levels (rows, K)
    and codes (rows, C). In one dimension each cluster is a run of the sorted values, so after
    one sort and two prefix sums an iteration costs O(K log C) per row instead of O(C): the
    cluster edges come from a binary search of the midpoints between levels. A level that
    loses all its members keeps its place.
    """
    rows, cols = values.shape
    levels = (init if init.dim() == 2 else init.expand(rows, -1)).to(values).clone()
    ordered, order = values.sort(dim=1)
    ordered_w = weights.gather(1, order).double()
    zero = torch.zeros(rows, 1, dtype=torch.float64, device=values.device)
    mass_prefix = torch.cat([zero, ordered_w.cumsum(1)], dim=1)
    moment_prefix = torch.cat([zero, (ordered_w * ordered.double()).cumsum(1)], dim=1)
    full = torch.full((rows, 1), cols, dtype=torch.long, device=values.device)
    edges: torch.Tensor | None = None
    for _ in range(iters):
        bounds = ((levels[:, 1:] + levels[:, :-1]) / 2).contiguous()
        inner = torch.searchsorted(ordered, bounds, right=True)
        new_edges = torch.cat([torch.zeros_like(full), inner, full], dim=1)
        if edges is not None and torch.equal(new_edges, edges):
            break
        edges = new_edges
        mass = mass_prefix.gather(1, edges[:, 1:]) - mass_prefix.gather(1, edges[:, :-1])
        moment = moment_prefix.gather(1, edges[:, 1:]) - moment_prefix.gather(1, edges[:, :-1])
        updated = (moment / mass.clamp(min=1e-300)).to(levels.dtype)
        levels = torch.where(mass > 0, updated, levels).sort(dim=1).values
    return levels, _nearest(values, levels)


def quantize_weight(
    weight: torch.Tensor,
    method: Method = "any4",
    group_size: int = 128,
    input_second_moment: torch.Tensor | None = None,
    iters: int = 20,
) -> QuantizedWeight:
    """Quantise one (out, in) matrix with `method`; `input_second_moment` (in,) = E[x_j²] from
    calibration weights the any-k k-means (uniform when None; ignored by the fixed schemes)."""
    if method not in BITS:
        raise ValueError(f"unknown quantisation method {method!r}; choose one of {', '.join(METHODS)}")
    if group_size < 1:
        raise ValueError("group_size must be positive")
    out_f, in_f = weight.shape
    bits = BITS[method]
    groups = _grouped(weight, group_size)
    valid = torch.zeros(groups.shape[1] * group_size, dtype=torch.bool, device=weight.device)
    valid[:in_f] = True
    valid = valid.view(1, -1, group_size)
    if method == "int4":
        low = groups.masked_fill(~valid, math.inf).amin(dim=2)
        high = groups.masked_fill(~valid, -math.inf).amax(dim=2)
        scale = ((high - low) / 15).clamp(min=1e-12)
        offset = low
        normalised = ((groups - offset[..., None]) / scale[..., None]).reshape(out_f, -1)[:, :in_f]
        lut = torch.arange(16, dtype=torch.float32, device=weight.device).expand(out_f, -1).contiguous()
        codes = normalised.round().clamp(0, 15).long()
    else:
        scale = groups.abs().amax(dim=2).clamp(min=1e-12)
        offset = torch.zeros_like(scale)
        normalised = (groups / scale[..., None]).reshape(out_f, -1)[:, :in_f]
        if method == "nf4":
            levels = torch.tensor(NF4_LEVELS, device=weight.device)
        elif method == "fp4":
            levels = torch.tensor(FP4_LEVELS, device=weight.device)
        else:
            levels = normal_float_levels(bits).to(weight.device)
        lut = levels.expand(out_f, -1).contiguous()
        if method.startswith("any"):
            sample = scale.repeat_interleave(group_size, dim=1)[:, :in_f] ** 2
            if input_second_moment is not None:
                sample = sample * input_second_moment.to(sample).clamp(min=1e-12)[None, :]
            lut, codes = weighted_kmeans_1d(normalised, sample, levels, iters=iters)
        else:
            codes = _nearest(normalised, lut)
    return QuantizedWeight(
        codes=pack_codes(codes, bits),
        lut=lut.float().contiguous(),
        scale=scale.float().contiguous(),
        offset=offset.float().contiguous(),
        in_features=in_f,
        group_size=group_size,
        bits=bits,
        method=method,
    )


#: Rows of activations up to which `dequant_matmul(impl="auto")` uses the Triton kernel on CUDA.
TRITON_MAX_ROWS = 16


def dequant_matmul(
    x: torch.Tensor, qweight: QuantizedWeight, bias: torch.Tensor | None = None, impl: str = "auto"
) -> torch.Tensor:
    """y = x · dequant(W)ᵀ + b; `impl` torch (dequantise, then `F.linear`), triton, or auto.

    auto takes the Triton kernel on CUDA for decode-sized inputs (at most `TRITON_MAX_ROWS`
    rows), where W is never materialised; for prefill-sized inputs dequantising once and
    calling cuBLAS was 5 to 70 times faster on an H200 than this straightforward kernel.
    """
    chosen = resolve_impl(impl, x)
    if impl == "auto" and x.reshape(-1, x.shape[-1]).shape[0] > TRITON_MAX_ROWS:
        chosen = "torch"
    if chosen == "triton":
        from veriloop.kernels import _any4_triton

        return _any4_triton.dequant_matmul(x, qweight, bias)
    return F.linear(x, qweight.dequantize(x.dtype), bias)


class QuantLinear(nn.Module):
    """A drop-in `nn.Linear` whose weight lives as a `QuantizedWeight` (buffers move with `.to`)."""

    codes: torch.Tensor
    lut: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor

    def __init__(self, qweight: QuantizedWeight, bias: torch.Tensor | None = None, impl: str = "auto") -> None:
        super().__init__()
        self.in_features = qweight.in_features
        self.out_features = qweight.out_features
        self.group_size = qweight.group_size
        self.bits = qweight.bits
        self.method = qweight.method
        self.impl = impl
        self.register_buffer("codes", qweight.codes)
        self.register_buffer("lut", qweight.lut)
        self.register_buffer("scale", qweight.scale)
        self.register_buffer("offset", qweight.offset)
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False) if bias is not None else None
        self.dense: torch.Tensor | None = None

    def materialize_(self, dtype: torch.dtype = torch.float32) -> None:
        """Keep a dequantised copy for `forward`: the quantised model's outputs at dense-matmul speed.

        For CPU inference, where no fused kernel exists and dequantising every weight on every
        decode step made generation about 15 times slower; it gives up the memory saving.
        """
        self.dense = self.qweight.dequantize(dtype).contiguous()

    @property
    def qweight(self) -> QuantizedWeight:
        return QuantizedWeight(
            self.codes,
            self.lut,
            self.scale,
            self.offset,
            self.in_features,
            self.group_size,
            self.bits,
            self.method,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            return F.linear(x, self.dense.to(x.dtype), self.bias)
        return dequant_matmul(x, self.qweight, self.bias, impl=self.impl)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"method={self.method}, group_size={self.group_size}"
        )


def collect_input_second_moments(
    model: nn.Module, run: Callable[[], object], names: Iterable[str] | None = None
) -> dict[str, torch.Tensor]:
    """E[x_j²] per input channel of each `nn.Linear` (all, or those in `names`) while `run()` runs the model."""
    wanted = set(names) if names is not None else None
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    handles = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or (wanted is not None and name not in wanted):
            continue

        def hook(mod: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor, key: str = name) -> None:
            flat = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()
            sums[key] = sums.get(key, 0) + flat.pow(2).sum(dim=0)
            counts[key] = counts.get(key, 0) + flat.shape[0]

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return {name: sums[name] / counts[name] for name in sums}


def calibration_moments(model: nn.Module, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run one calibration sample (token ids, (1, T) or (T,)) and return E[x²] per linear layer."""
    ids = input_ids.reshape(1, -1)
    device = next(model.parameters()).device
    return collect_input_second_moments(model, lambda: model(input_ids=ids.to(device)))


def linear_layers(model: nn.Module, skip: Iterable[str] = ("lm_head",)) -> list[tuple[str, nn.Linear]]:
    """The model's `nn.Linear` layers whose name has no part in `skip` (the tied lm_head stays)."""
    skipped = tuple(skip)
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not any(part in name.split(".") for part in skipped)
    ]


@dataclass
class QuantReport:
    """What `quantize_model_` did: layers and parameters swapped, the weight error and the bytes."""

    method: str
    layers: int
    parameters: int
    squared_error: float
    squared_norm: float
    bytes_quantized: int
    bytes_fp32: int

    @property
    def relative_mse(self) -> float:
        """Σ(W − Ŵ)² / ΣW² over all quantised layers."""
        return self.squared_error / max(self.squared_norm, 1e-30)

    @property
    def mse(self) -> float:
        return self.squared_error / max(self.parameters, 1)


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def quantize_model_(
    model: nn.Module,
    method: Method = "any4",
    group_size: int = 128,
    calibration: torch.Tensor | Mapping[str, torch.Tensor] | None = None,
    skip: Iterable[str] = ("lm_head",),
    iters: int = 20,
    impl: str = "auto",
) -> QuantReport:
    """Replace the model's linear layers (except `skip`) by `QuantLinear`s, in place.

    `calibration` is one sample's token ids (run through the model first), or E[x²] per layer
    name from `calibration_moments`, or None (uniform k-means weights). Only any-k methods use it.
    """
    layers = linear_layers(model, skip)
    moments: Mapping[str, torch.Tensor] = {}
    if method.startswith("any") and calibration is not None:
        moments = calibration if isinstance(calibration, Mapping) else calibration_moments(model, calibration)
    report = QuantReport(method, 0, 0, 0.0, 0.0, 0, 0)
    for name, layer in layers:
        weight = layer.weight.detach()
        qweight = quantize_weight(weight, method, group_size, moments.get(name), iters=iters)
        error = (qweight.dequantize() - weight.float()).pow(2).sum().item()
        report.layers += 1
        report.parameters += weight.numel()
        report.squared_error += error
        report.squared_norm += weight.float().pow(2).sum().item()
        report.bytes_quantized += qweight.nbytes()
        report.bytes_fp32 += weight.numel() * 4
        _set_module(model, name, QuantLinear(qweight, layer.bias, impl=impl).to(weight.device))
    return report
