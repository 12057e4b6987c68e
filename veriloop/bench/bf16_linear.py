"""The AVX512-BF16 product (`veriloop.kernels.cpu_bf16`) against FBGEMM's fp16 and oneDNN's bf16 kernels.

    veriloop bench bf16_linear [--rows 1,2,3,4,6,8] [--layers 30] [--rounds 4]
    veriloop bench bf16_linear --rows 16,64,112,256 --passes 2     # prompt chunks

Random weights with the embedded model's layer shapes (fused q/k/v 960x576, o 576x576, fused
gate/up 3072x576, down 576x1536), `--layers` distinct copies so that, as in a real step, the
weights stream from memory rather than from the core's caches. One thread. Each round times the
kernels at every row count, interleaved, so machine noise falls on all alike; the fastest round of
each is reported (`ms`, per pass over all layers) with `speedup` = FBGEMM's time over the kernel's
and `speedup_vs_onednn` = oneDNN's prepacked bf16 product's (`BrainFloatLinear`, what prompt rows
took before) over the kernel's. No model needed. Prints one JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from veriloop.bench import load_average

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))
"""(out, in) of a layer's four products in the embedded model (SmolLM2-135M)."""


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", default="1,2,3,4,6,8", help="Row counts, comma-separated.")
    parser.add_argument("--layers", type=int, default=30, help="Distinct layers (30: the embedded model's).")
    parser.add_argument("--rounds", type=int, default=4, help="Interleaved rounds; the fastest is reported.")
    parser.add_argument("--passes", type=int, default=4, help="Passes over all layers timed per round.")
    return parser.parse_args(argv)


def _ms(call: Callable[[], object], passes: int) -> float:
    call()
    started = time.perf_counter()
    for _ in range(passes):
        call()
    return (time.perf_counter() - started) / passes * 1000


def main(settings: object, argv: list[str]) -> dict[str, Any]:
    """`settings` is unused: random weights of fixed shapes, no model."""
    from veriloop.kernels import cpu_bf16
    from veriloop.llm.packed import BrainProduct

    args = _parse(argv)
    if not cpu_bf16.available():
        print("bf16_linear: needs a CPU with AVX512-BF16 and a working C++ compiler", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(1)
    row_counts = [int(value) for value in args.rows.split(",")]
    generator = torch.Generator().manual_seed(0)
    weights = [
        [torch.randn(out, inputs, generator=generator) * 0.05 for out, inputs in SHAPES] for _ in range(args.layers)
    ]
    packed = [[cpu_bf16.pack(weight) for weight in layer] for layer in weights]
    half = [[torch.ops.quantized.linear_prepack_fp16(weight, None) for weight in layer] for layer in weights]
    onednn = [[BrainProduct(weight, None) for weight in layer] for layer in weights]
    empty = torch.zeros(0)

    def kernel_pass(inputs: dict[int, torch.Tensor]) -> Callable[[], object]:
        def run() -> None:
            for layer in packed:
                for (out, width), weight in zip(SHAPES, layer, strict=True):
                    torch.ops.veriloop_bf16.linear(inputs[width], weight, empty, out)

        return run

    def fbgemm_pass(inputs: dict[int, torch.Tensor]) -> Callable[[], object]:
        def run() -> None:
            for layer in half:
                for (_, width), weight in zip(SHAPES, layer, strict=True):
                    torch.ops.quantized.linear_dynamic_fp16(inputs[width], weight)

        return run

    def onednn_pass(inputs: dict[int, torch.Tensor]) -> Callable[[], object]:
        def run() -> None:
            for layer in onednn:
                for (_, width), product in zip(SHAPES, layer, strict=True):
                    product(inputs[width])

        return run

    kernel: dict[int, list[float]] = {rows: [] for rows in row_counts}
    fbgemm: dict[int, list[float]] = {rows: [] for rows in row_counts}
    brain: dict[int, list[float]] = {rows: [] for rows in row_counts}
    load_before = load_average()
    for _ in range(max(args.rounds, 1)):
        for rows in row_counts:
            inputs = {width: torch.randn(rows, width, generator=generator) for width in {w for _, w in SHAPES}}
            fbgemm[rows].append(_ms(fbgemm_pass(inputs), args.passes))
            kernel[rows].append(_ms(kernel_pass(inputs), args.passes))
            brain[rows].append(_ms(onednn_pass(inputs), args.passes))
    best_kernel = {rows: min(times) for rows, times in kernel.items()}
    best_fbgemm = {rows: min(times) for rows, times in fbgemm.items()}
    best_onednn = {rows: min(times) for rows, times in brain.items()}
    return {
        "layers": args.layers,
        "shapes": [list(shape) for shape in SHAPES],
        "ms": {
            "bf16_kernel": {rows: round(value, 2) for rows, value in best_kernel.items()},
            "fbgemm_fp16": {rows: round(value, 2) for rows, value in best_fbgemm.items()},
            "onednn_bf16": {rows: round(value, 2) for rows, value in best_onednn.items()},
        },
        "speedup": {rows: round(best_fbgemm[rows] / best_kernel[rows], 2) for rows in row_counts},
        "speedup_vs_onednn": {rows: round(best_onednn[rows] / best_kernel[rows], 2) for rows in row_counts},
        "rows_cost_vs_one_row": {
            "bf16_kernel": {rows: round(best_kernel[rows] / best_kernel[row_counts[0]], 2) for rows in row_counts},
            "fbgemm_fp16": {rows: round(best_fbgemm[rows] / best_fbgemm[row_counts[0]], 2) for rows in row_counts},
        },
        "load_average": {"before": load_before, "after": load_average()},
    }


if __name__ == "__main__":
    print(json.dumps(main(None, sys.argv[1:]), indent=1))
