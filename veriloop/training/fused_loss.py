"""Causal-LM cross-entropy (with label smoothing) straight from the final hidden states.

The trainers' label-smoothed SFT loss would otherwise materialise (tokens × vocabulary) logits, and
TRL's label-smoothing path even runs the model twice (once for the loss, once for its metrics).
Here the decoder stops at its final norm and `veriloop.kernels.fused_ce.linear_cross_entropy`
takes those hidden states and the lm_head weight, chunked (or in Triton on CUDA), so the logits
never exist in full. The result equals `losses.label_smoothed_cross_entropy` on the shifted logits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from veriloop.kernels.fused_ce import linear_cross_entropy
from veriloop.training.losses import IGNORE_INDEX

DECODER_INPUTS = ("input_ids", "attention_mask", "position_ids")


def _unwrap(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (LoRA layers stay injected in its modules)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _hidden_and_targets(model: Any, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Final hidden states (after the last norm), the lm_head weight, and the labels shifted to line up."""
    base = _unwrap(model)
    head = base.get_output_embeddings()
    if head is None or getattr(head, "bias", None) is not None:
        raise ValueError("the fused loss needs a bias-free lm_head (get_output_embeddings)")
    kwargs = {key: inputs[key] for key in DECODER_INPUTS if inputs.get(key) is not None}
    hidden = base.get_decoder()(**kwargs, use_cache=False).last_hidden_state
    labels = inputs["labels"]
    shifted = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE_INDEX)], dim=1)
    return hidden, head.weight, shifted


def fused_causal_lm_loss(
    model: Any,
    inputs: Mapping[str, Any],
    *,
    label_smoothing: float = 0.0,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Next-token loss of `inputs["labels"]` (IGNORE_INDEX skipped), without the full logits.

    The mean over trained tokens, or their sum over `num_items_in_batch` when the trainer counts
    tokens across gradient-accumulation steps (as `Trainer.compute_loss` does).
    """
    hidden, weight, shifted = _hidden_and_targets(model, inputs)
    if num_items_in_batch is None:
        return linear_cross_entropy(hidden, weight, shifted, label_smoothing=label_smoothing, ignore_index=IGNORE_INDEX)
    total = linear_cross_entropy(
        hidden, weight, shifted, label_smoothing=label_smoothing, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    count = torch.as_tensor(num_items_in_batch, device=total.device).clamp(min=1)
    return total / count


def fused_sequence_logps(model: Any, inputs: Mapping[str, Any]) -> torch.Tensor:
    """log pi(y|x) per sequence (as `losses.sequence_logps`) from per-token fused cross-entropy, no full logits."""
    hidden, weight, shifted = _hidden_and_targets(model, inputs)
    per_token = linear_cross_entropy(hidden, weight, shifted, ignore_index=IGNORE_INDEX, reduction="none")
    return -(per_token * (shifted != IGNORE_INDEX)).sum(dim=-1)


def _label_logps(head: Any, hidden: torch.Tensor, targets: torch.Tensor, choices: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float()
    logps = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if choices.numel() == 0:
        return logps
    is_choice = targets.unsqueeze(-1) == choices
    among = torch.log_softmax(logits[:, choices], dim=-1)
    picked = (among * is_choice).sum(dim=-1)
    return torch.where(is_choice.any(dim=-1), picked, logps)


def labelled_token_logps(
    model: Any, inputs: Mapping[str, Any], *, chunk_tokens: int = 256, choices: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log pi(label | prefix) and the trained mask, equal to `losses.token_logps` on the full logits.

    A label among `choices` (tokens that are read as a choice between themselves, never generated, such as
    ReVISE's [eos]/[refine]) gets its log-prob among `choices` only: training it then moves the choices
    against each other and never lifts them above the vocabulary, where they would leak into generated text.

    The output head runs only where a label is trained, `chunk_tokens` positions at a time and recomputed in the
    backward pass, so the (batch x length x vocabulary) logits and their gradient never exist: on a 152k-token
    vocabulary they are what ran a 0.5B model's DPO step out of 24 GiB. The head is called as a module, so
    adapter-wrapped heads (PEFT's trainable token rows) keep their part of the gradient.
    """
    base = _unwrap(model)
    head = base.get_output_embeddings()
    if head is None:
        raise ValueError("labelled_token_logps needs a model with an output head (get_output_embeddings)")
    kwargs = {key: inputs[key] for key in DECODER_INPUTS if inputs.get(key) is not None}
    hidden = base.get_decoder()(**kwargs, use_cache=False).last_hidden_state[:, :-1]
    shifted = inputs["labels"][:, 1:]
    mask = shifted != IGNORE_INDEX
    picked, targets = hidden[mask], shifted[mask]
    among = torch.tensor(sorted(set(choices)), dtype=torch.long, device=hidden.device)
    pieces = []
    for start in range(0, targets.numel(), chunk_tokens):
        part = (head, picked[start : start + chunk_tokens], targets[start : start + chunk_tokens], among)
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_label_logps, *part, use_reentrant=False))
        else:
            pieces.append(_label_logps(*part))
    flat = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    logps = torch.zeros(shifted.shape, dtype=torch.float32, device=hidden.device).masked_scatter(mask, flat)
    return logps, mask


def use_fused_loss(options: Mapping[str, Any], label_smoothing: float) -> bool:
    """The `fused_ce` option: auto (default: on when label smoothing is on), or a boolean."""
    value = str(options.get("fused_ce", "auto")).strip().lower()
    if value == "auto":
        return label_smoothing > 0
    return value not in ("0", "false", "no", "off", "")
