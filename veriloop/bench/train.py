"""`veriloop bench train`: DPO step time and peak memory on the embedded model, LoRA vs full fine-tuning and
precomputed vs live reference log-probs, in one run.

Each configuration trains in its own child process (so peak RSS is that configuration's alone) on the
same preference export, with TRL's DPOTrainer: batch `--batch-size`, `--max-length` tokens, `--steps`
steps, one torch thread. The first step is warm-up and is excluded from the median step time. The
baseline is full fine-tuning with a live reference model (TRL's default); the ratios say how much LoRA
and precomputing the reference save. Without `--data` the preference export comes from two scripted
demo runs (reference answers vs `return None`) stored in a temporary home.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError

CONFIGS: dict[str, dict[str, bool]] = {
    "full_live": {"lora": False, "precompute": False},
    "full_precomputed": {"lora": False, "precompute": True},
    "lora_live": {"lora": True, "precompute": False},
    "lora_precomputed": {"lora": True, "precompute": True},
}
BASELINE = "full_live"


def _say(message: str) -> None:
    print(f"[bench train] {message}", file=sys.stderr, flush=True)


def _peak_rss_mb() -> float:
    """High-water mark of this process's resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    """Resident memory now (loading can briefly peak above what the loaded model keeps)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return _peak_rss_mb()


def worker(request: dict[str, Any]) -> dict[str, Any]:
    """One configuration in this (child) process: load, train, time every step, report peak RSS."""
    import importlib

    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from veriloop.store.exports import load_rows

    torch.set_num_threads(1)
    trl = importlib.import_module("trl")
    datasets = importlib.import_module("datasets")
    started = time.perf_counter()
    from veriloop.training.common import load_tokenizer

    tokenizer = load_tokenizer(Path(request["model"]))
    model: Any = AutoModelForCausalLM.from_pretrained(request["model"], dtype=torch.float32)
    rss_loaded = _current_rss_mb()
    peft_config = None
    if request["lora"]:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"
        )
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            stamps.append(time.perf_counter())

        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if not stamps:
                stamps.append(time.perf_counter())

    cpu = not torch.cuda.is_available()
    config = trl.DPOConfig(
        output_dir=request["out"],
        max_steps=request["steps"],
        per_device_train_batch_size=request["batch_size"],
        max_length=request["max_length"],
        learning_rate=5e-5 if request["lora"] else 5e-6,
        use_cpu=cpu,
        bf16=request["bf16"] or not cpu,
        gradient_checkpointing=False,
        precompute_ref_log_probs=request["precompute"],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    rows = load_rows(Path(request["data"]))
    trainer = trl.DPOTrainer(
        model=model,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)
    init_s = time.perf_counter() - started
    trainer.train()
    steps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
    timed = steps[1:] if len(steps) > 1 else steps
    losses = [float(entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]
    trainable = sum(param.numel() for param in trainer.model.parameters() if param.requires_grad)
    return {
        "step_s_median": statistics.median(timed) if timed else None,
        "first_step_s": steps[0] if steps else None,
        "init_s": round(init_s, 2),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "rss_after_load_mb": round(rss_loaded, 1),
        "trainable_params": trainable,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "steps": len(steps),
    }


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="veriloop bench train", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, help="Preference export (default: scripted demo runs, exported here).")
    parser.add_argument("--model", help="Model folder or spec (default: the embedded model).")
    parser.add_argument("--steps", type=int, default=4, help="Steps per configuration (the first is warm-up).")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--tasks", type=int, default=5, help="HumanEval tasks in the generated demo data.")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (fast on CPUs with avx512_bf16/AMX).")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"Subset of: {', '.join(CONFIGS)}.")
    return parser.parse_args(argv)


def _demo_data(folder: Path, tasks: int) -> Path:
    from veriloop.bench._sample_data import make_sample_runs
    from veriloop.config import load_settings
    from veriloop.store import TrajectoryStore
    from veriloop.store.exports import export

    settings = load_settings(paths={"home": folder})
    runs = make_sample_runs(settings, limit=tasks)
    path = folder / "preference.jsonl"
    with TrajectoryStore.from_settings(settings) as store:
        export(store, "preference", runs.runs, path)
    return path


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return round(numerator / denominator, 3)


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    args = _parse(argv)
    chosen = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in CONFIGS]
    if unknown:
        raise ConfigError(f"unknown config(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    from veriloop.llm.embedded import resolve_model

    model = resolve_model(args.model or settings.llm.model, settings)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="veriloop-bench-train-") as scratch:
        root = Path(scratch)
        data = args.data or _demo_data(root / "demo", args.tasks)
        for name in chosen:
            _say(f"{name}: {args.steps} steps")
            request = {
                "model": str(model),
                "data": str(data),
                "out": str(root / name),
                "steps": args.steps,
                "batch_size": args.batch_size,
                "max_length": args.max_length,
                "bf16": args.bf16,
                **CONFIGS[name],
            }
            child = subprocess.run(
                [sys.executable, "-m", "veriloop.bench.train", json.dumps(request)],
                capture_output=True,
                text=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                check=False,
            )
            if child.returncode != 0:
                results[name] = {"error": child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed"}
                continue
            results[name] = json.loads(child.stdout.strip().splitlines()[-1])
    base = results.get(BASELINE, {})
    ratios = {}
    for name, values in results.items():
        if name == BASELINE or "error" in values or "error" in base:
            continue
        ratios[name] = {
            "step_time_vs_full_live": _ratio(values.get("step_s_median"), base.get("step_s_median")),
            "peak_rss_vs_full_live": _ratio(values.get("peak_rss_mb"), base.get("peak_rss_mb")),
        }
    return {
        "model": str(model),
        "data": str(args.data) if args.data else f"scripted demo runs over {args.tasks} HumanEval tasks",
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "bf16": args.bf16,
        "torch_threads": 1,
        "baseline": BASELINE,
        "configs": results,
        "ratios": ratios,
    }


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))))
