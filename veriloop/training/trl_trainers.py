"""SFT and DPO (sigmoid, IPO, with cDPO label smoothing) on TRL, full or LoRA, on the CPU or a GPU.

TRL 1.16 pitfalls handled here: configs default to bf16 and gradient checkpointing (we set both from
the spec and pass `use_cpu` without CUDA), `DPOConfig` only knows `max_length`, and trainers take
`processing_class=`. With `precompute_ref_log_probs` the reference log-probs are computed once before
training and the reference model is never held in memory (LoRA uses the adapter-disabled model anyway).

SFT with label smoothing (or option `fused_ce=true`) computes its loss by
`fused_loss.fused_causal_lm_loss` from the final hidden states, never building the full logits
(TRL's own label-smoothing path builds them and runs a second forward for its metrics).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.training.common import (
    Progress,
    TrainResult,
    TrainSpec,
    data_hash,
    load_tokenizer,
    loss_summary,
    model_folder,
    read_rows,
    save_and_register,
    seed_everything,
    with_lora,
)
from veriloop.training.configs import DPOConfig, SFTConfig
from veriloop.training.fused_loss import fused_causal_lm_loss, use_fused_loss

TRL_DPO_LOSSES = ("sigmoid", "ipo")


def _dataset(rows: list[dict[str, Any]]) -> Any:
    return importlib.import_module("datasets").Dataset.from_list(rows)


def _common_args(spec: TrainSpec, learning_rate: float) -> dict[str, Any]:
    cpu = not torch.cuda.is_available()
    return {
        "output_dir": str(spec.out / "trl"),
        "max_steps": spec.steps,
        "per_device_train_batch_size": spec.batch_size,
        "learning_rate": learning_rate,
        "max_length": spec.max_length,
        "use_cpu": cpu,
        "bf16": spec.bf16 or not cpu,
        "gradient_checkpointing": False,
        "logging_steps": 1,
        "save_steps": spec.save_every,
        "save_total_limit": 1,
        "report_to": [],
        "seed": spec.seed,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
    }


def _callback(progress: Progress | None, total: int) -> Any:
    from transformers import TrainerCallback

    class Report(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if progress is not None and logs and "loss" in logs:
                shown = {key: float(value) for key, value in logs.items() if isinstance(value, int | float)}
                progress(int(state.global_step), total, shown)

    return Report()


def _quiet(trainer: Any) -> Any:
    """Drop the callback that prints every log dict to stdout (it would corrupt `--json` output)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def _resume_point(spec: TrainSpec) -> tuple[bool, int]:
    folder = spec.out / "trl"
    steps = [
        int(path.name.split("-")[-1]) for path in folder.glob("checkpoint-*") if path.name.split("-")[-1].isdigit()
    ]
    return (True, max(steps)) if steps else (False, 0)


def _losses(trainer: Any) -> list[float]:
    return [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]


def _load_causal_lm(spec: TrainSpec, settings: Settings) -> tuple[Any, Any]:
    """The model and tokenizer, with every end-of-text token in the generation config: TRL's GRPO stops its
    completions there, as the embedded backend does (`llm.batcher.default_eos_ids`)."""
    from transformers import AutoModelForCausalLM

    from veriloop.llm.batcher import default_eos_ids

    folder = model_folder(spec, settings)
    tokenizer = load_tokenizer(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.generation_config.eos_token_id = sorted(default_eos_ids(model, tokenizer))
    return model, tokenizer


def train_dpo(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """DPO on TRL's DPOTrainer; the exported preference rows go in unchanged (extra columns included)."""
    trl = importlib.import_module("trl")

    options = DPOConfig.of(spec)
    loss = options.loss
    if loss not in TRL_DPO_LOSSES:
        raise ConfigError(f"TRL DPO loss {loss!r} is not one of {', '.join(TRL_DPO_LOSSES)}")
    rows = read_rows(spec, ("prompt", "chosen", "rejected"))
    seed_everything(spec.seed)
    model, tokenizer = _load_causal_lm(spec, settings)
    model = with_lora(model, spec, "CAUSAL_LM")
    config = trl.DPOConfig(
        **_common_args(spec, spec.learning_rate or (5e-5 if spec.lora else 5e-6)),
        beta=options.beta,
        loss_type=[loss],
        label_smoothing=options.label_smoothing,
        precompute_ref_log_probs=options.precompute_ref,
    )
    trainer = _quiet(
        trl.DPOTrainer(
            model=model,
            args=config,
            train_dataset=_dataset(rows),
            processing_class=tokenizer,
            callbacks=[_callback(progress, spec.steps)],
        )
    )
    resume, resumed_from = _resume_point(spec)
    trainer.train(resume_from_checkpoint=True if resume else None)
    metrics: dict[str, Any] = {"loss_type": loss, "beta": config.beta, **loss_summary(_losses(trainer))}
    last = [entry for entry in trainer.state.log_history if "rewards/accuracies" in entry]
    if last:
        metrics["reward_accuracy_last"] = float(last[-1]["rewards/accuracies"])
        metrics["reward_margin_last"] = float(last[-1]["rewards/margins"])
    return save_and_register(
        spec,
        settings,
        trainer.model,
        tokenizer,
        rows_hash=data_hash(rows, "preference"),
        steps=int(trainer.state.global_step),
        metrics=metrics,
        resumed_from=resumed_from,
    )


def _fused_sft_trainer(base: type[Any], label_smoothing: float) -> type[Any]:
    """`base` (TRL's SFTTrainer) with its loss computed by the fused linear cross-entropy.

    TRL's token-accuracy and entropy metrics need the logits, so this trainer does not log them.
    """

    class FusedLossSFTTrainer(base):  # type: ignore[misc]
        def compute_loss(
            self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            loss = fused_causal_lm_loss(
                model, inputs, label_smoothing=label_smoothing, num_items_in_batch=num_items_in_batch
            )
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes
            return (loss, None) if return_outputs else loss

    return FusedLossSFTTrainer


def train_sft(spec: TrainSpec, settings: Settings, progress: Progress | None = None) -> TrainResult:
    """SFT on TRL's SFTTrainer, completion-only loss, with label smoothing (`label_smoothing`, default 0)."""
    trl = importlib.import_module("trl")

    rows = read_rows(spec, ("prompt", "completion"))
    seed_everything(spec.seed)
    model, tokenizer = _load_causal_lm(spec, settings)
    model = with_lora(model, spec, "CAUSAL_LM")
    options = SFTConfig.of(spec)
    smoothing = options.label_smoothing
    fused = use_fused_loss(options.model_dump(), smoothing)
    config = trl.SFTConfig(
        **_common_args(spec, spec.learning_rate or (1e-4 if spec.lora else 1e-5)),
        completion_only_loss=True,
        label_smoothing_factor=0.0 if fused else smoothing,
    )
    trainer = _quiet(
        (_fused_sft_trainer(trl.SFTTrainer, smoothing) if fused else trl.SFTTrainer)(
            model=model,
            args=config,
            train_dataset=_dataset(rows),
            processing_class=tokenizer,
            callbacks=[_callback(progress, spec.steps)],
        )
    )
    resume, resumed_from = _resume_point(spec)
    trainer.train(resume_from_checkpoint=True if resume else None)
    metrics = {"label_smoothing": smoothing, "fused_ce": fused, **loss_summary(_losses(trainer))}
    return save_and_register(
        spec,
        settings,
        trainer.model,
        tokenizer,
        rows_hash=data_hash(rows, "sft"),
        steps=int(trainer.state.global_step),
        metrics=metrics,
        resumed_from=resumed_from,
    )
