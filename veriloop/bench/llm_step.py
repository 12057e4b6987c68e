"""What one decode step of the embedded backend costs at 1, 2, ... rows: the ceiling on `ratio_8_vs_1`.

    veriloop bench llm_step [--rows 1,2,4,6,8,12,16] [--columns 300] [--threads 1,2] [--repeats 10]

`veriloop bench llm` measures whole runs, where prefill, the tail of short answers and the load
on the other core all mix in. This script isolates the decode step the batcher runs (the packed
forward over the full KV cache, weight copies as `llm.linear_weights` sets) with every row
holding `--columns` cached columns, and, separately, the linear products alone (all layers and
the output projection) at the same row counts, for each torch thread count in one process.

`step_speedup` is rows x step(1 row) / step(rows): how many times more tokens a step of that many
rows yields than a one-row step. With the C++ decode attention (`llm.cpu_attention_kernel`, the
default where it builds) the same steps are also timed with PyTorch's attention in the same run, over
a cache of the model's dtype as `llm.kv_dtype = auto` keeps it there (the kernel's may be fp16):
`step_ms_pytorch_attention` and `attention_kernel_speedup` (PyTorch's step time over the kernel's).
With bf16 decoding weights (`llm.linear_weights`, `auto` where the AVX512-BF16 kernel builds) the
same steps and products run on FBGEMM's fp16 weights too: `step_ms_fp16_weights`,
`products_ms_fp16_weights` and `bf16_kernel_speedup` (the steps' ratio).
A run of the whole bench cannot beat `step_speedup` at its mean rows per step, and falls short of it
by the prefill it has to do at every concurrency. Prints one JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from veriloop.bench import dtype_name, load_average


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", default="1,2,4,6,8,12,16", help="Row counts, comma-separated.")
    parser.add_argument("--columns", type=int, default=300, help="Cached columns per row.")
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated.")
    parser.add_argument("--repeats", type=int, default=10, help="Timed steps per point (after 3 warm-up steps).")
    parser.add_argument(
        "--python-loop", action="store_true", help="Run the layers from Python, not as one TorchScript call."
    )
    return parser.parse_args(argv)


def _ms(call: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        call()
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats * 1000


def _layout(rows: int, columns: int) -> Any:
    from veriloop.llm.kv_cache import StepLayout, lengths_mask

    def longs(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long)

    lengths = longs([columns + 1] * rows)
    return StepLayout(
        slots=longs(list(range(rows))),
        columns=longs([columns] * rows),
        positions=longs([columns] * rows),
        decode=rows,
        decode_slots=longs(list(range(rows))),
        decode_lengths=lengths,
        slots_used=rows,
        chunks=(),
        longest=columns + 1,
        in_order=True,
        mask=lengths_mask(lengths, columns + 1),
    )


def _step(decoder: Any, cache: Any, rows: int, columns: int) -> Callable[[], object]:
    """One decode step of `rows` rows, each over `columns` cached columns."""
    layout = _layout(rows, columns)
    ids = torch.randint(0, int(decoder.model.config.vocab_size), (rows,))
    every = torch.arange(rows)
    return lambda: decoder.forward(ids, layout, cache, every)


def _products(decoder: Any, rows: int) -> Callable[[], object]:
    """Every linear product of one step at `rows` rows, as the packed forward calls them."""
    hidden = int(decoder.model.config.hidden_size)
    x = torch.randn(rows, hidden)

    def run() -> None:
        for linears in decoder.linears:
            q, _, _ = linears.qkv(x, rows)
            linears.o(q, rows)
            linears.mlp(x, rows)
        decoder.lm_head(x)

    return run


def main(settings: Any, argv: list[str]) -> dict[str, Any]:
    """Measure with `settings.llm` (model, linear weights); returns the JSON the script prints."""
    from veriloop.llm.embedded import load_model
    from veriloop.llm.kv_cache import SlotKVCache
    from veriloop.llm.packed import PackedDecoder, resolve_linear_weights

    args = _parse(argv)
    row_counts = [int(value) for value in args.rows.split(",")]
    thread_counts = [int(value) for value in args.threads.split(",")]
    model, _ = load_model(settings)
    weights = resolve_linear_weights(settings.llm.linear_weights)
    decoder = PackedDecoder(
        model,
        weights,
        script=not args.python_loop,
        attention_kernel=settings.llm.cpu_attention_kernel,
    )
    # The baseline in the same run: the same step with PyTorch's attention for the decoding rows.
    sdpa = PackedDecoder(model, weights, script=not args.python_loop, attention_kernel=False)
    # And with bf16 decoding weights, the same step on FBGEMM's fp16 weights, as before the AVX512-BF16 kernel.
    half = (
        PackedDecoder(model, "float16", script=not args.python_loop, attention_kernel=decoder.attention_kernel)
        if decoder.weights == "bfloat16"
        else None
    )
    caches: dict[torch.dtype, SlotKVCache] = {}
    for dtype in {decoder.kv_dtype, sdpa.kv_dtype}:  # PyTorch's attention keeps the model's dtype (`kv_dtype`)
        caches[dtype] = SlotKVCache(
            len(decoder.layers),
            max(row_counts),
            decoder.kv_heads,
            decoder.head_dim,
            dtype=dtype,
            device=decoder.device,
            max_columns=args.columns + 1,
        )
        caches[dtype].ensure(args.columns + 1)
    cache = caches[decoder.kv_dtype]
    result: dict[str, Any] = {
        "model": settings.llm.model,
        "linear_weights": decoder.weights,
        "scripted": decoder.scripted is not None,
        "attention_kernel": decoder.attention_kernel,
        "kv_dtype": dtype_name(decoder.kv_dtype),
        "columns": args.columns,
        "load_average_before": load_average(),
    }
    with torch.inference_mode():
        for threads in thread_counts:
            torch.set_num_threads(threads)
            step, products, pytorch, fp16, fp16_products = {}, {}, {}, {}, {}
            for rows in row_counts:
                step[rows] = _ms(_step(decoder, cache, rows, args.columns), args.repeats)
                if decoder.attention_kernel:
                    pytorch[rows] = _ms(_step(sdpa, caches[sdpa.kv_dtype], rows, args.columns), args.repeats)
                if half is not None:
                    fp16[rows] = _ms(_step(half, cache, rows, args.columns), args.repeats)
                    fp16_products[rows] = _ms(_products(half, rows), args.repeats)
                products[rows] = _ms(_products(decoder, rows), args.repeats)
                print(f"[llm_step] {threads} thread(s), {rows} rows: step {step[rows]:.1f} ms", file=sys.stderr)
            result[f"threads_{threads}"] = {
                "step_ms": {rows: round(value, 2) for rows, value in step.items()},
                "products_ms": {rows: round(value, 2) for rows, value in products.items()},
                "step_speedup": {rows: round(rows * step[row_counts[0]] / value, 2) for rows, value in step.items()}
                if row_counts[0] == 1
                else {},
            }
            if pytorch:
                run = result[f"threads_{threads}"]
                run["step_ms_pytorch_attention"] = {rows: round(value, 2) for rows, value in pytorch.items()}
                run["attention_kernel_speedup"] = {rows: round(pytorch[rows] / step[rows], 2) for rows in row_counts}
            if fp16:
                run = result[f"threads_{threads}"]
                run["step_ms_fp16_weights"] = {rows: round(value, 2) for rows, value in fp16.items()}
                run["products_ms_fp16_weights"] = {rows: round(value, 2) for rows, value in fp16_products.items()}
                run["bf16_kernel_speedup"] = {rows: round(fp16[rows] / step[rows], 2) for rows in row_counts}
    result["load_average_after"] = load_average()
    return result


if __name__ == "__main__":
    from veriloop.config import load_settings

    print(json.dumps(main(load_settings(), sys.argv[1:]), indent=1))
