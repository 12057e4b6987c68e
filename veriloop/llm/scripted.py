"""A step's decoder layers as one TorchScript call: the same operations, without the GIL.

A step of the embedded model is about 1,500 tensor operations (norms, rotary embedding, cache
writes, attention, the low-precision products), most of them tiny in a decode step. Called from Python,
each one takes the GIL for its argument parsing, so batcher replicas (threads, one per core)
queue for it: two replicas stepping together took twice as long per step as one alone (measured:
1 row, 22 ms alone, 42 ms each as two threads). Scripted, the layer loop runs in TorchScript's
interpreter, which does not hold the GIL while it runs the graph and parses no Python arguments:
replicas step in parallel (21 ms each) and each operation costs less (17.7 ms alone).

`ScriptedLayers` covers the steps the batcher runs over a `SlotKVCache` (decoding rows, prefill
chunks, or both) when every projection is a fused product (`FusedLinear`: fp16 or bf16 weight copies)
and the MLP is SiLU-gated. It
runs the Python path's operations in the same order, attention through the very functions
`SlotKVCache` calls (`slot_decode_attention`, `slot_chunk_attention`), with no fusion (TorchScript's
fusers are off on the CPU), so its logits and cache writes equal the Python path's bit for bit; the
tests compare them. Anything else (CommVQ's cache, LoRA or quantized modules, float32 weights) stays on the
Python path, which is also the fall-back if TorchScript cannot script the layers.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from veriloop.llm.kv_cache import slot_chunk_attention, slot_decode_attention


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Llama's rotate-half: (x1, x2) -> (-x2, x1) over the last dimension's halves."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm, operation for operation (float32 statistics, weight applied after)."""
    dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(dtype)


class SdpaDecodeAttention(torch.nn.Module):
    """Decoding rows' attention by PyTorch's kernel over the slots' buffers, masked to each row's columns."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        decode_slots: torch.Tensor,
        row_lengths: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
    ) -> torch.Tensor:
        return slot_decode_attention(q, keys, values, mask, decode_slots, used, longest, in_order, self.scale)


class KernelAttention(SdpaDecodeAttention):
    """Every token's attention by the C++ loop (`veriloop.kernels.cpu_attention`): token i over the columns
    [0, lengths[i]) of slot slots[i], so decoding rows and prompt chunks go in one call (`whole_step`).

    A subclass with its own `forward`, not a flag in one module: TorchScript compiles every branch, and the
    kernel's operator exists only where it was built.
    """

    whole_step = True

    def forward(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        slots: torch.Tensor,
        lengths: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
    ) -> torch.Tensor:
        out: torch.Tensor = torch.ops.veriloop_cpu.decode_attention(q, keys, values, slots, lengths, self.scale)
        return out


class _Layer(torch.nn.Module):
    """One decoder layer of a step; the packed forward's loop body over a `SlotKVCache`."""

    def __init__(
        self,
        layer: Any,
        products: list[torch.nn.Module],
        attend: torch.nn.Module,
        kv_heads: int,
        group: int,
        head_dim: int,
        scale: float,
    ) -> None:
        super().__init__()
        attn = layer.self_attn
        self.input_norm = layer.input_layernorm.weight.detach()  # the norms' own storage: updates in place show
        self.post_norm = layer.post_attention_layernorm.weight.detach()
        self.input_eps = float(layer.input_layernorm.variance_epsilon)
        self.post_eps = float(layer.post_attention_layernorm.variance_epsilon)
        self.qkv, self.o, self.gate_up, self.down = products  # each (x (n, in), decoding rows) -> float32 (n, out)
        self.attend = attend  # the decoding rows' attention, or (`whole_step`) every token's
        self.whole_step = bool(getattr(attend, "whole_step", False))
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
        attending: torch.Tensor,
        lengths: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
        decode: int,
        chunks: list[tuple[int, int, int, int]],
    ) -> torch.Tensor:
        """`attending`, `lengths`: what `attend` reads, the decoding rows' slots (SDPA, with `mask`), or every token's
        slot and column count (the kernel, `whole_step`)."""
        n = x.shape[0]
        h = _rms_norm(x, self.input_norm, self.input_eps)
        qkv = self.qkv(h, decode)
        q, keys, values = torch.split(qkv, [self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(n, self.kv_heads, self.group, self.head_dim)
        keys = keys.reshape(n, self.kv_heads, self.head_dim)
        values = values.reshape(n, self.kv_heads, self.head_dim)
        q = q * q_cos + rotate_half(q) * q_sin
        rotated = keys * k_cos + rotate_half(keys) * k_sin
        keys_buffer[slots, :, columns] = rotated.to(keys_buffer.dtype)
        values_buffer[slots, :, columns] = values.to(values_buffer.dtype)
        if self.whole_step or decode == n:
            out = self.attend(q, keys_buffer, values_buffer, mask, attending, lengths, used, longest, in_order)
        else:
            out = torch.empty_like(q)
            if decode > 0:
                out[:decode] = self.attend(
                    q[:decode], keys_buffer, values_buffer, mask, attending, lengths, used, longest, in_order
                )
            for slot, start, count, offset in chunks:
                out[offset : offset + count] = slot_chunk_attention(
                    q[offset : offset + count], keys_buffer, values_buffer, slot, start, count, self.scale
                )
        attended = self.o(out.reshape(n, -1), decode)
        x = x + attended
        h = _rms_norm(x, self.post_norm, self.post_eps)
        gate_up = self.gate_up(h, decode)
        gate, up = torch.split(gate_up, [self.intermediate, self.intermediate], dim=-1)
        mlp: torch.Tensor = self.down(F.silu(gate) * up, decode)
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
        attending: torch.Tensor,
        lengths: torch.Tensor,
        used: int,
        longest: int,
        in_order: bool,
        decode: int,
        chunks: list[tuple[int, int, int, int]],
    ) -> torch.Tensor:
        index = 0  # TorchScript unrolls a ModuleList loop but has no enumerate over one
        for layer in self.layers:
            x = layer(
                x, q_cos, q_sin, k_cos, k_sin, keys[index], values[index],
                slots, columns, mask, attending, lengths, used, longest, in_order, decode, chunks,
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
    """The decoder layers of a step, scripted; rebuilt whenever a weight changes.

    Every step first checks that each weight and bias the layers read is still the tensor it was, at
    the version it was: one pass over a flat list, because a check per product (as the Python path
    makes) held the GIL for milliseconds a step.
    """

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self._stack: Any = None
        self._watched: list[tuple[dict[str, Any], str]] = []
        for layer, linears in zip(decoder.layers, decoder.linears, strict=True):
            modules = [module for part in linears.fused_parts() for module in part.modules]
            for module in [*modules, layer.input_layernorm, layer.post_attention_layernorm]:
                parameters = module._parameters
                self._watched += [(parameters, name) for name in ("weight", "bias") if name in parameters]
        self._seen: list[tuple[Any, int | None]] = []
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
        """Whether every layer has fused products, a SiLU-gated MLP and RMS norms (what `_Layer` runs)."""
        return all(
            linears.fused_parts() is not None
            and _silu(getattr(layer.mlp, "act_fn", None))
            and _rms(layer.input_layernorm)
            and _rms(layer.post_attention_layernorm)
            for layer, linears in zip(decoder.layers, decoder.linears, strict=True)
        )

    def _unchanged(self) -> bool:
        for (parameters, name), (tensor, version) in zip(self._watched, self._seen, strict=True):
            now = parameters[name]
            if now is not tensor or (version is not None and now._version != version):
                return False
        return bool(self._seen)

    def current(self) -> Any:
        """The scripted stack over the weights as they are now."""
        if self._stack is not None and self._unchanged():
            return self._stack
        decoder = self.decoder
        # product() repacks a part whose weights changed
        products = [[part.product() for part in linears.fused_parts()] for linears in decoder.linears]
        attention = KernelAttention if decoder.attention_kernel else SdpaDecodeAttention
        layers = [
            _Layer(
                layer, parts, attention(decoder.scale), decoder.kv_heads, decoder.group, decoder.head_dim, decoder.scale
            )
            for layer, parts in zip(decoder.layers, products, strict=True)
        ]
        with warnings.catch_warnings():
            # Deprecated in favour of torch.compile/export, neither of which runs a step without the GIL
            # on the CPU without a C++ toolchain; `build` falls back to the Python loop if it ever goes.
            warnings.simplefilter("ignore", DeprecationWarning)
            self._stack = torch.jit.script(_Stack(layers))
        self._seen = [(parameters[name], _version(parameters[name])) for parameters, name in self._watched]
        self.builds += 1
        return self._stack


def _version(tensor: torch.Tensor | None) -> int | None:
    """The in-place version counter; None for no tensor or an inference tensor (which has none)."""
    if tensor is None:
        return None
    try:
        return int(tensor._version)
    except RuntimeError:
        return None
