"""One forward over a step's packed tokens: the decoding rows' last tokens and the prompt chunks being prefilled.

Hugging Face's forward takes a rectangle (batch, length); a step that mixes one token for each of
eight decoding rows with a 128-token chunk of a joining prompt is not one. So the batcher runs the
model's own modules (embeddings, norms, projections, MLPs, rotary embedding, lm_head) over the
tokens flattened to (N, hidden): the linear layers, nearly all of the work, see every token of
the step at once, and only attention is split, per the cache's layout (see `kv_cache`). Logits
are computed only where a token is chosen: one per decoding row and one per prompt whose prefill
ends in this step.

On the CPU the output projection (lm_head, 49k x 576 for the embedded model: a fifth of the
model's multiply-adds per token and 113 MB) is called through `RowAdaptiveLinear`: a general
matrix product with a few rows and a weight that large spends most of its time repacking the
weight (measured here: 8 rows cost 6 to 7 times one row), so from two rows on it multiplies by a
copy prepacked once by oneDNN (8 rows then cost about 3 times one row), while one row keeps the
plain matrix-vector product, which streams the weight best.

With `weights="float16"` every plain float32 Linear of the decoder (q/k/v fused into one product,
gate/up into another, o, down, lm_head) multiplies by an fp16 copy of its weight prepacked for
FBGEMM (`HalfWeightLinear`; activations and accumulation stay float32). MKL's float32 products
run far below the core's peak here at 1 to 16 rows, while FBGEMM's fp16-weight kernel halves the
bytes read and keeps its small-batch kernels busy: measured here, 576x3072 at 8 rows 1.7 ms ->
0.42 ms, the 49k-row output projection at 8 rows 61 ms -> 17 ms. The rounding of the weights to
fp16 (relative error about 2e-4) is what `veriloop bench llm` measures under `numerics`.

Supported: Llama-style decoders (`llama`, `mistral` without a sliding window, `qwen2` without a
sliding window), including layers replaced by quantized or LoRA modules, since modules are called,
not their weights read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from veriloop.errors import BackendError
from veriloop.llm.kv_cache import KVStore, SlotKVCache, StepLayout, decode_mask
from veriloop.llm.scripted import ScriptedLayers, rotate_half

SUPPORTED = ("llama", "mistral", "qwen2")

LinearWeights = Literal["float32", "float16"]
"""Weights the packed forward's linear layers multiply by on the CPU (activations stay float32)."""


def _mkldnn_linear_available() -> bool:
    mkldnn = getattr(torch.ops, "mkldnn", None)
    try:
        return bool(
            torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
            and mkldnn is not None
            and hasattr(mkldnn, "_reorder_linear_weight")
            and hasattr(mkldnn, "_linear_pointwise")
        )
    except (AttributeError, RuntimeError):
        return False


def _plain_cpu_linear(module: Any) -> bool:
    """A plain float32 `nn.Linear` on the CPU: the only kind the prepacked paths below replace."""
    return (
        type(module) is torch.nn.Linear and module.weight.device.type == "cpu" and module.weight.dtype == torch.float32
    )


def _weight_key(tensor: torch.Tensor | None) -> tuple[int, int]:
    """Which tensor, at which in-place version: a packed copy made under another key is stale."""
    if tensor is None:
        return (0, 0)
    try:
        version = int(tensor._version)
    except RuntimeError:  # an inference tensor has no version counter (and cannot be updated in place)
        version = 0
    return (tensor.data_ptr(), version)


class RowAdaptiveLinear:
    """A float32 CPU `nn.Linear` that multiplies `min_rows` rows or more by a oneDNN-prepacked weight.

    The packed copy is made on first use and again whenever the module's weight changes (another
    tensor, or an in-place update), so it never serves stale weights. Fewer rows use the module.
    """

    def __init__(self, module: torch.nn.Linear, min_rows: int = 2, rows_hint: int = 8) -> None:
        self.module = module
        self.min_rows = min_rows
        self.rows_hint = rows_hint
        self._packed: torch.Tensor | None = None
        self._key: tuple[int, int] | None = None

    @staticmethod
    def applies_to(module: Any) -> bool:
        """Whether `module` is a plain float32 CPU Linear and oneDNN's packed linear is available."""
        return _plain_cpu_linear(module) and _mkldnn_linear_available()

    def packed_weight(self) -> torch.Tensor:
        weight = self.module.weight
        key = _weight_key(weight)
        if self._packed is None or key != self._key:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), self.rows_hint)
            self._key = key
        return self._packed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[0] < self.min_rows:
            result: torch.Tensor = self.module(x)
            return result
        packed: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), self.packed_weight(), self.module.bias, "none", [], ""
        )
        return packed


def _fbgemm_fp16_available() -> bool:
    quantized = getattr(torch.ops, "quantized", None)
    try:
        return (
            quantized is not None
            and hasattr(quantized, "linear_prepack_fp16")
            and hasattr(quantized, "linear_dynamic_fp16")
            and any(engine in torch.backends.quantized.supported_engines for engine in ("fbgemm", "x86"))
        )
    except (AttributeError, RuntimeError):
        return False


class HalfWeightLinear:
    """Float32 CPU Linears that read the same input, run as one product by an fp16 copy of their weights.

    The copy is prepacked for FBGEMM (`quantized::linear_prepack_fp16`) when made and again
    whenever a weight or bias changes (another tensor, or an in-place update), so it never serves
    stale weights. Returns one output per module, in order. The fp16 copies cost half the float32
    weights' memory; the modules keep their float32 weights for everything else.
    """

    def __init__(self, modules: Sequence[torch.nn.Linear]) -> None:
        if not modules:
            raise ValueError("at least one Linear")
        self.modules = list(modules)
        self.splits = [int(module.out_features) for module in self.modules]
        self._packed: Any = None
        self._key: tuple[tuple[int, int], ...] | None = None
        self.packed()  # now, not in the first step (packing the whole model takes a second or two)

    @staticmethod
    def applies_to(modules: Sequence[Any]) -> bool:
        """Whether all `modules` are plain float32 CPU Linears with one input size, and FBGEMM is in this torch."""
        return (
            bool(modules)
            and all(_plain_cpu_linear(module) for module in modules)
            and len({int(module.in_features) for module in modules}) == 1
            and _fbgemm_fp16_available()
        )

    def packed(self) -> Any:
        key = tuple(_weight_key(part) for module in self.modules for part in (module.weight, module.bias))
        if self._packed is None or key != self._key:
            with torch.no_grad():
                weight = torch.cat([module.weight.detach() for module in self.modules]).contiguous()
                biases = [module.bias for module in self.modules]
                bias = (
                    None
                    if all(part is None for part in biases)
                    else torch.cat(
                        [
                            part.detach() if part is not None else torch.zeros(size)
                            for part, size in zip(biases, self.splits, strict=True)
                        ]
                    )
                )
                self._packed = torch.ops.quantized.linear_prepack_fp16(weight, bias)
            self._key = key
        return self._packed

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        out: torch.Tensor = torch.ops.quantized.linear_dynamic_fp16(x.contiguous(), self.packed())
        if len(self.splits) == 1:
            return [out]
        return list(torch.split(out, self.splits, dim=-1))


def _single(linear: HalfWeightLinear) -> Callable[[torch.Tensor], torch.Tensor]:
    def call(x: torch.Tensor) -> torch.Tensor:
        return linear(x)[0]

    return call


class _LayerLinears:
    """A decoder layer's projections as the packed forward calls them: the modules, or fp16 fused products."""

    def __init__(self, layer: Any, weights: LinearWeights) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.half = 0
        self.qkv: Callable[[torch.Tensor], Sequence[torch.Tensor]] = lambda h: (
            attn.q_proj(h),
            attn.k_proj(h),
            attn.v_proj(h),
        )
        self.o: Callable[[torch.Tensor], torch.Tensor] = attn.o_proj
        self.mlp: Callable[[torch.Tensor], torch.Tensor] = mlp
        self._half: dict[str, HalfWeightLinear] = {}
        if weights != "float16":
            return
        qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        if HalfWeightLinear.applies_to(qkv):
            self.qkv = self._half["qkv"] = HalfWeightLinear(qkv)
            self.half += 3
        if HalfWeightLinear.applies_to([attn.o_proj]):
            self._half["o"] = HalfWeightLinear([attn.o_proj])
            self.o = _single(self._half["o"])
            self.half += 1
        parts: list[Any] = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
        act = getattr(mlp, "act_fn", None)
        if act is not None and HalfWeightLinear.applies_to(parts[:2]) and HalfWeightLinear.applies_to(parts[2:]):
            gate_up = self._half["gate_up"] = HalfWeightLinear(parts[:2])
            self._half["down"] = HalfWeightLinear(parts[2:])
            down = _single(self._half["down"])

            def gated(h: torch.Tensor) -> torch.Tensor:
                gate, up = gate_up(h)
                return down(act(gate) * up)

            self.mlp = gated
            self.half += 3

    def half_parts(self) -> list[HalfWeightLinear] | None:
        """The fp16 products (q/k/v, o, gate/up, down) when all four are fp16, else None."""
        parts = [self._half.get(name) for name in ("qkv", "o", "gate_up", "down")]
        return None if any(part is None for part in parts) else [part for part in parts if part is not None]


class PackedDecoder:
    """A Llama-style causal LM run over packed tokens with an external KV store."""

    def __init__(self, model: Any, weights: LinearWeights = "float32", script: bool = True) -> None:
        if weights not in ("float32", "float16"):
            raise BackendError(f"linear weights {weights!r}: float32 or float16")
        config = model.config
        kind = getattr(config, "model_type", "?")
        if kind not in SUPPORTED:
            raise BackendError(
                f"the embedded batcher runs Llama-style decoders ({', '.join(SUPPORTED)}); {kind!r} is not one"
            )
        window = getattr(config, "sliding_window", None)
        if window and getattr(config, "use_sliding_window", True) and window < config.max_position_embeddings:
            raise BackendError(f"{kind} with a {window}-token sliding window is not supported by the embedded batcher")
        base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
        if base is None or not hasattr(base, "layers"):
            raise BackendError(f"{type(model).__name__} has no decoder layers where a Llama-style model keeps them")
        self.model = model
        self.layers: list[Any] = list(base.layers)
        for layer in self.layers:
            attn = layer.self_attn
            if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
                raise BackendError(f"{kind} layers with query/key norms are not supported by the embedded batcher")
        self.embed: Any = base.embed_tokens
        self.norm: Any = base.norm
        self.rotary: Any = base.rotary_emb
        self.linears = [_LayerLinears(layer, weights) for layer in self.layers]
        self.lm_head: Any = model.lm_head
        half_head = weights == "float16" and HalfWeightLinear.applies_to([model.lm_head])
        if half_head:
            self.lm_head = _single(HalfWeightLinear([model.lm_head]))
        elif RowAdaptiveLinear.applies_to(model.lm_head):
            self.lm_head = RowAdaptiveLinear(model.lm_head)
        self.half_linears = sum(linears.half for linears in self.linears) + int(half_head)
        """Linear layers multiplied by fp16 weight copies (0 with float32 weights, or where FBGEMM cannot)."""
        self.weights: LinearWeights = "float16" if self.half_linears else "float32"
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.group = self.heads // self.kv_heads
        self.scale = float(getattr(self.layers[0].self_attn, "scaling", self.head_dim**-0.5))
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.scripted = ScriptedLayers.build(self) if script else None
        """Steps over a `SlotKVCache` run their layers here (see `scripted`), when it applies."""
        self.scripted_steps = 0
        """Steps whose layers ran in `scripted` (replicas sharing this decoder add up here)."""

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary embedding's (cos, sin), each (N, head_dim), at `positions` (N,)."""
        probe = torch.empty(1, dtype=self.dtype, device=self.device)
        cos, sin = self.rotary(probe, positions.to(self.device)[None])
        return cos[0], sin[0]

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """RoPE of per-token vectors x (N, ..., head_dim) at `positions` (N,), Llama's rotate-half convention."""
        cos, sin = self.cos_sin(positions)
        shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[-1],)
        return x * cos.view(shape) + rotate_half(x) * sin.view(shape)

    def forward(
        self, input_ids: torch.Tensor, layout: StepLayout, cache: KVStore, logit_index: torch.Tensor
    ) -> torch.Tensor:
        """Run the step; returns float logits (len(logit_index), vocab) of the tokens at `logit_index`."""
        n = int(input_ids.shape[0])
        x = self.embed(input_ids)
        cos, sin = self.cos_sin(layout.positions)
        q_cos, q_sin = cos.view(n, 1, 1, -1), sin.view(n, 1, 1, -1)
        k_cos, k_sin = cos.view(n, 1, -1), sin.view(n, 1, -1)

        def rope_keys(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return keys * k_cos + rotate_half(keys) * k_sin  # the step's own positions, already computed

        if self.scripted is not None and type(cache) is SlotKVCache:
            decoding = layout.decode > 0
            x = self.scripted.current()(
                x, q_cos, q_sin, k_cos, k_sin, cache.keys, cache.values,
                layout.slots, layout.columns,
                decode_mask(layout, self.device) if decoding else layout.columns,  # (unread without decoding rows)
                layout.decode_slots, layout.slots_used,
                (layout.longest or int(layout.decode_lengths.max())) if decoding else 0,
                layout.in_order, layout.decode,
                [(chunk.slot, chunk.start, chunk.count, chunk.offset) for chunk in layout.chunks],
            )  # fmt: skip
            self.scripted_steps += 1
            return self._logits(x, logit_index)
        for index, layer in enumerate(self.layers):
            linears = self.linears[index]
            h = layer.input_layernorm(x)
            q, keys, values = linears.qkv(h)
            q = q.reshape(n, self.kv_heads, self.group, self.head_dim)
            keys = keys.reshape(n, self.kv_heads, self.head_dim)
            values = values.reshape(n, self.kv_heads, self.head_dim)
            q = q * q_cos + rotate_half(q) * q_sin
            cache.write(index, layout, keys, values, rope_keys)
            if layout.decode == n:
                out = cache.decode_attention(index, layout, q, self.scale)
            else:
                out = torch.empty_like(q)
                if layout.decode:
                    out[: layout.decode] = cache.decode_attention(index, layout, q[: layout.decode], self.scale)
                for chunk in layout.chunks:
                    part = slice(chunk.offset, chunk.offset + chunk.count)
                    out[part] = cache.chunk_attention(index, chunk, q[part], self.scale)
            x = x + linears.o(out.reshape(n, self.heads * self.head_dim))
            x = x + linears.mlp(layer.post_attention_layernorm(x))
        return self._logits(x, logit_index)

    def _logits(self, x: torch.Tensor, logit_index: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(x[logit_index])
        logits: torch.Tensor = self.lm_head(hidden).float()
        return logits
