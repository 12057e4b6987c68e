"""What every trainer shares: the run spec, model loading (full or LoRA), tokenisation of
conversational rows, the checkpoint that a finished training saves and registers, and progress.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import RegisteredModel, new_id
from veriloop.store.exports import CONTENT_COLUMNS, Row, content_hash, load_rows
from veriloop.training.losses import IGNORE_INDEX

log = logging.getLogger(__name__)

Progress = Callable[[int, int, dict[str, float]], None]
"""Called after each optimiser step with (step, total steps, metrics)."""


@dataclass
class TrainSpec:
    """One training run: what to train, on what, for how long, and where it goes."""

    method: str
    data: Path
    out: Path
    model: str | None = None
    """Base model spec (the embedded default, a folder, or `checkpoint:ID`); None takes settings.llm.model."""
    lora: bool = False
    lora_rank: int = 16
    steps: int = 10
    batch_size: int = 2
    learning_rate: float | None = None
    max_length: int = 256
    seed: int = 0
    save_every: int = 5
    bf16: bool = False
    """bf16 autocast on the CPU: 1.7x faster on CPUs with avx512_bf16/AMX, slower on others."""
    threads: int | None = None
    """Torch threads while this trains (restored after); None keeps the process's. A training that runs alone
    may take every core, where sampling beside the sandbox keeps one."""
    options: dict[str, Any] = field(default_factory=dict)
    """Method-specific knobs: loss, beta, label_smoothing, gamma, l2, precompute_ref, ..."""
    register: bool = True


@dataclass
class TrainResult:
    """What a finished training reports; `model_id` is what `checkpoint:ID` serves."""

    method: str
    model_id: str | None
    path: str
    base: str
    data_hash: str
    steps: int
    metrics: dict[str, Any]
    resumed_from: int = 0


@contextmanager
def spec_threads(spec: TrainSpec) -> Iterator[int]:
    """Run the block under `spec.threads` torch threads (None: the process's), restoring the count after; yields
    the count used, which a trainer's caller reports beside its step times."""
    before = torch.get_num_threads()
    used = spec.threads or before
    torch.set_num_threads(used)
    try:
        yield used
    finally:
        torch.set_num_threads(before)


def stderr_progress(step: int, total: int, metrics: dict[str, float]) -> None:
    shown = " ".join(f"{key}={value:.4g}" for key, value in metrics.items())
    print(f"step {step}/{total} {shown}", file=sys.stderr, flush=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def base_spec(spec: TrainSpec, settings: Settings) -> str:
    return spec.model or settings.llm.model


def model_folder(spec: TrainSpec, settings: Settings) -> Path:
    from veriloop.llm.embedded import resolve_model  # resolves checkpoint:ID through the store

    return resolve_model(base_spec(spec, settings), settings)


def read_rows(spec: TrainSpec, needed: Sequence[str]) -> list[Row]:
    rows = load_rows(spec.data)
    if not rows:
        raise ConfigError(f"dataset {spec.data} has no rows")
    missing = [column for column in needed if column not in rows[0]]
    if missing:
        raise ConfigError(
            f"dataset {spec.data} lacks column(s) {', '.join(missing)} that `train {spec.method}` needs "
            f"(it has: {', '.join(rows[0])})"
        )
    return rows


def data_hash(rows: Sequence[Row], kind: str) -> str:
    columns = CONTENT_COLUMNS[kind]
    return content_hash([[row.get(column) for column in columns] for row in rows])


def load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def with_lora(
    model: Any,
    spec: TrainSpec,
    task_type: str,
    head: str | None = None,
    token_ids: Sequence[int] = (),
) -> Any:
    """Wrap the model in LoRA adapters on every linear layer (plus a trainable head, and trainable embedding
    rows for `token_ids`, e.g. newly added special tokens, if any)."""
    if not spec.lora:
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=spec.lora_rank,
        lora_alpha=2 * spec.lora_rank,
        target_modules="all-linear",
        lora_dropout=0.0,
        task_type=task_type,
        modules_to_save=[head] if head else None,
        trainable_token_indices=token_rows(model, token_ids),
    )
    return get_peft_model(model, config)


def token_rows(model: Any, token_ids: Sequence[int]) -> dict[str, list[int]] | None:
    """Where `token_ids` train: their input embedding rows and, when the head is not tied to them, their head rows.

    PEFT's list form adapts only the input embedding; on an untied model (Qwen2.5-Coder-0.5B as converted here)
    a new token's output row would stay at its initial copy, so `[eos]`, started from the end-of-turn token, could
    never rise above half of their shared probability.
    """
    if not token_ids:
        return None
    names = {module: name for name, module in model.named_modules()}
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    rows = {names[embedding]: list(token_ids)}
    if head is not None and head.weight is not embedding.weight:
        rows[names[head]] = list(token_ids)
    return rows


def plain_model(model: Any) -> Any:
    """The model without LoRA wrappers: adapters merged into the weights, so the folder loads anywhere."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload()
    return model


def save_and_register(
    spec: TrainSpec,
    settings: Settings,
    model: Any,
    tokenizer: Any,
    *,
    rows_hash: str,
    steps: int,
    metrics: dict[str, Any],
    resumed_from: int = 0,
    extra_files: dict[str, Any] | None = None,
) -> TrainResult:
    """Save the final weights under `out/model` and register them in the store as a checkpoint."""
    final = spec.out / "model"
    final.mkdir(parents=True, exist_ok=True)
    merged = plain_model(model)
    merged.save_pretrained(final)
    tokenizer.save_pretrained(final)
    for name, value in (extra_files or {}).items():
        (final / name).write_text(json.dumps(value, indent=2) + "\n")
    base = base_spec(spec, settings)
    metrics = {
        **metrics,
        "lora": spec.lora,
        "bf16": spec.bf16,
        "steps": steps,
        "max_length": spec.max_length,
        "data": str(spec.data),
    }
    model_id: str | None = None
    if spec.register:
        from veriloop.store import TrajectoryStore

        with TrajectoryStore.from_settings(settings) as store:
            record = store.register_model(
                RegisteredModel(
                    id=new_id(), base=base, method=spec.method, path=str(final), data_hash=rows_hash, metrics=metrics
                )
            )
        model_id = record.id
    return TrainResult(
        method=spec.method,
        model_id=model_id,
        path=str(final),
        base=base,
        data_hash=rows_hash,
        steps=steps,
        metrics=metrics,
        resumed_from=resumed_from,
    )


# --------------------------------------------------------------------------- tokenisation


def _messages(value: Any) -> list[dict[str, str]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [{"role": str(item["role"]), "content": str(item["content"])} for item in value]


def _completion_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "".join(str(item["content"]) for item in value)


@dataclass
class Encoded:
    """One prompt + completion as ids, with labels that train on the completion only."""

    input_ids: list[int]
    labels: list[int]

    @property
    def completion_mask(self) -> list[bool]:
        return [label != IGNORE_INDEX for label in self.labels]


def encode(tokenizer: Any, prompt: Any, completion: Any, max_length: int) -> Encoded:
    """Chat-template a (prompt, completion) pair; keep the prompt's end and the completion's start.

    The completion gets at least half of `max_length`, so a long prompt cannot crowd it out.
    """
    messages = _messages(prompt)
    prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    reply = _completion_text(completion)
    full = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": reply}], add_generation_prompt=False, tokenize=False
    )
    tail = full[len(prompt_text) :] if full.startswith(prompt_text) else reply + (tokenizer.eos_token or "")
    prompt_ids = list(tokenizer(prompt_text, add_special_tokens=False).input_ids)
    reply_ids = list(tokenizer(tail, add_special_tokens=False).input_ids)
    reply_ids = reply_ids[: max(1, max_length - min(len(prompt_ids), max_length // 2))]
    prompt_ids = prompt_ids[-(max_length - len(reply_ids)) :] if max_length > len(reply_ids) else []
    return Encoded(prompt_ids + reply_ids, [IGNORE_INDEX] * len(prompt_ids) + reply_ids)


def pad_batch(items: Sequence[Encoded], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels)."""
    width = max(len(item.input_ids) for item in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item.input_ids)
        ids[row, :n] = torch.tensor(item.input_ids)
        mask[row, :n] = 1
        labels[row, :n] = torch.tensor(item.labels)
    return ids, mask, labels


# --------------------------------------------------------------------------- the plain loop


@dataclass
class LoopState:
    step: int = 0
    losses: list[float] = field(default_factory=list)
    resumed_from: int = 0


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters() if param.requires_grad}


def _layout(weights: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """Names and shapes of trainable weights: a saved loop resumes only into the same layout."""
    return {name: tuple(tensor.shape) for name, tensor in weights.items()}


def run_loop(
    model: Any,
    spec: TrainSpec,
    step_loss: Callable[[int], tuple[torch.Tensor, dict[str, float]]],
    *,
    learning_rate: float,
    progress: Progress | None = None,
) -> LoopState:
    """AdamW for `spec.steps` steps; `step_loss(step)` builds that step's batch and returns (loss, metrics).

    Every `save_every` steps the trainable weights, the optimiser and the step go to
    `out/loop_state.pt`, and a rerun with the same `out` resumes from there, unless the file was saved for other
    trainable weights: then it starts again (silently loading it with `strict=False` would mix two models).
    """
    params = [param for param in model.parameters() if param.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, eps=1e-5)
    state = LoopState()
    state_file = spec.out / "loop_state.pt"
    saved = torch.load(state_file, weights_only=False) if state_file.is_file() else None
    trainable = {name: param for name, param in model.named_parameters() if param.requires_grad}
    if saved is not None and _layout(saved["weights"]) != _layout(trainable):
        log.warning(
            "%s: %s was saved for other trainable weights (another code version or options); training from step 0",
            spec.method,
            state_file,
        )
        saved = None
    if saved is not None:
        model.load_state_dict(saved["weights"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        state = LoopState(step=int(saved["step"]), losses=list(saved["losses"]), resumed_from=int(saved["step"]))
        log.info("resuming %s from step %d", spec.method, state.step)
    model.train()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec.bf16)
    while state.step < spec.steps:
        started = time.perf_counter()
        with autocast:
            loss, metrics = step_loss(state.step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        state.step += 1
        state.losses.append(float(loss.detach()))
        if progress is not None:
            progress(state.step, spec.steps, {"loss": state.losses[-1], **metrics, "s": time.perf_counter() - started})
        if state.step % spec.save_every == 0 or state.step == spec.steps:
            spec.out.mkdir(parents=True, exist_ok=True)
            tmp = state_file.with_suffix(".partial")
            weights = trainable_state(model)
            payload = {"weights": weights, "optimizer": optimizer.state_dict(), "step": state.step}
            torch.save({**payload, "losses": state.losses}, tmp)
            tmp.replace(state_file)
    model.eval()
    return state


def loss_summary(losses: Sequence[float]) -> dict[str, float]:
    if not losses:
        return {}
    window = max(1, len(losses) // 3)
    return {
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_start_mean": sum(losses[:window]) / window,
        "loss_end_mean": sum(losses[-window:]) / window,
    }
