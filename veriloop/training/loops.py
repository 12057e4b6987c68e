"""Trainers on a plain PyTorch loop, where TRL has no fitting trainer or loss:

* preference with EPA or NS-DPO (and sigmoid/IPO for comparison), reference log-probs precomputed
  once and cached on disk, so no reference model is held during training;
* reward models: Bradley-Terry with muCode's L2 penalty, or pointwise BCE;
* PRM: a per-token score head trained with BCE at each step's last token;
* Q-RM: per-token scores trained from preference pairs (mean score margin with a margin gamma);
* REINFORCE whose token advantages are Q-RM token rewards.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

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
    data_hash,
    encode,
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
from veriloop.training.configs import DPOConfig, PRMConfig, QRMConfig, ReinforceConfig, RMConfig
from veriloop.training.fused_loss import fused_sequence_logps, use_fused_loss

T = TypeVar("T")

LOOP_PREFERENCE_LOSSES = ("sigmoid", "ipo", "epa", "ns_dpo")


def _split(rows: list[Row], fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """(train, held-out): held-out gets `fraction` of the rows (at least one when there are two or more)."""
    if fraction <= 0 or len(rows) < 2:
        return rows, []
    shuffled = rows[:]
    random.Random(seed).shuffle(shuffled)
    cut = max(1, round(len(rows) * fraction))
    return shuffled[cut:], shuffled[:cut]


def _batch(rows: Sequence[T], step: int, size: int) -> list[T]:
    start = (step * size) % len(rows)
    return [rows[(start + offset) % len(rows)] for offset in range(min(size, len(rows)))]


def _causal_lm(spec: TrainSpec, settings: Settings) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    folder = model_folder(spec, settings)
    tokenizer = load_tokenizer(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model, tokenizer


def _head_model(spec: TrainSpec, settings: Settings, kind: str) -> tuple[Any, Any]:
    """A trunk from the base model with a fresh scalar head: per sequence (`seq`) or per token (`token`)."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    folder = model_folder(spec, settings)
    tokenizer = load_tokenizer(folder)
    factory: Any = AutoModelForSequenceClassification if kind == "seq" else AutoModelForTokenClassification
    model: Any = factory.from_pretrained(folder, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if isinstance(head, torch.nn.Linear):  # muCode: N(0, 1/sqrt(hidden + 1)), dropout off
        torch.nn.init.normal_(head.weight, std=1.0 / (model.config.hidden_size + 1) ** 0.5)
        if head.bias is not None:
            torch.nn.init.zeros_(head.bias)
    model = with_lora(model, spec, "SEQ_CLS" if kind == "seq" else "TOKEN_CLS", head="score")
    return model, tokenizer


def _completion_mask(labels: torch.Tensor) -> torch.Tensor:
    return labels != losses.IGNORE_INDEX


# --------------------------------------------------------------------------- preference (EPA, NS-DPO)


def _policy_logps(model: Any, items: Sequence[Encoded], pad_id: int, fused: bool = False) -> torch.Tensor:
    """Sequence log-probs; `fused` (option `fused_ce=true`) never builds the full logits."""
    ids, mask, labels = pad_batch(items, pad_id)
    if fused:
        return fused_sequence_logps(model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    logits = model(input_ids=ids, attention_mask=mask).logits
    return losses.sequence_logps(logits, labels)


def timesteps_from_rows(rows: Sequence[Row]) -> list[int]:
    """NS-DPO time steps: whole days since the oldest pair's `created_at` (0 when a row has none)."""
    stamps = [datetime.fromisoformat(str(row["created_at"])) if row.get("created_at") else None for row in rows]
    known = [stamp for stamp in stamps if stamp is not None]
    if not known:
        return [0] * len(rows)
    first = min(known)
    return [int((stamp - first).total_seconds() // 86400) if stamp is not None else 0 for stamp in stamps]


def _reference_logps(
    spec: TrainSpec, model: Any, tokenizer: Any, encoded: list[tuple[Encoded, Encoded]]
) -> torch.Tensor:
    """[N, 2] reference log-probs (chosen, rejected) under the starting weights, cached in `out`."""
    key = content_hash([[item.input_ids for item in pair] for pair in encoded])[:16]
    cache = spec.out / f"ref_logps-{key}.pt"
    if cache.is_file():
        cached = torch.load(cache)
        assert isinstance(cached, torch.Tensor)
        return cached
    values = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(encoded), spec.batch_size):
            chunk = encoded[start : start + spec.batch_size]
            flat = [item for pair in chunk for item in pair]
            values.append(_policy_logps(model, flat, tokenizer.pad_token_id).view(-1, 2))
    result = torch.cat(values)
    spec.out.mkdir(parents=True, exist_ok=True)
    torch.save(result, cache)
    return result


def train_preference_loop(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """DPO-family training with a loss chosen by name (sigmoid, ipo, epa, ns_dpo).

    EPA contrasts each chosen response against every rejected response of the same prompt in the
    data (its strong negatives). NS-DPO discounts pairs by age: t = days since the oldest pair,
    T = newest + 1, gamma from `options["gamma"]` (0.95).
    """
    config = DPOConfig.of(spec)
    loss_name = config.loss
    fused = use_fused_loss(
        config.model_dump(), 0.0
    )  # DPO's label smoothing is on the pair, not the tokens: opt in only
    if loss_name not in LOOP_PREFERENCE_LOSSES:
        raise ConfigError(f"preference loss {loss_name!r} is not one of {', '.join(LOOP_PREFERENCE_LOSSES)}")
    beta, gamma = config.beta, config.gamma
    rows = read_rows(spec, ("prompt", "chosen", "rejected"))
    seed_everything(spec.seed)
    model, tokenizer = _causal_lm(spec, settings)
    encoded = [
        (
            encode(tokenizer, row["prompt"], row["chosen"], spec.max_length),
            encode(tokenizer, row["prompt"], row["rejected"], spec.max_length),
        )
        for row in rows
    ]
    reference = _reference_logps(spec, model, tokenizer, encoded)
    model = with_lora(model, spec, "CAUSAL_LM")
    times = torch.tensor(timesteps_from_rows(rows))
    current = float(times.max()) + 1.0
    prompt_keys = [content_hash(row["prompt"]) for row in rows]
    negatives: dict[str, list[int]] = {}
    for index, key in enumerate(prompt_keys):
        negatives.setdefault(key, []).append(index)
    order = list(range(len(rows)))
    random.Random(spec.seed).shuffle(order)

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch = _batch(order, step, spec.batch_size)
        flat = [item for index in batch for item in encoded[index]]
        logps = _policy_logps(model, flat, tokenizer.pad_token_id, fused).view(-1, 2)
        ref = reference[batch]
        chosen, rejected = logps[:, 0], logps[:, 1]
        if loss_name == "sigmoid":
            per = losses.dpo_loss(chosen, rejected, ref[:, 0], ref[:, 1], beta=beta)
        elif loss_name == "ipo":
            per = losses.ipo_loss(chosen, rejected, ref[:, 0], ref[:, 1], beta=beta)
        elif loss_name == "ns_dpo":
            per = losses.ns_dpo_loss(
                chosen, rejected, ref[:, 0], ref[:, 1], times[batch], current_time=current, beta=beta, gamma=gamma
            )
        else:
            per = _epa_batch(
                model, tokenizer, batch, logps, ref, encoded, reference, prompt_keys, negatives, beta, fused
            )
        margin = ((chosen - ref[:, 0]) - (rejected - ref[:, 1])).detach()
        return per.mean(), {"margin": float(margin.mean()), "accuracy": float((margin > 0).float().mean())}

    state = run_loop(
        model, spec, step_loss, learning_rate=spec.learning_rate or (5e-5 if spec.lora else 5e-6), progress=progress
    )
    metrics = {"loss_type": loss_name, "beta": beta, **loss_summary(state.losses)}
    if loss_name == "ns_dpo":
        metrics["gamma"] = gamma
    return save_and_register(
        spec,
        settings,
        model,
        tokenizer,
        rows_hash=data_hash(rows, "preference"),
        steps=state.step,
        resumed_from=state.resumed_from,
        metrics=metrics,
    )


def _epa_batch(
    model: Any,
    tokenizer: Any,
    batch: list[int],
    logps: torch.Tensor,
    ref: torch.Tensor,
    encoded: list[tuple[Encoded, Encoded]],
    reference: torch.Tensor,
    prompt_keys: list[str],
    negatives: dict[str, list[int]],
    beta: float,
    fused: bool = False,
) -> torch.Tensor:
    """EPA per row: the row's own rejected plus the other rejected responses of its prompt as negatives."""
    extra_index = sorted({other for index in batch for other in negatives[prompt_keys[index]]} - set(batch))
    extra: dict[int, torch.Tensor] = {}
    if extra_index:
        extra_logps = _policy_logps(model, [encoded[other][1] for other in extra_index], tokenizer.pad_token_id, fused)
        extra = {other: extra_logps[k] - reference[other, 1] for k, other in enumerate(extra_index)}
    in_batch = {index: logps[k, 1] - ref[k, 1] for k, index in enumerate(batch)}
    width = max(len(negatives[prompt_keys[index]]) for index in batch)
    strong = torch.zeros(len(batch), width, dtype=logps.dtype)
    present = torch.zeros(len(batch), width, dtype=torch.bool)
    for k, index in enumerate(batch):
        found = [in_batch.get(other, extra.get(other)) for other in negatives[prompt_keys[index]]]
        values = torch.stack([value for value in found if value is not None])
        strong = strong.index_put((torch.full((len(values),), k), torch.arange(len(values))), values)
        present[k, : len(values)] = True
    positive = logps[:, 0] - ref[:, 0]
    return losses.epa_loss(positive, strong, beta=beta, strong_mask=present)


# --------------------------------------------------------------------------- reward models


def _scores(model: Any, items: Sequence[Encoded], pad_id: int) -> torch.Tensor:
    ids, mask, _ = pad_batch(items, pad_id)
    scores: torch.Tensor = model(input_ids=ids, attention_mask=mask).logits[:, 0]
    return scores


ACCURACY_ROWS = 32
"""Rows each accuracy (held-out before and after, train) is measured on: a check, at about 6 s a pair of 512-token
replies on a 0.5B model here; scoring a 736-pair verifier's every row took longer than its training."""


def train_reward_model(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """A scalar reward model: Bradley-Terry + L2 on preference rows (`loss=bt`) or BCE on labelled rows (`bce`).

    A held-out share of the rows (`eval_fraction`, 0.2) measures how often the trained scores rank
    chosen above rejected (BT) or classify the label (BCE); both numbers go into the checkpoint's metrics.
    """
    config = RMConfig.of(spec)
    loss_name, l2 = config.loss, config.l2
    if loss_name == "bt":
        rows = read_rows(spec, ("prompt", "chosen", "rejected"))
    else:
        rows = read_rows(spec, ("prompt", "completion", "label"))
    train, held = _split(rows, config.eval_fraction, spec.seed)
    seed_everything(spec.seed)
    model, tokenizer = _head_model(spec, settings, "seq")
    pad = tokenizer.pad_token_id

    def enc(prompt: Any, completion: Any) -> Encoded:
        return encode(tokenizer, prompt, completion, spec.max_length)

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch = _batch(train, step, spec.batch_size)
        if loss_name == "bt":
            scores = _scores(model, [enc(r["prompt"], r[key]) for r in batch for key in ("chosen", "rejected")], pad)
            chosen, rejected = scores.view(-1, 2)[:, 0], scores.view(-1, 2)[:, 1]
            loss = losses.bradley_terry_loss(chosen, rejected, l2=l2)
            return loss, {"accuracy": float((chosen > rejected).float().mean())}
        scores = _scores(model, [enc(r["prompt"], r["completion"]) for r in batch], pad)
        labels = torch.tensor([float(bool(r["label"])) for r in batch])
        return losses.bce_reward_loss(scores, labels), {
            "accuracy": float(((scores > 0).float() == labels).float().mean())
        }

    before = _rm_accuracy(model, held[:ACCURACY_ROWS], enc, pad, loss_name)
    state = run_loop(
        model, spec, step_loss, learning_rate=spec.learning_rate or (1e-4 if spec.lora else 1e-5), progress=progress
    )
    metrics: dict[str, Any] = {"loss_type": loss_name, "l2": l2, **loss_summary(state.losses)}
    metrics.update({"heldout_rows": len(held), "heldout_accuracy_before": before})
    metrics["heldout_accuracy"] = _rm_accuracy(model, held[:ACCURACY_ROWS], enc, pad, loss_name)
    metrics["train_accuracy"] = _rm_accuracy(model, train[:ACCURACY_ROWS], enc, pad, loss_name)
    metrics["accuracy_rows"] = min(len(held), ACCURACY_ROWS)
    return save_and_register(
        spec,
        settings,
        model,
        tokenizer,
        rows_hash=data_hash(rows, "preference" if loss_name == "bt" else "verifier"),
        steps=state.step,
        resumed_from=state.resumed_from,
        metrics=metrics,
        extra_files={"veriloop-head.json": {"kind": "reward", "loss": loss_name}},
    )


def _rm_accuracy(model: Any, rows: list[Row], enc: Any, pad: int, loss_name: str) -> float | None:
    if not rows:
        return None
    model.eval()
    right = 0
    with torch.no_grad():
        for row in rows:
            if loss_name == "bt":
                chosen, rejected = _scores(
                    model, [enc(row["prompt"], row["chosen"]), enc(row["prompt"], row["rejected"])], pad
                )
                right += int(chosen > rejected)
            else:
                [score] = _scores(model, [enc(row["prompt"], row["completion"])], pad)
                right += int((score > 0) == bool(row["label"]))
    model.train()
    return right / len(rows)


# --------------------------------------------------------------------------- PRM


STEP_SEPARATOR = "\n\n"


def encode_steps(
    tokenizer: Any, prompt: Any, steps: Sequence[str], labels: Sequence[Any], max_length: int
) -> tuple[Encoded, list[int], list[float]]:
    """Prompt + steps joined by blank lines; returns the encoding, each kept step's last position and label.

    The prompt keeps its last `max_length // 2` tokens; steps that no longer fit are dropped.
    """
    base = encode(tokenizer, prompt, "", max_length)
    prompt_ids = [
        token for token, label in zip(base.input_ids, base.labels, strict=True) if label == losses.IGNORE_INDEX
    ]
    ids = prompt_ids[-(max_length // 2) :]  # the steps get at least half of the room
    positions: list[int] = []
    targets: list[float] = []
    for index, (step, label) in enumerate(zip(steps, labels, strict=True)):
        text = step + (STEP_SEPARATOR if index < len(steps) - 1 else "")
        chunk = list(tokenizer(text, add_special_tokens=False).input_ids)
        if not chunk or len(ids) + len(chunk) > max_length:
            break
        ids.extend(chunk)
        positions.append(len(ids) - 1)
        targets.append(float(label))
    return Encoded(ids, [losses.IGNORE_INDEX] * len(ids)), positions, targets


def train_prm(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """A process reward model: a per-token score head, BCE at the last token of every labelled step."""
    rows = read_rows(spec, ("prompt", "completions", "labels"))
    train, held = _split(rows, PRMConfig.of(spec).eval_fraction, spec.seed)
    seed_everything(spec.seed)
    model, tokenizer = _head_model(spec, settings, "token")
    pad = tokenizer.pad_token_id
    encoded = [encode_steps(tokenizer, r["prompt"], r["completions"], r["labels"], spec.max_length) for r in train]
    encoded = [item for item in encoded if item[1]]
    if not encoded:
        raise ConfigError(f"no step of {spec.data} fits in max_length {spec.max_length}")

    def logits_at(batch: Sequence[tuple[Encoded, list[int], list[float]]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask, _ = pad_batch([item[0] for item in batch], pad)
        scores = model(input_ids=ids, attention_mask=mask).logits[..., 0]
        rows_index = torch.tensor([row for row, item in enumerate(batch) for _ in item[1]])
        cols_index = torch.tensor([pos for item in batch for pos in item[1]])
        return scores[rows_index, cols_index], torch.tensor([t for item in batch for t in item[2]])

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        logits, targets = logits_at(_batch(encoded, step, spec.batch_size))
        accuracy = float(((logits > 0).float() == targets).float().mean())
        return losses.bce_reward_loss(logits, targets), {"step_accuracy": accuracy}

    state = run_loop(
        model, spec, step_loss, learning_rate=spec.learning_rate or (1e-4 if spec.lora else 1e-5), progress=progress
    )
    metrics: dict[str, Any] = {**loss_summary(state.losses), "heldout_rows": len(held)}
    held_encoded = [
        item
        for item in (encode_steps(tokenizer, r["prompt"], r["completions"], r["labels"], spec.max_length) for r in held)
        if item[1]
    ]
    if held_encoded:
        with torch.no_grad():
            logits, targets = logits_at(held_encoded)
        metrics["heldout_step_accuracy"] = float(((logits > 0).float() == targets).float().mean())
    return save_and_register(
        spec,
        settings,
        model,
        tokenizer,
        rows_hash=data_hash(rows, "prm"),
        steps=state.step,
        resumed_from=state.resumed_from,
        metrics=metrics,
        extra_files={"veriloop-head.json": {"kind": "prm", "separator": STEP_SEPARATOR}},
    )


# --------------------------------------------------------------------------- Q-RM and REINFORCE


def _token_scores(model: Any, items: Sequence[Encoded], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position scores [B, T] and the completion mask: the score at t judges token t."""
    ids, mask, labels = pad_batch(items, pad)
    scores = model(input_ids=ids, attention_mask=mask).logits[..., 0]
    return scores, _completion_mask(labels)


def train_qrm(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """Q-RM from preference pairs: L = -log sigma(beta (S_c - S_r) - gamma), S the mean token score."""
    config = QRMConfig.of(spec)
    beta, gamma = config.beta, config.gamma
    rows = read_rows(spec, ("prompt", "chosen", "rejected"))
    train, held = _split(rows, config.eval_fraction, spec.seed)
    seed_everything(spec.seed)
    model, tokenizer = _head_model(spec, settings, "token")
    pad = tokenizer.pad_token_id

    def pair_scores(batch: Sequence[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        items = [
            encode(tokenizer, r["prompt"], r[key], spec.max_length) for r in batch for key in ("chosen", "rejected")
        ]
        scores, mask = _token_scores(model, items, pad)
        return scores[0::2], mask[0::2], scores[1::2], mask[1::2]

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        sc, mc, sr, mr = pair_scores(_batch(train, step, spec.batch_size))
        better = losses.masked_mean(sc, mc) > losses.masked_mean(sr, mr)
        return losses.qrm_pair_loss(sc, mc, sr, mr, beta=beta, gamma=gamma).mean(), {
            "accuracy": float(better.float().mean())
        }

    state = run_loop(
        model, spec, step_loss, learning_rate=spec.learning_rate or (1e-4 if spec.lora else 1e-5), progress=progress
    )
    metrics: dict[str, Any] = {"beta": beta, "gamma": gamma, **loss_summary(state.losses), "heldout_rows": len(held)}
    if held:
        with torch.no_grad():
            sc, mc, sr, mr = pair_scores(held)
        metrics["heldout_accuracy"] = float((losses.masked_mean(sc, mc) > losses.masked_mean(sr, mr)).float().mean())
    return save_and_register(
        spec,
        settings,
        model,
        tokenizer,
        rows_hash=data_hash(rows, "preference"),
        steps=state.step,
        resumed_from=state.resumed_from,
        metrics=metrics,
        extra_files={"veriloop-head.json": {"kind": "qrm", "beta": beta, "gamma": gamma}},
    )


def train_reinforce(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """REINFORCE with Q-RM token rewards (the Q-RM paper's use): sample, score each token, push up log pi.

    `options["qrm"]` names the Q-RM (`checkpoint:ID` or a folder); it must share the policy's
    tokenizer. Prompts come from any export with a `prompt` column; `gen_tokens` (48) caps samples.
    """
    from transformers import AutoModelForTokenClassification

    from veriloop.llm.embedded import resolve_model

    config = ReinforceConfig.of(spec)
    qrm_spec = config.qrm
    if not qrm_spec:
        raise ConfigError("train reinforce needs a Q-RM: --option qrm=checkpoint:ID (from `veriloop train qrm`)")
    gen_tokens, temperature = config.gen_tokens, config.temperature
    rows = read_rows(spec, ("prompt",))
    seed_everything(spec.seed)
    policy, tokenizer = _causal_lm(spec, settings)
    qrm: Any = AutoModelForTokenClassification.from_pretrained(
        resolve_model(str(qrm_spec), settings), dtype=torch.float32
    )
    qrm.eval()
    policy = with_lora(policy, spec, "CAUSAL_LM")
    pad = tokenizer.pad_token_id
    order = list(range(len(rows)))
    random.Random(spec.seed).shuffle(order)
    score_log: list[float] = []

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch = [rows[index] for index in _batch(order, step, spec.batch_size)]
        items = []
        for row in batch:
            prompt_ids = encode(tokenizer, row["prompt"], "", spec.max_length - gen_tokens)
            ids = [
                token
                for token, label in zip(prompt_ids.input_ids, prompt_ids.labels, strict=True)
                if label == losses.IGNORE_INDEX
            ]
            with torch.no_grad():
                out = policy.generate(
                    input_ids=torch.tensor([ids]),
                    attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                    max_new_tokens=gen_tokens,
                    do_sample=True,
                    temperature=temperature,
                    top_p=1.0,
                    pad_token_id=pad,
                )
            response = out[0, len(ids) :].tolist()
            items.append(Encoded(ids + response, [losses.IGNORE_INDEX] * len(ids) + response))
        with torch.no_grad():
            scores, mask = _token_scores(qrm, items, pad)
        rewards = losses.qrm_token_rewards(scores, mask)
        input_ids, attention, labels = pad_batch(items, pad)
        logits = policy(input_ids=input_ids, attention_mask=attention).logits
        logps, logp_mask = losses.token_logps(logits, labels)
        sequence_score = losses.masked_mean(scores, mask).mean()
        score_log.append(float(sequence_score))
        loss = losses.reinforce_loss(logps, rewards[:, 1:], logp_mask)
        return loss, {"qrm_score": float(sequence_score)}

    state = run_loop(
        policy, spec, step_loss, learning_rate=spec.learning_rate or (1e-5 if spec.lora else 1e-6), progress=progress
    )
    metrics: dict[str, Any] = {"qrm": str(qrm_spec), **loss_summary(state.losses)}
    if score_log:
        metrics.update({"qrm_score_first": score_log[0], "qrm_score_last": score_log[-1]})
    return save_and_register(
        spec,
        settings,
        policy,
        tokenizer,
        rows_hash=content_hash([row["prompt"] for row in rows]),
        steps=state.step,
        resumed_from=state.resumed_from,
        metrics=metrics,
    )
