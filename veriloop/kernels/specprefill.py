"""SpecPrefill (Liu, Chen, Zhang, ICML 2025): prefill only the prompt tokens a speculator attends to.

1. The speculator prefills the whole prompt and decodes `look_ahead` tokens greedily, keeping the
   (post-RoPE) queries of those look-ahead steps at every layer.
2. Each look-ahead query's attention over the prompt keys is softmaxed (prompt keys only),
   smoothed along the sequence (average pool of width `pool_kernel`), maxed over layers × heads
   and averaged over look-ahead steps: the importance of every prompt token.
3. The prompt is cut into chunks of `chunk_size`; the ceil(keep_ratio · chunks) chunks with the
   highest mean importance are kept, plus the last chunk (so the question itself always
   survives; the reference code does not force it), in their original order.
4. The main model prefills only the kept tokens with their original position ids, so RoPE sees
   the true distances, and then decodes as usual from position len(prompt).

Speculator: no smaller model shares SmolLM2's tokenizer here, so the speculator is the first
`speculator_layers` decoder layers of the main model itself, followed by its final norm and
lm_head (early exit); it shares the main model's weights and costs a fraction of a prefill.

Works with Hugging Face Llama-style causal LMs (q_proj/k_proj on each attention layer, a rotary
embedding with `inv_freq`). Masks are passed explicitly as 4-D additive masks, because gapped
position ids would otherwise be read as packed sequences.
"""

from __future__ import annotations

import copy
import inspect
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from veriloop.kernels.commvq import apply_rope


def _base(model: nn.Module) -> nn.Module:
    prefix = getattr(model, "base_model_prefix", "model")
    base = getattr(model, prefix, None)
    if not isinstance(base, nn.Module) or not hasattr(base, "layers"):
        raise ValueError("SpecPrefill needs a decoder-only model with `<base>.layers` (Llama-style)")
    return base


def layer_speculator(model: nn.Module, n_layers: int) -> nn.Module:
    """A view of `model` that runs only its first `n_layers` decoder layers (weights shared, the
    original untouched), then the final norm and lm_head."""
    base = _base(model)
    layers: list[nn.Module] = list(base.get_submodule("layers").children())
    if not 1 <= n_layers <= len(layers):
        raise ValueError(f"speculator_layers must lie in [1, {len(layers)}], not {n_layers}")
    config: Any = copy.deepcopy(model.config)
    config.num_hidden_layers = n_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n_layers]
    short_base = copy.copy(base)
    short_base._modules = dict(base._modules)
    short_base.layers = nn.ModuleList(layers[:n_layers])
    short_base.config = config
    short = copy.copy(model)
    short._modules = dict(model._modules)
    setattr(short, getattr(model, "base_model_prefix", "model"), short_base)
    short.config = config
    return short


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in _base(model).get_submodule("layers").modules() if hasattr(m, "q_proj") and hasattr(m, "k_proj")]


def _rope(model: nn.Module) -> tuple[torch.Tensor, float]:
    rotary = _base(model).get_submodule("rotary_emb")
    inv_freq = rotary.inv_freq
    if not isinstance(inv_freq, torch.Tensor):
        raise ValueError("the model's rotary embedding has no inv_freq")
    return inv_freq.float(), float(getattr(rotary, "attention_scaling", 1.0))


def causal_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive (1, 1, q, k) mask letting each query see keys at positions ≤ its own."""
    allowed = key_positions[None, :] <= query_positions[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=query_positions.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


class CausalLM:
    """Calls a Hugging Face causal LM with explicit positions, masks and cache, whatever the
    transformers version names its cache argument."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.has_logits_to_keep = "logits_to_keep" in params
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def __call__(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        cache: Any = None,
        past_positions: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """Run `ids` (T,) at `positions` (T,) after a cache whose tokens sat at `past_positions`.
        Returns logits (T or 1, V) and the cache."""
        keys = positions if past_positions is None else torch.cat([past_positions, positions])
        kwargs: dict[str, Any] = {
            "input_ids": ids[None].to(self.device),
            "position_ids": positions[None].to(self.device),
            "attention_mask": causal_mask(positions.to(self.device), keys.to(self.device), self.dtype),
            "use_cache": True,
            self.cache_arg: cache,
        }
        if last_only and self.has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        logits = out.logits[0]
        return (logits[-1:] if last_only else logits), new_cache


def _capture(modules: Sequence[nn.Module], name: str, store: list[list[torch.Tensor]]) -> list[Any]:
    """Record the outputs of `name` in each module, from this thread only: the speculator shares its
    modules with the main model, which may be decoding other rows on another thread meanwhile."""
    handles = []
    owner = threading.get_ident()
    for i, module in enumerate(modules):

        def hook(mod: nn.Module, inputs: Any, output: torch.Tensor, index: int = i) -> None:
            if threading.get_ident() == owner:
                store[index].append(output.detach()[0].float())

        handles.append(module.get_submodule(name).register_forward_hook(hook))
    return handles


@torch.no_grad()
def token_importance(
    model: nn.Module,
    input_ids: torch.Tensor,
    speculator_layers: int = 8,
    look_ahead: int = 8,
    pool_kernel: int = 13,
    eos_token_ids: Sequence[int] = (),
) -> torch.Tensor:
    """Importance (L,) of each prompt token from the speculator's look-ahead attention."""
    ids = input_ids.reshape(-1)
    length = ids.shape[0]
    speculator = layer_speculator(model, speculator_layers)
    run = CausalLM(speculator)
    attention = _attention_modules(speculator)
    config: Any = model.config
    head_dim = int(getattr(config, "head_dim", 0) or config.hidden_size // config.num_attention_heads)
    inv_freq, scaling = _rope(model)
    keys: list[list[torch.Tensor]] = [[] for _ in attention]
    queries: list[list[torch.Tensor]] = [[] for _ in attention]
    handles = _capture(attention, "k_proj", keys)
    try:
        positions = torch.arange(length)
        logits, cache = run(ids, positions, last_only=True)
    finally:
        for handle in handles:
            handle.remove()
    handles = _capture(attention, "q_proj", queries)
    steps = 0
    try:
        past = positions
        for step in range(look_ahead):
            token = logits[-1].argmax().reshape(1).cpu()
            if int(token) in eos_token_ids:
                break
            here = torch.tensor([length + step])
            logits, cache = run(token, here, cache=cache, past_positions=past)
            past = torch.cat([past, here])
            steps += 1
    finally:
        for handle in handles:
            handle.remove()
    if steps == 0:
        return torch.ones(length)
    layer_scores = []
    query_positions = torch.arange(length, length + steps)
    for layer_keys, layer_queries in zip(keys, queries, strict=True):
        k = layer_keys[0].view(length, -1, head_dim).transpose(0, 1)  # (Hkv, L, d)
        q = torch.cat(layer_queries).view(steps, -1, head_dim).transpose(0, 1)  # (H, A, d)
        k = apply_rope(k, positions, inv_freq) * scaling
        q = apply_rope(q, query_positions, inv_freq) * scaling
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        layer_scores.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), dim=-1))  # (H, A, L)
    scores = torch.stack(layer_scores).flatten(0, 1)  # (layers·heads, A, L)
    if pool_kernel > 1:
        flat = scores.reshape(-1, 1, length)
        scores = F.avg_pool1d(flat, pool_kernel, stride=1, padding=pool_kernel // 2, count_include_pad=False)
        scores = scores.reshape(-1, steps, length)
    return scores.amax(dim=0).mean(dim=0)


def select_chunks(
    importance: torch.Tensor, keep_ratio: float, chunk_size: int = 32, keep_last: bool = True
) -> torch.Tensor:
    """Sorted indices of the tokens in the top ceil(keep_ratio · chunks) chunks by mean importance."""
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must lie in (0, 1], not {keep_ratio}")
    length = importance.shape[0]
    n_chunks = math.ceil(length / chunk_size)
    padded = torch.full((n_chunks * chunk_size,), float("nan"))
    padded[:length] = importance.float()
    chunk_scores = padded.view(n_chunks, chunk_size).nanmean(dim=1)
    keep = min(n_chunks, math.ceil(n_chunks * keep_ratio))
    chosen = set(chunk_scores.topk(keep).indices.tolist())
    if keep_last and n_chunks - 1 not in chosen:
        chosen.discard(min(chosen, key=lambda c: float(chunk_scores[c])))
        chosen.add(n_chunks - 1)
    index = torch.arange(n_chunks * chunk_size).view(n_chunks, chunk_size)[sorted(chosen)].reshape(-1)
    return index[index < length]


def kept_indices(
    model: nn.Module,
    input_ids: torch.Tensor,
    keep_ratio: float,
    speculator_layers: int = 8,
    look_ahead: int = 8,
    chunk_size: int = 32,
    pool_kernel: int = 13,
    eos_token_ids: Sequence[int] = (),
) -> list[int]:
    """Sorted prompt positions SpecPrefill keeps (steps 1 to 3): what the main model then prefills."""
    ids = input_ids.reshape(-1).cpu()
    if keep_ratio >= 1.0:
        return list(range(int(ids.shape[0])))
    importance = token_importance(model, ids, speculator_layers, look_ahead, pool_kernel, eos_token_ids)
    return [int(index) for index in select_chunks(importance, keep_ratio, chunk_size).tolist()]


@dataclass
class PrefillResult:
    """A prefilled cache and what produced it."""

    logits: torch.Tensor  # (1, V): next-token logits after the prompt
    cache: Any
    positions: torch.Tensor  # original positions of the tokens in the cache
    prompt_length: int
    kept: int
    seconds: float


@torch.no_grad()
def prefill(
    model: nn.Module,
    input_ids: torch.Tensor,
    keep_ratio: float | None = None,
    speculator_layers: int = 8,
    look_ahead: int = 8,
    chunk_size: int = 32,
    pool_kernel: int = 13,
    eos_token_ids: Sequence[int] = (),
) -> PrefillResult:
    """Full prefill (`keep_ratio` None or 1) or SpecPrefill of one prompt (L,)."""
    started = time.perf_counter()
    ids = input_ids.reshape(-1).cpu()
    length = ids.shape[0]
    if keep_ratio is None or keep_ratio >= 1.0:
        kept = torch.arange(length)
    else:
        importance = token_importance(model, ids, speculator_layers, look_ahead, pool_kernel, eos_token_ids)
        kept = select_chunks(importance, keep_ratio, chunk_size)
    logits, cache = CausalLM(model)(ids[kept], kept, last_only=True)
    return PrefillResult(logits, cache, kept, length, int(kept.numel()), time.perf_counter() - started)


@dataclass
class Generation:
    tokens: list[int]
    ttft_s: float
    total_s: float
    kept: int
    prompt_length: int


@torch.no_grad()
def decode(
    model: nn.Module,
    state: PrefillResult,
    max_new_tokens: int,
    eos_token_ids: Sequence[int] = (),
    stop: Callable[[list[int]], bool] | None = None,
) -> Generation:
    """Greedy decoding from a prefilled prompt; positions continue from len(prompt) whatever was
    kept. Extends `state.cache`. The time to first token counts the prefill."""
    started = time.perf_counter()
    run = CausalLM(model)
    token = int(state.logits[-1].argmax())
    ttft = state.seconds + (time.perf_counter() - started)
    tokens = [token]
    past, cache = state.positions, state.cache
    position = state.prompt_length
    while len(tokens) < max_new_tokens and token not in eos_token_ids and not (stop and stop(tokens)):
        here = torch.tensor([position])
        logits, cache = run(torch.tensor([token]), here, cache=cache, past_positions=past)
        past = torch.cat([past, here])
        position += 1
        token = int(logits[-1].argmax())
        tokens.append(token)
    total = state.seconds + (time.perf_counter() - started)
    return Generation(tokens, ttft, total, state.kept, state.prompt_length)


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    keep_ratio: float | None = None,
    eos_token_ids: Sequence[int] = (),
    stop: Callable[[list[int]], bool] | None = None,
    **options: Any,
) -> Generation:
    """Greedy decoding after a full (`keep_ratio` None) or speculative prefill."""
    state = prefill(model, input_ids, keep_ratio, eos_token_ids=eos_token_ids, **options)
    return decode(model, state, max_new_tokens, eos_token_ids, stop)


@torch.no_grad()
def continuation_nll(model: nn.Module, state: PrefillResult, continuation: torch.Tensor) -> float:
    """Mean negative log-likelihood per token of `continuation` after a prefilled prompt (this
    extends `state.cache`, so use a fresh prefill for anything else)."""
    ids = continuation.reshape(-1).cpu()
    if ids.numel() == 1:
        return float(F.cross_entropy(state.logits[-1:].float(), ids.to(state.logits.device)).item())
    positions = torch.arange(state.prompt_length, state.prompt_length + ids.shape[0])
    logits, _ = CausalLM(model)(ids[:-1], positions[:-1], cache=state.cache, past_positions=state.positions)
    all_logits = torch.cat([state.logits[-1:].float(), logits.float()])
    return float(F.cross_entropy(all_logits, ids.to(all_logits.device)).item())
