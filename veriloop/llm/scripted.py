"""The decode step's layers as one TorchScript call: the same operations, without the GIL.

A decode step of the embedded model is about 1,500 small tensor operations (norms, rotary
embedding, cache writes, attention, the fp16 products). Called from Python, each one takes the
GIL for its argument parsing, so batcher replicas (threads, one per core) queue for it and a step
on two replicas costs far more than a step alone. Scripted, the layer loop runs in TorchScript's
interpreter, which does not hold the GIL while it runs the graph and parses no Python arguments:
replicas step in parallel and each operation costs less.

`ScriptedLayers` covers what the packed forward runs on its hot path: decode-only steps over a
`SlotKVCache`, with every projection an fp16 `HalfWeightLinear` and a SiLU-gated MLP. It is built
from the packed forward's own pieces and runs the same operations in the same order (no fusion:
the profiling executor's fusers are off for CPU), so its logits equal the Python path's bit for
bit; the tests compare them. Anything else (prefill chunks, CommVQ, LoRA or quantized modules,
float32 weights) stays on the Python path.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
import torch.nn.functional as F


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm, operation for operation (float32 statistics, weight applied after)."""
    dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(dtype)


class _Layer(torch.nn.Module):
    """One decoder layer of a decode-only step; the packed forward's loop body."""

    def __init__(self, layer: Any, packed: list[Any], kv_heads: int, group: int, head_dim: int, scale: float) -> None:
        super().__init__()
        attn = layer.self_attn
        self.input_norm = layer.input_layernorm.weight.detach()  # the norms' own storage: updates in place show
        self.post_norm = layer.post_attention_layernorm.weight.detach()
        self.input_eps = float(layer.input_layernorm.variance_epsilon)
        self.post_eps = float(layer.post_attention_layernorm.variance_epsilon)
        self.qkv, self.o, self.gate_up, self.down = packed
        self.q_size = int(attn.q_proj.out_features)
        self.kv_size = int(attn.k_proj.out_features)
        self.intermediate = int(layer.mlp.gate_proj.out_features)
        self.kv_heads, self.group, self.head_dim, self.scale = kv_heads, group, head_dim, scale

    def forward(
        self,
        x: torch.Tensor,
        q_cos: torch.Tensor,
        q_sin: torch.Tensor,
        k_cos: torch.Tensor,
        k_sin: torch.Tensor,
        keys_buffer: torch.Tensor,
        values_buffer: torch.Tensor,
        slots: torch.Tensor,
        columns: torch.Tensor,
        mask: torch.Tensor,
        decode_slots: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
    ) -> torch.Tensor:
        n = x.shape[0]
        h = _rms_norm(x, self.input_norm, self.input_eps)
        qkv = torch.ops.quantized.linear_dynamic_fp16(h.contiguous(), self.qkv)
        q, keys, values = torch.split(qkv, [self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(n, self.kv_heads, self.group, self.head_dim)
        keys = keys.reshape(n, self.kv_heads, self.head_dim)
        values = values.reshape(n, self.kv_heads, self.head_dim)
        q = q * q_cos + _rotate_half(q) * q_sin
        rotated = keys * k_cos + _rotate_half(keys) * k_sin
        keys_buffer[slots, :, columns] = rotated.to(keys_buffer.dtype)
        values_buffer[slots, :, columns] = values.to(values_buffer.dtype)
        cached_keys = keys_buffer[:used, :, :longest]
        cached_values = values_buffer[:used, :, :longest]
        if in_order:
            full = q
        else:
            full = q.new_zeros([used, self.kv_heads, self.group, self.head_dim])
            full[decode_slots] = q
        out = F.scaled_dot_product_attention(full, cached_keys, cached_values, attn_mask=mask, scale=self.scale)
        if not in_order:
            out = out[decode_slots]
        attended = torch.ops.quantized.linear_dynamic_fp16(out.reshape(n, -1).contiguous(), self.o)
        x = x + attended
        h = _rms_norm(x, self.post_norm, self.post_eps)
        gate_up = torch.ops.quantized.linear_dynamic_fp16(h.contiguous(), self.gate_up)
        gate, up = torch.split(gate_up, [self.intermediate, self.intermediate], dim=-1)
        mlp: torch.Tensor = torch.ops.quantized.linear_dynamic_fp16((F.silu(gate) * up).contiguous(), self.down)
        return x + mlp


class _Stack(torch.nn.Module):
    def __init__(self, layers: list[_Layer]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(
        self,
        x: torch.Tensor,
        q_cos: torch.Tensor,
        q_sin: torch.Tensor,
        k_cos: torch.Tensor,
        k_sin: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        slots: torch.Tensor,
        columns: torch.Tensor,
        mask: torch.Tensor,
        decode_slots: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
    ) -> torch.Tensor:
        index = 0  # TorchScript unrolls a ModuleList loop but has no enumerate over one
        for layer in self.layers:
            x = layer(
                x, q_cos, q_sin, k_cos, k_sin, keys[index], values[index],
                slots, columns, mask, decode_slots, used, longest, in_order,
            )  # fmt: skip
            index += 1  # noqa: SIM113
        return x


log = logging.getLogger(__name__)


def _silu(module: Any) -> bool:
    """nn.SiLU or transformers' SiLUActivation (whose forward is `F.silu`)."""
    return isinstance(module, torch.nn.SiLU) or type(module).__name__ == "SiLUActivation"


def _rms(module: Any) -> bool:
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and isinstance(getattr(module, "variance_epsilon", None), float)


class ScriptedLayers:
    """The decoder layers of a decode-only step, scripted; rebuilt whenever a weight changes."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self._stack: Any = None
        self._key: tuple[Any, ...] | None = None
        self.builds = 0
        """How often the layers were scripted (once, and again after each weight change)."""
        self.current()

    @classmethod
    def build(cls, decoder: Any) -> ScriptedLayers | None:
        """The scripted layers of `decoder`, or None where they do not apply or TorchScript cannot script them."""
        if not cls.applies_to(decoder):
            return None
        try:
            return cls(decoder)
        except Exception as error:  # TorchScript needs the sources and may leave torch one day: keep the Python loop
            log.warning("decode steps stay in Python: TorchScript could not script the layers (%s)", error)
            return None

    @staticmethod
    def applies_to(decoder: Any) -> bool:
        """Whether every layer has fp16 fused products, a SiLU-gated MLP and RMS norms (what `_Layer` runs)."""
        return all(
            linears.half_parts() is not None
            and _silu(getattr(layer.mlp, "act_fn", None))
            and _rms(layer.input_layernorm)
            and _rms(layer.post_attention_layernorm)
            for layer, linears in zip(decoder.layers, decoder.linears, strict=True)
        )

    def _packed(self) -> list[list[Any]]:
        parts = [linears.half_parts() for linears in self.decoder.linears]
        return [[part.packed() for part in layer_parts] for layer_parts in parts if layer_parts is not None]

    def current(self) -> Any:
        """The scripted stack over the weights as they are now (packs are checked as the Python path does)."""
        packed = self._packed()
        norms = [
            _weight_key(tensor)
            for layer in self.decoder.layers
            for tensor in (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
        ]
        key = (tuple(id(part) for layer in packed for part in layer), tuple(norms))
        if self._stack is None or key != self._key:
            decoder = self.decoder
            layers = [
                _Layer(layer, parts, decoder.kv_heads, decoder.group, decoder.head_dim, decoder.scale)
                for layer, parts in zip(decoder.layers, packed, strict=True)
            ]
            with warnings.catch_warnings():
                # Deprecated in favour of torch.compile/export, neither of which runs a step without the GIL
                # on the CPU without a C++ toolchain; `build` falls back to the Python loop if it ever goes.
                warnings.simplefilter("ignore", DeprecationWarning)
                self._stack = torch.jit.script(_Stack(layers))
            self._key = key
            self.builds += 1
        return self._stack


def _weight_key(tensor: torch.Tensor) -> tuple[int, int]:
    try:
        version = int(tensor._version)
    except RuntimeError:
        version = 0
    return (tensor.data_ptr(), version)
