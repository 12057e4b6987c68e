"""The inference benchmark on a CUDA machine: `veriloop bench llm` with `llm.device = cuda`, and, where
vLLM is installed, the same HumanEval prompts through the `vllm` backend; prints one JSON with both.

    veriloop bench gpu_llm [--prompts 16] [--max-tokens 128] [--concurrency 8] [--dtype bfloat16]

Exits with status 2 and a one-line message when torch sees no CUDA device. Nothing in CI needs it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from typing import Any


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--skip-commvq", action="store_true")
    return parser.parse_args(argv)


def _embedded(args: argparse.Namespace) -> dict[str, Any]:
    from veriloop.bench import llm as bench_llm
    from veriloop.config import load_settings

    settings = load_settings(llm={"device": "cuda", "dtype": args.dtype, "torch_threads": 4})
    argv = ["--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens)]
    argv += ["--concurrency", str(args.concurrency)]
    if args.skip_commvq:
        argv.append("--skip-commvq")
    return bench_llm.main(settings, argv)


def _vllm(args: argparse.Namespace) -> dict[str, Any]:
    """The same prompts, greedy, with the same stop, through the vllm backend (all in flight at once)."""
    from transformers import AutoTokenizer

    from veriloop.bench.llm import FENCE, humaneval_prompts
    from veriloop.config import load_settings
    from veriloop.llm.embedded import ensure_default_model
    from veriloop.llm.vllm_backend import VLLMBackend
    from veriloop.records import SamplingParams

    base = load_settings()
    folder = ensure_default_model(base)
    settings = load_settings(llm={"backend": "vllm", "model": str(folder), "dtype": args.dtype})
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = humaneval_prompts(tokenizer, args.prompts)
    params = SamplingParams(max_tokens=args.max_tokens, stop=[FENCE], temperature=0.0)

    async def run() -> dict[str, Any]:
        started = time.perf_counter()
        backend = VLLMBackend.from_settings(settings)
        loaded = time.perf_counter() - started
        try:
            await backend.generate(prompts[:1], params.model_copy(update={"max_tokens": 4}))  # warm-up
            start = time.perf_counter()
            one = [await backend.generate([prompt], params) for prompt in prompts]
            seconds_1 = time.perf_counter() - start
            start = time.perf_counter()
            many = await backend.generate(prompts, params)
            seconds_all = time.perf_counter() - start
        finally:
            await backend.aclose()
        tokens_1 = sum(samples[0].usage.completion_tokens for [samples] in one)
        tokens_all = sum(samples[0].usage.completion_tokens for samples in many)
        return {
            "load_s": round(loaded, 2),
            "tokens_per_s": {
                "one_at_a_time": round(tokens_1 / seconds_1, 2),
                "all_in_flight": round(tokens_all / seconds_all, 2),
            },
            "useful_tokens": {"one_at_a_time": tokens_1, "all_in_flight": tokens_all},
            "texts": [samples[0].text for [samples] in one],
        }

    return asyncio.run(run())


def main(settings: object, argv: list[str]) -> dict[str, Any]:
    """`settings` is unused: the embedded side runs on `llm.device = cuda` and the vllm side on its own settings."""
    args = _parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("veriloop bench gpu_llm needs a CUDA device, and torch sees none", file=sys.stderr)
        raise SystemExit(2)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    result["embedded"] = _embedded(args)
    if importlib.util.find_spec("vllm") is None:
        result["vllm"] = {"skipped": "vllm is not installed"}
    else:
        vllm_result = _vllm(args)
        texts = vllm_result.pop("texts")
        result["vllm"] = vllm_result
        embedded_rate = result["embedded"]["tokens_per_s"].get(f"batcher_{args.concurrency}")
        if embedded_rate:
            result["embedded_vs_vllm"] = round(embedded_rate / vllm_result["tokens_per_s"]["all_in_flight"], 3)
        result["vllm_prompts"] = len(texts)
    return result


if __name__ == "__main__":
    print(json.dumps(main(None, sys.argv[1:]), indent=2))
