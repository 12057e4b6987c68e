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
fp16 (relative error about 2e-4) is what `veriloop bench llm` measures under `numerics`. With
`weights="bfloat16"` (what `llm.linear_weights = "auto"` picks where it builds) decoding rows multiply
by bf16 copies through veriloop's AVX512-BF16 kernel (`BrainDotLinear`, `veriloop.kernels.cpu_bf16`):
as fast as FBGEMM at one row, and a few rows cost what one does. Prompt rows take bf16 copies where the
CPU multiplies bf16 natively (`prefill_weights`): with a hundred rows, bf16 products run twice as fast
as FBGEMM's fp16 kernel; the same AVX512-BF16 kernel where it builds (faster than oneDNN's at every row
count measured), else oneDNN's (`BrainFloatLinear`). Where the two kinds differ, each step's products
are split by row kind (`RowSplitLinear`), so a decoding row's result never depends on a prompt read
beside it.

Supported: Llama-style decoders (`llama`, `mistral` without a sliding window, `qwen2` without a
sliding window), including layers replaced by quantized or LoRA modules, since modules are called,
not their weights read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from veriloop.errors import BackendError
from veriloop.kernels import cpu_attention, cpu_bf16
from veriloop.llm.kv_cache import KVStore, SlotKVCache, StepLayout, decode_mask
from veriloop.llm.scripted import ScriptedLayers, rotate_half

SUPPORTED = ("llama", "mistral", "qwen2")

LinearWeights = Literal["float32", "float16", "bfloat16"]
"""Weights the packed forward's linear layers multiply by on the CPU: float32; fp16 copies (activations stay
float32); bf16 copies with the activations rounded to bf16 (sums in float32)."""

KVDtype = Literal["auto", "float32", "float16"]
"""What the slot cache stores keys and values as (`llm.kv_dtype`); `auto` is resolved by `PackedDecoder`."""


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


def _native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX) and oneDNN's packed linear is in torch."""
    try:
        capabilities = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):
        return False
    native = bool(capabilities.get("avx512_bf16", False) or capabilities.get("amx_bf16", False))
    return native and _mkldnn_linear_available()


class HalfProduct(torch.nn.Module):
    """One product by an FBGEMM-prepacked fp16 weight (bias inside): float32 in, float32 out."""

    def __init__(self, packed: Any) -> None:
        super().__init__()
        self.packed = packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.quantized.linear_dynamic_fp16(x.contiguous(), self.packed)
        return out


class BrainProduct(torch.nn.Module):
    """One product by a oneDNN-prepacked bf16 weight: the input rounded to bf16, float32 out, bias added in float32."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.to(torch.bfloat16).contiguous(), 1)
        self.has_bias = bias is not None
        self.bias = bias if bias is not None else torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if rows == 1:
            # oneDNN multiplies a lone row by another kernel whose sums can differ in the last bit (measured:
            # 7 of 63 rows with 1,536 inputs); two rows take the kernel every larger product takes.
            x = x.expand(2, x.shape[1])
        product: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x.to(torch.bfloat16).contiguous(), self.weight, None, "none", [], ""
        )
        out = product[:rows].to(torch.float32)
        if self.has_bias:
            out = out + self.bias
        return out


class BrainDotProduct(torch.nn.Module):
    """One product by a bf16 weight packed for the AVX512-BF16 kernel (`veriloop.kernels.cpu_bf16`): float32 in and
    out, the input rounded to bf16, sums and bias in float32; each row's result the same at every row count."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.packed = cpu_bf16.pack(weight)
        self.out_features = int(weight.shape[0])
        self.bias = bias.detach().float().contiguous() if bias is not None else torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.veriloop_bf16.linear(x, self.packed, self.bias, self.out_features)
        return out


class FusedLinear(ABC):
    """Float32 CPU Linears that read the same input, run as one product by a prepacked low-precision weight copy.

    The copy (a `product` module, also what the scripted layers call) is made when the fused linear
    is, and again whenever a weight or bias changes (another tensor, or an in-place update), so it
    never serves stale weights. Returns one output per module, in order. The modules keep their
    float32 weights for everything else. Subclasses say which kernel: `HalfWeightLinear`,
    `BrainFloatLinear`.
    """

    def __init__(self, modules: Sequence[torch.nn.Linear]) -> None:
        if not modules:
            raise ValueError("at least one Linear")
        self.modules = list(modules)
        self.splits = [int(module.out_features) for module in self.modules]
        self._product: torch.nn.Module | None = None
        self._key: tuple[tuple[int, int], ...] | None = None
        self.product()  # now, not in the first step (packing the whole model takes a second or two)

    @staticmethod
    @abstractmethod
    def kernel_available() -> bool:
        """Whether this kind's kernel runs in this torch on this CPU."""

    @abstractmethod
    def make_product(self, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
        """The product module over the fused `weight` (out, in) and `bias` (out,) or None."""

    @classmethod
    def applies_to(cls, modules: Sequence[Any]) -> bool:
        """Whether all `modules` are plain float32 CPU Linears with one input size, and the kernel is in this torch."""
        return (
            bool(modules)
            and all(_plain_cpu_linear(module) for module in modules)
            and len({int(module.in_features) for module in modules}) == 1
            and cls.kernel_available()
        )

    def product(self) -> torch.nn.Module:
        """The product module over the weights as they are now (repacked if any changed)."""
        key = tuple(_weight_key(part) for module in self.modules for part in (module.weight, module.bias))
        if self._product is None or key != self._key:
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
                self._product = self.make_product(weight, bias)
            self._key = key
        return self._product

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        out: torch.Tensor = self.product()(x)
        if len(self.splits) == 1:
            return [out]
        return list(torch.split(out, self.splits, dim=-1))


class HalfWeightLinear(FusedLinear):
    """fp16 weight copies prepacked for FBGEMM (`quantized::linear_prepack_fp16`); activations and sums stay float32.

    The rounding of the weights (relative error about 2e-4) is all that changes: greedy answers of the
    embedded model match float32's (`veriloop bench llm`, `numerics`).
    """

    @staticmethod
    def kernel_available() -> bool:
        return _fbgemm_fp16_available()

    def make_product(self, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
        return HalfProduct(torch.ops.quantized.linear_prepack_fp16(weight, bias))


class BrainFloatLinear(FusedLinear):
    """bf16 weight copies prepacked by oneDNN, multiplied by the input rounded to bf16 (sums in float32).

    Where the CPU has bf16 dot products (AVX512-BF16, AMX) this is the fastest product from a few rows
    up: measured on this project's 2-core AVX512-BF16 machine, a layer's four products at 3 rows cost
    0.26 ms against FBGEMM fp16's 0.39, and 5.0 against 9.8 ms for a 110-token prefill chunk; one row
    costs the same. Inputs and outputs lose more precision than fp16 weights do (8 mantissa bits), which
    `veriloop bench llm` measures under `numerics`. Each row's result is the same at every row count.
    """

    @staticmethod
    def kernel_available() -> bool:
        return _native_bf16()

    def make_product(self, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
        return BrainProduct(weight, bias)


class BrainDotLinear(FusedLinear):
    """bf16 weight copies multiplied by AVX512-BF16 dot products (`veriloop.kernels.cpu_bf16`): the decoding rows'
    kind for `bfloat16` weights where that kernel builds.

    At one row it streams the weight as fast as FBGEMM's fp16 kernel, and each further row costs a
    fraction of FBGEMM's (bf16 pairs multiplied straight from the weight, no conversion to float32),
    where oneDNN's bf16 kernel is slow at one row. With a hundred rows or more it runs near the bf16
    peak, a little faster than oneDNN (measured here: 123 against 135 ms for the model's 120 layer
    products at 112 rows), so prompt rows take it too. Inputs and weights are rounded to bf16 as
    `BrainFloatLinear`'s are; the output stays float32, where oneDNN's is rounded to bf16.
    """

    @staticmethod
    def kernel_available() -> bool:
        return cpu_bf16.available()

    def make_product(self, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Module:
        return BrainDotProduct(weight, bias)


class RowSplitProduct(torch.nn.Module):
    """A step's product with its decoding rows (which come first) by one product and its prompt rows by another.

    Which product a row gets depends only on the row's kind, never on what else shares the step, so a
    decoding row's result is the same whether or not a prompt is being read beside it.
    """

    def __init__(self, decoding: torch.nn.Module, prefill: torch.nn.Module | None) -> None:
        super().__init__()
        self.decoding = decoding
        self.same = prefill is None
        self.prefill = prefill if prefill is not None else torch.nn.Identity()

    def forward(self, x: torch.Tensor, decode: int) -> torch.Tensor:
        if self.same or decode == x.shape[0]:
            out: torch.Tensor = self.decoding(x)
            return out
        if decode == 0:
            out = self.prefill(x)
            return out
        return torch.cat([self.decoding(x[:decode]), self.prefill(x[decode:])])


class RowSplitLinear:
    """Linears fused into one product for decoding rows and, where it differs, another for prompt rows."""

    def __init__(self, modules: Sequence[torch.nn.Linear], decoding: type[FusedLinear], prefill: type[FusedLinear]):
        self.modules = list(modules)
        self.splits = [int(module.out_features) for module in self.modules]
        self.decoding = decoding(self.modules)
        self.prefill = prefill(self.modules) if prefill is not decoding else None
        self._parts: tuple[torch.nn.Module, torch.nn.Module | None] | None = None
        self._product: RowSplitProduct | None = None

    def product(self) -> RowSplitProduct:
        """The product over the weights as they are now (each kind repacked if a weight changed)."""
        decoding = self.decoding.product()
        prefill = self.prefill.product() if self.prefill is not None else None
        if (
            self._product is None
            or self._parts is None
            or self._parts[0] is not decoding
            or self._parts[1] is not prefill
        ):
            self._parts = (decoding, prefill)
            self._product = RowSplitProduct(decoding, prefill)
        return self._product

    def __call__(self, x: torch.Tensor, decode: int) -> list[torch.Tensor]:
        out = self.product()(x, decode)
        if len(self.splits) == 1:
            return [out]
        return list(torch.split(out, self.splits, dim=-1))


FUSED: dict[str, type[FusedLinear]] = {"float16": HalfWeightLinear, "bfloat16": BrainFloatLinear}
"""The fused product kind of each low-precision `LinearWeights` (for bf16: where the AVX512-BF16 kernel cannot run)."""


def product_kind(weights: LinearWeights) -> type[FusedLinear] | None:
    """The fused product kind for `weights`, decoding rows and prompt rows alike: as `FUSED`, but bf16 by the
    AVX512-BF16 kernel where it builds, which measured faster than oneDNN's bf16 at every row count from 1 to 256
    (`veriloop bench bf16_linear --rows`)."""
    if weights == "bfloat16" and BrainDotLinear.kernel_available():
        return BrainDotLinear
    return FUSED.get(weights)


def resolve_linear_weights(setting: str) -> LinearWeights:
    """`llm.linear_weights` as the decoder takes it: `auto` is bfloat16 where the AVX512-BF16 kernel builds, else
    float16 (FBGEMM); the others as they are."""
    if setting == "auto":
        return "bfloat16" if BrainDotLinear.kernel_available() else "float16"
    if setting not in ("float32", *FUSED):
        raise BackendError(f"linear weights {setting!r}: auto, float32, float16 or bfloat16")
    return setting  # type: ignore[return-value]


def default_prefill_weights(weights: LinearWeights) -> LinearWeights:
    """bf16 for prompt rows where decoding rows are low-precision and the CPU multiplies bf16 natively, else `weights`.

    A prompt chunk is a product with a hundred rows or more, where bf16 dot products run twice as
    fast as FBGEMM's fp16 kernel (3.9 against 7.7 ms per layer at 110 rows on this project's machine);
    with a few decoding rows, FBGEMM's fp16 weights are as fast or faster and more exact.
    """
    if weights != "float32" and BrainFloatLinear.kernel_available():
        return "bfloat16"
    return weights


class _LayerLinears:
    """A decoder layer's projections as the packed forward calls them (input, decoding rows first): the modules, or
    fused low-precision products, decoding rows by `weights`' kind and prompt rows by `prefill_weights`'."""

    def __init__(self, layer: Any, weights: LinearWeights, prefill_weights: LinearWeights) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.fused = 0
        """How many of the layer's Linears run in a fused product."""
        self.qkv: Callable[[torch.Tensor, int], Sequence[torch.Tensor]] = lambda h, decode: (
            attn.q_proj(h),
            attn.k_proj(h),
            attn.v_proj(h),
        )
        self.o: Callable[[torch.Tensor, int], torch.Tensor] = lambda x, decode: attn.o_proj(x)
        self.mlp: Callable[[torch.Tensor, int], torch.Tensor] = lambda h, decode: mlp(h)
        self._fused: dict[str, RowSplitLinear] = {}
        kind, prefill_kind = product_kind(weights), product_kind(prefill_weights)
        if kind is None or prefill_kind is None:
            return

        def applies(modules: Sequence[Any]) -> bool:
            return kind.applies_to(modules) and prefill_kind.applies_to(modules)

        def fused(name: str, modules: Sequence[Any]) -> RowSplitLinear:
            self._fused[name] = RowSplitLinear(modules, kind, prefill_kind)
            self.fused += len(modules)
            return self._fused[name]

        qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        if applies(qkv):
            self.qkv = fused("qkv", qkv)
        if applies([attn.o_proj]):
            o = fused("o", [attn.o_proj])
            self.o = lambda x, decode: o(x, decode)[0]
        parts: list[Any] = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
        act = getattr(mlp, "act_fn", None)
        if act is not None and applies(parts[:2]) and applies(parts[2:]):
            gate_up, down = fused("gate_up", parts[:2]), fused("down", parts[2:])

            def gated(h: torch.Tensor, decode: int) -> torch.Tensor:
                gate, up = gate_up(h, decode)
                return down(act(gate) * up, decode)[0]

            self.mlp = gated

    def fused_parts(self) -> list[RowSplitLinear] | None:
        """The fused products (q/k/v, o, gate/up, down) when all four are fused, else None."""
        parts = [self._fused.get(name) for name in ("qkv", "o", "gate_up", "down")]
        return None if any(part is None for part in parts) else [part for part in parts if part is not None]


class PackedDecoder:
    """A Llama-style causal LM run over packed tokens with an external KV store."""

    def __init__(
        self,
        model: Any,
        weights: LinearWeights = "float32",
        script: bool = True,
        prefill_weights: LinearWeights | None = None,
        attention_kernel: bool = True,
        kv_dtype: KVDtype = "auto",
    ) -> None:
        prefill_weights = default_prefill_weights(weights) if prefill_weights is None else prefill_weights
        if kv_dtype not in ("auto", "float32", "float16"):
            raise BackendError(f"kv dtype {kv_dtype!r}: auto, float32 or float16")
        for name, value in (("linear weights", weights), ("prefill weights", prefill_weights)):
            if value not in ("float32", *FUSED):
                raise BackendError(f"{name} {value!r}: float32, float16 or bfloat16")
        if (weights == "float32") != (prefill_weights == "float32"):
            raise BackendError("float32 weights for decoding and for prefill go together (the exact path)")
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
        self.linears = [_LayerLinears(layer, weights, prefill_weights) for layer in self.layers]
        self.lm_head: Any = model.lm_head
        # The output projection takes the decoding rows' kind, except oneDNN's bf16 (slow at a few rows, and a 49k-row
        # weight is bound by reading it): FBGEMM's fp16 weights then. The AVX512-BF16 kernel streams it as fast.
        head_kind = product_kind(weights)
        head_kind = HalfWeightLinear if head_kind is BrainFloatLinear else head_kind
        head = head_kind([model.lm_head]) if head_kind is not None and head_kind.applies_to([model.lm_head]) else None
        if head is not None:
            self.lm_head = lambda x: head(x)[0]
        elif RowAdaptiveLinear.applies_to(model.lm_head):
            self.lm_head = RowAdaptiveLinear(model.lm_head)
        self.fused_linears = sum(linears.fused for linears in self.linears) + int(head is not None)
        """Linear layers multiplied by low-precision weight copies (0 with float32 weights, or where no kernel can)."""
        self.weights: LinearWeights = weights if self.fused_linears else "float32"
        self.prefill_weights: LinearWeights = prefill_weights if self.fused_linears else "float32"
        """What prompt rows multiply by (decoding rows: `weights`); None asks `default_prefill_weights`."""
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.group = self.heads // self.kv_heads
        self.scale = float(getattr(self.layers[0].self_attn, "scaling", self.head_dim**-0.5))
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.attention_kernel = (
            attention_kernel and self.device.type == "cpu" and self.dtype == torch.float32 and cpu_attention.load()
        )
        """Every token of a step over a `SlotKVCache` attends through `veriloop.kernels.cpu_attention` (else PyTorch's
        SDPA: decoding rows masked, prompt chunks in blocks)."""
        self.kv_dtype = self._kv_dtype(kv_dtype)
        """What a `SlotKVCache` of this decoder stores keys and values as (attention computes in `dtype`)."""
        self.scripted = ScriptedLayers.build(self) if script else None
        """Steps over a `SlotKVCache` run their layers here (see `scripted`), when it applies."""
        self.scripted_steps = 0
        """Steps whose layers ran in `scripted` (replicas sharing this decoder add up here)."""

    def _kv_dtype(self, setting: KVDtype) -> torch.dtype:
        """`auto`: float16 where decoding rows already multiply by low-precision weights and attend through the C++
        kernel, which widens each fp16 value as it reads it; else the model's dtype (the exact float32 path)."""
        if setting == "auto":
            return torch.float16 if self.attention_kernel and self.weights != "float32" else self.dtype
        return torch.float16 if setting == "float16" else torch.float32

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

        slot_cache = cache if type(cache) is SlotKVCache else None  # exactly this class: not CommVQ's
        decoding = layout.decode > 0
        # The kernel attends every token of the step in one call, prompt tokens too: each over its slot's columns up
        # to its own (a decoding row's last, a prompt token's causal end), so no masks and no chunk boundaries.
        kernel = self.attention_kernel and slot_cache is not None
        attending = layout.slots if kernel else layout.decode_slots
        lengths = layout.columns + 1 if kernel else layout.decode_slots  # the second is read by no one
        if self.scripted is not None and slot_cache is not None:
            x = self.scripted.current()(
                x, q_cos, q_sin, k_cos, k_sin, slot_cache.keys, slot_cache.values,
                layout.slots, layout.columns,
                decode_mask(layout, self.device) if decoding and not kernel else layout.columns,  # read by SDPA only
                attending, lengths, layout.slots_used,
                (layout.longest or int(layout.decode_lengths.max())) if decoding else 0,
                layout.in_order, layout.decode,
                [(chunk.slot, chunk.start, chunk.count, chunk.offset) for chunk in layout.chunks],
            )  # fmt: skip
            self.scripted_steps += 1
            return self._logits(x, logit_index)
        for index, layer in enumerate(self.layers):
            linears = self.linears[index]
            h = layer.input_layernorm(x)
            q, keys, values = linears.qkv(h, layout.decode)
            q = q.reshape(n, self.kv_heads, self.group, self.head_dim)
            keys = keys.reshape(n, self.kv_heads, self.head_dim)
            values = values.reshape(n, self.kv_heads, self.head_dim)
            q = q * q_cos + rotate_half(q) * q_sin
            cache.write(index, layout, keys, values, rope_keys)

            if kernel and slot_cache is not None:
                out = cpu_attention.decode_attention(
                    q, slot_cache.keys[index], slot_cache.values[index], attending, lengths, self.scale
                )
            elif layout.decode == n:
                out = cache.decode_attention(index, layout, q, self.scale)
            else:
                out = torch.empty_like(q)
                if layout.decode:
                    out[: layout.decode] = cache.decode_attention(index, layout, q[: layout.decode], self.scale)
                for chunk in layout.chunks:
                    part = slice(chunk.offset, chunk.offset + chunk.count)
                    out[part] = cache.chunk_attention(index, chunk, q[part], self.scale)
            x = x + linears.o(out.reshape(n, self.heads * self.head_dim), layout.decode)
            x = x + linears.mlp(layer.post_attention_layernorm(x), layout.decode)
        return self._logits(x, logit_index)

    def _logits(self, x: torch.Tensor, logit_index: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(x[logit_index])
        logits: torch.Tensor = self.lm_head(hidden).float()
        return logits


KERNEL_NAMES: dict[type[FusedLinear], str] = {
    BrainDotLinear: "veriloop_bf16 (AVX512-BF16 dot products, bf16 weights)",
    BrainFloatLinear: "onednn_bf16 (oneDNN prepacked bf16 weights)",
    HalfWeightLinear: "fbgemm_fp16 (FBGEMM prepacked fp16 weights)",
}
"""How `kernels_used` names each fused product kind."""

FLOAT32_PRODUCTS = "torch_float32 (MKL/oneDNN float32 weights)"

CHOOSING_FLAGS = {"avx2": "avx2", "avx512f": "avx512_f", "avx512_bf16": "avx512_bf16", "amx_bf16": "amx_bf16"}
"""The instruction sets that choose the kernels (/proc/cpuinfo's name: torch's name): AVX-512 or AVX2 for the
attention loop's vector path, AVX512-BF16 for veriloop's bf16 kernel, AVX512-BF16 or AMX for oneDNN's bf16 products."""


def cpu_flags() -> dict[str, bool]:
    """Whether this CPU has each of `CHOOSING_FLAGS`, as torch reports them (all False where it cannot say)."""
    try:
        capabilities = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):
        capabilities = {}
    return {flag: bool(capabilities.get(key, False)) for flag, key in CHOOSING_FLAGS.items()}


def attention_kernel_name(enabled: bool, head_dim: int, group: int, lanes: int) -> str:
    """Which attention a packed step runs: veriloop's C++ loop (its vector path, as the kernel was built: `lanes`
    16 for AVX-512, 8 for AVX2, where the head width is a multiple of 16 and a key head serves up to 8 queries, else
    its portable loop), or PyTorch's SDPA where the kernel is off or did not build."""
    if not enabled:
        return "torch_sdpa"
    if lanes and head_dim % 16 == 0 and 1 <= group <= 8:
        return f"veriloop_cpu_attention ({VECTOR_PATHS.get(lanes, f'{lanes} lanes')})"
    return "veriloop_cpu_attention (portable C++ loop)"


VECTOR_PATHS = {16: "AVX-512, 16 lanes", 8: "AVX2, 2 x 8 lanes"}
"""How `attention_kernel_name` names the kernel's vector loops by their register width."""


def products_name(decoder_weights: LinearWeights, fused: bool) -> str:
    """The product kind `PackedDecoder` multiplies rows of `decoder_weights` by (float32 where nothing is fused)."""
    kind = product_kind(decoder_weights) if fused else None
    return KERNEL_NAMES.get(kind, FLOAT32_PRODUCTS) if kind is not None else FLOAT32_PRODUCTS


def kernels_used(decoder: PackedDecoder) -> dict[str, Any]:
    """The kernels `decoder` runs, by name, and the CPU flags that chose them: what `veriloop bench llm` prints, so
    a figure says whether it came from the AVX-512 paths or from the portable ones."""
    flags = cpu_flags()
    fused = decoder.fused_linears > 0
    return {
        "attention": attention_kernel_name(
            decoder.attention_kernel, decoder.head_dim, decoder.group, cpu_attention.vector_lanes()
        ),
        "decode_products": products_name(decoder.weights, fused),
        "prefill_products": products_name(decoder.prefill_weights, fused),
        "cpu_flags": flags,
    }
