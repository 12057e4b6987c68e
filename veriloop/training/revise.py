"""ReVISE's training step: L = L_SFT(chosen) + lambda * L_DPO on replies that continue a turn mid-way.

ReVISE's preference rows judge what follows an attempt inside the same assistant turn (a decision
token, or `[refine]` and a corrected attempt), so a row is a conversation (`prompt`), the assistant
text so far (`prefix`) and two continuations (`chosen`, `rejected`). The shared preference loop
chat-templates completions as whole turns, hence this small trainer on the shared pieces
(`run_loop`, `save_and_register`, `losses`). LoRA adapts every linear layer; the rows of the new
special tokens (`options["train_tokens"]`) are trained too, since LoRA never touches embeddings.

The paper's model generates its decision token; veriloop reads the decision as the likelier of `[eos]` and
`[refine]` and never generates it. With `decision_tokens` set (the curriculum sets both), a decision label is
scored among the decisions only. Scored over the whole vocabulary, its loss starts near 20 nats (the new tokens
begin at about 1e-8) and the quickest way down is to lift the decision tokens everywhere: on Qwen2.5-Coder-0.5B,
8 + 8 LoRA steps at 3e-4 left a model that wrote " incorrect ... fix" inside its code (M1, pass@1 0.51 -> 0.03)
or put p([eos]) near 1 at most decision points and answered worse (M2: pass@1 sampling 0.20).

`anchor_weight` adds an SFT term on the code of right attempts (the attempt as the model wrote it, at the end of
the row's prefix), meant to keep the code writing where it was while LoRA learns what follows an attempt. It was
added when half of Qwen2.5-Coder-0.5B's first attempts came to close their block with two backticks. It did not
stop that (60/80 with it, 44/80 without); the cause was the transcripts' fence, "```\n", tokenised as "``" +
"`\n" (fixed in `agents/revise/prompts.SEGMENT_FENCE`). With that fixed and the anchor on, code writing held (first
attempts right 41/80 -> 40/80); the anchor's own share of that is unmeasured.

Options: `dpo_weight` (lambda, 0.1 as reported for the paper), `beta` (0.1), `train_tokens`, `decision_tokens`,
`anchor_weight`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.store.exports import Row, content_hash
from veriloop.training import losses
from veriloop.training.common import (
    Encoded,
    Progress,
    TrainResult,
    TrainSpec,
    load_tokenizer,
    loss_summary,
    model_folder,
    pad_batch,
    read_rows,
    run_loop,
    save_and_register,
    seed_everything,
    with_lora,
)
from veriloop.training.configs import ReviseStageConfig
from veriloop.training.fused_loss import labelled_token_logps

COLUMNS = ("prompt", "prefix", "chosen", "rejected")

STAGE_VERSION = 3
"""Raised whenever a stage's loss or row encoding changes, so that a curriculum's cached stage folders are trained
afresh rather than resumed (2: decisions weighed apart from the other tokens, `decision_weighted_nll`; 3: a long
row loses its continuation's end before its context's start, `encode_continuation`)."""


def encode_continuation(tokenizer: Any, prompt: Any, prefix: str, completion: str, max_length: int) -> Encoded:
    """Chat-template the conversation, append the reply so far, then the continuation (the only trained part).

    A long row loses the end of its continuation first; only a context longer than `max_length - 1` by itself loses
    its start. Cutting the context to make room for the continuation made a row's decision context depend on what
    follows it: at 384 tokens, 26 of 34 stage-2 `correct` rows of Qwen2.5-Coder-0.5B lost their chat header, and 2
    of 34 `verify_right` rows did. The model learnt that cue for `[refine]`, and evaluation contexts, never cut,
    all read as right (M2 refined 0 of 80 trajectories).
    """
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False) + prefix
    prompt_ids = list(tokenizer(text, add_special_tokens=False).input_ids)[-(max_length - 1) :]
    reply_ids = list(tokenizer(completion, add_special_tokens=False).input_ids)[: max_length - len(prompt_ids)]
    return Encoded(prompt_ids + reply_ids, [losses.IGNORE_INDEX] * len(prompt_ids) + reply_ids)


def context_was_cut(item: Encoded, max_length: int) -> bool:
    """Whether the item's context filled the window (and so may have lost its start)."""
    return item.labels.count(losses.IGNORE_INDEX) >= max_length - 1


def _logps(
    model: Any, items: Sequence[Encoded], pad_id: int, choices: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log-probs of each item's trained part, its SFT loss); a label among `choices` is scored against
    the choices only."""
    ids, mask, labels = pad_batch(items, pad_id)
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    token_logps, trained = labelled_token_logps(model, inputs, choices=choices)
    decisions = trained & torch.isin(labels[:, 1:], torch.tensor(sorted(set(choices)), dtype=torch.long))
    return token_logps.sum(dim=-1), decision_weighted_nll(token_logps, trained, decisions)


def decision_weighted_nll(token_logps: torch.Tensor, trained: torch.Tensor, decisions: torch.Tensor) -> torch.Tensor:
    """Per row: the decision tokens' mean NLL plus the other trained tokens' mean NLL (a missing part adds 0).

    A plain per-token mean gives `[refine]` in "[refine] fix [eos]" about 1/100 of a row's weight, and `[eos]` in a
    verify-right row all of it: stage 2 then taught `[eos]` everywhere (Qwen2.5-Coder-0.5B's M2 refined 0 of 80
    trajectories, p([eos]) above 0.999999 after right and wrong attempts alike). Scored as two means, a decision
    weighs the same in every row. Without decision tokens this is the plain per-token mean.
    """
    others = trained & ~decisions

    def mean_nll(part: torch.Tensor) -> torch.Tensor:
        return -(token_logps * part).sum(dim=-1) / part.sum(dim=-1).clamp(min=1)

    return mean_nll(decisions) + mean_nll(others)


def anchor_items(tokenizer: Any, rows: Sequence[Row], max_length: int) -> dict[int, Encoded]:
    """By row index, the right attempts' own code as an SFT item: the row's prefix up to its `attempt` is the
    context, the attempt the trained part."""
    items = {}
    for index, row in enumerate(rows):
        attempt, prefix = row.get("attempt"), row["prefix"]
        if row.get("passed") and isinstance(attempt, str) and attempt and prefix.endswith(attempt):
            before = prefix[: len(prefix) - len(attempt)]
            items[index] = encode_continuation(tokenizer, row["prompt"], before, attempt, max_length)
    return items


def step_batches(count: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """The rows each step trains on: one seeded shuffle of the rows, walked in order and wrapped around."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    size = min(batch_size, count)
    return [[order[(step * size + offset) % count] for offset in range(size)] for step in range(steps)]


def train_sft_dpo(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """One ReVISE stage on {prompt, prefix, chosen, rejected} rows; registers the merged checkpoint."""
    options = ReviseStageConfig.of(spec)
    beta, dpo_weight = options.beta, options.dpo_weight
    rows: list[Row] = read_rows(spec, COLUMNS)
    seed_everything(spec.seed)
    from transformers import AutoModelForCausalLM

    folder = model_folder(spec, settings)
    tokenizer = load_tokenizer(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    vocab = tokenizer.get_vocab()
    names = options.train_tokens
    unknown = [token for token in [*names, *options.decision_tokens] if token not in vocab]
    if unknown:
        raise ConfigError(f"train_tokens/decision_tokens {unknown} are not in the vocabulary of {folder}")
    choices = [int(vocab[token]) for token in options.decision_tokens]
    encoded = [
        (
            encode_continuation(tokenizer, row["prompt"], row["prefix"], row["chosen"], spec.max_length),
            encode_continuation(tokenizer, row["prompt"], row["prefix"], row["rejected"], spec.max_length),
        )
        for row in rows
    ]
    anchors = anchor_items(tokenizer, rows, spec.max_length) if options.anchor_weight > 0 else {}
    if options.anchor_weight > 0 and not any("attempt" in row for row in rows):
        raise ConfigError(
            f"anchor_weight needs rows that keep their `attempt` (rows from agents/revise/curriculum do); "
            f"{spec.data} has none: write it again, or set anchor_weight=0"
        )
    # Rows with attempts but none right (a weak model's first runs) train without the anchor: anchored_rows says 0.
    pad = int(tokenizer.pad_token_id)
    batches = step_batches(len(rows), spec.steps, spec.batch_size, spec.seed)
    # The reference pass costs a forward per row: only the rows the steps will visit need one.
    visited = sorted({index for batch in batches for index in batch})
    model.eval()
    with torch.no_grad():
        chunks = [visited[start : start + spec.batch_size] for start in range(0, len(visited), spec.batch_size)]
        sums = torch.cat(
            [_logps(model, [item for index in chunk for item in encoded[index]], pad, choices)[0] for chunk in chunks]
        ).view(-1, 2)
    reference = dict(zip(visited, sums, strict=True))
    # A step holds three graphs (chosen, rejected, anchor) of up to `batch_size` rows each until its backward: at
    # 384 tokens and 4 rows, Qwen2.5-Coder-0.5B's kept activations ran the anchored stage out of 24 GiB. Layers
    # recompute theirs in the backward pass instead (the same gradients; about a third more compute).
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = with_lora(model, spec, "CAUSAL_LM", token_ids=[int(vocab[token]) for token in names])

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch = batches[step]
        sums, nlls = _logps(model, [item for index in batch for item in encoded[index]], pad, choices)
        sums, nlls = sums.view(-1, 2), nlls.view(-1, 2)
        ref = torch.stack([reference[index] for index in batch])
        sft = nlls[:, 0].mean()
        dpo = losses.dpo_loss(sums[:, 0], sums[:, 1], ref[:, 0], ref[:, 1], beta=beta).mean()
        margin = losses.preference_margin(sums[:, 0], sums[:, 1], ref[:, 0], ref[:, 1]).detach()
        metrics = {
            "sft": float(sft.detach()),
            "dpo": float(dpo.detach()),
            "accuracy": float((margin > 0).float().mean()),
        }
        loss = sft + dpo_weight * dpo
        anchored = [anchors[index] for index in batch if index in anchors]
        if anchored:
            anchor = _logps(model, anchored, pad)[1].mean()
            loss = loss + options.anchor_weight * anchor
            metrics["anchor"] = float(anchor.detach())
        return loss, metrics

    state = run_loop(
        model, spec, step_loss, learning_rate=spec.learning_rate or (1e-4 if spec.lora else 1e-5), progress=progress
    )
    metrics = {
        "loss_type": "sft+dpo",
        "beta": beta,
        "dpo_weight": dpo_weight,
        "anchor_weight": options.anchor_weight,
        "anchored_rows": len(anchors),
        "contexts_cut": sum(context_was_cut(chosen, spec.max_length) for chosen, _ in encoded),
        **loss_summary(state.losses),
    }
    rows_hash = content_hash([[row.get(column) for column in COLUMNS] for row in rows])
    return save_and_register(
        spec,
        settings,
        model,
        tokenizer,
        rows_hash=rows_hash,
        steps=state.step,
        metrics=metrics,
        resumed_from=state.resumed_from,
    )
