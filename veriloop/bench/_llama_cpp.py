"""llama.cpp as the peer of `veriloop bench llm --peer llama_cpp`: its own `llama-server`, on the same GGUF file.

A user serving a small model on a CPU would pick llama.cpp, so the embedded backend's figures are put beside
its figures on the same machine, in the same run. The server is llama.cpp's own `llama-server` (parallel
slots with continuous batching, `-np N`), built from the llama.cpp sources that llama-cpp-python
`LLAMA_CPP_PYTHON` vendors in its PyPI sdist: the sdist is the only download (no wheel, no git, no model
hub; the server's web UI and HTTPS are configured off so cmake fetches nothing). The build is the bench's
own business, never `make setup`'s or CI's: it takes tens of minutes on two cores, so the binary is cached
under `<cache_dir>/llama.cpp/<version>/bin`. `VERILOOP_LLAMA_SERVER` or a `llama-server` on PATH is used
first. Both 1 and 8 requests in flight go through the one server (`-np` slots), the same vendored llama.cpp.

Finding, building and starting the server lives in `veriloop.llm.llama_server` (the `llama_cpp` backend uses it
too); this module re-exports those names and holds what only the bench does with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from veriloop.errors import BackendError
from veriloop.llm import llama_server as _server
from veriloop.llm.llama_server import (
    CMAKE_OPTIONS,
    LLAMA_CPP_PYTHON,
    SERVER_ENV,
    LlamaServer,
    bundled_gguf,
    cache_root,
    find_llama_server,
    llama_server,
    peak_rss_mb,
    server_version,
)

__all__ = [
    "CMAKE_OPTIONS",
    "LLAMA_CPP_PYTHON",
    "SERVER_ENV",
    "LlamaServer",
    "bundled_gguf",
    "cache_root",
    "find_llama_server",
    "llama_server",
    "peak_rss_mb",
    "server_version",
]

Echo = Callable[[str], None]


def _echo(message: str) -> None:
    print(f"[bench llm peer] {message}", file=sys.stderr, flush=True)


def build_llama_server(cache_dir: Path, jobs: int | None = None, echo: Echo = _echo) -> Path:
    """`veriloop.llm.llama_server.build_llama_server`, reporting as the bench."""
    return _server.build_llama_server(cache_dir, jobs=jobs, echo=echo)


def ensure_llama_server(cache_dir: Path, build: bool = True, echo: Echo = _echo) -> Path:
    """`veriloop.llm.llama_server.ensure_llama_server`, reporting as the bench."""
    return _server.ensure_llama_server(cache_dir, build=build, echo=echo)


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM (Linux `clear_refs` 5), so a later peak is one model's, not the run's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def completion_body(prompt_ids: list[int], max_tokens: int, stop: list[str]) -> dict[str, Any]:
    """The /completion request: the same prompt tokens and greedy settings as veriloop's runs (EOS and `stop` end
    an answer), no prompt cache (as veriloop's bench takes a fresh batcher per run), the generated ids back."""
    return {
        "prompt": prompt_ids,
        "n_predict": max_tokens,
        "temperature": 0.0,
        "top_k": 1,
        "stop": stop,
        "cache_prompt": False,
        "return_tokens": True,
        "stream": False,
    }


async def _complete_all(
    url: str, prompts: list[list[int]], max_tokens: int, stop: list[str], concurrency: int
) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(None), limits=limits) as client:

        async def one(ids: list[int]) -> dict[str, Any]:
            async with gate:
                response = await client.post("/completion", json=completion_body(ids, max_tokens, stop))
                if response.status_code != 200:
                    raise BackendError(f"llama-server /completion: {response.status_code} {response.text[:300]}")
                answer: dict[str, Any] = response.json()
                return answer

        return list(await asyncio.gather(*(one(ids) for ids in prompts)))


def useful_tokens(answer: dict[str, Any], count: Callable[[list[int]], int] | None) -> int:
    """An answer's useful tokens as veriloop counts them (`count` of the generated ids: before EOS or the fence),
    else `tokens_predicted` less the token that stopped it."""
    ids = answer.get("tokens")
    if count is not None and isinstance(ids, list) and ids:
        return count([int(token) for token in ids])
    predicted = int(answer.get("tokens_predicted", 0))
    stopped = answer.get("stop_type") in ("eos", "word")
    return max(predicted - int(stopped), 0)


def run_peer(
    server: LlamaServer,
    prompts: list[list[int]],
    *,
    max_tokens: int,
    stop: list[str],
    concurrencies: Sequence[int],
    repeat: int = 1,
    count: Callable[[list[int]], int] | None = None,
    echo: Echo = _echo,
) -> dict[str, Any]:
    """Tokens/s of the prompts at each number in flight (the fastest of `repeat` runs), time to first token (a
    1-token request per prompt, one at a time: the prompt's prefill and one step), and the server's peak RSS."""
    asyncio.run(_complete_all(server.url, [prompts[0][:16]], 4, stop, 1))  # warm-up
    rates: dict[str, float] = {}
    seconds: dict[str, float] = {}
    tokens: dict[str, int] = {}
    timings: dict[str, dict[str, float]] = {}
    for _ in range(max(repeat, 1)):
        for concurrency in concurrencies:
            name = "batch_1" if concurrency == 1 else f"in_flight_{concurrency}"
            started = time.perf_counter()
            answers = asyncio.run(_complete_all(server.url, prompts, max_tokens, stop, concurrency))
            elapsed = time.perf_counter() - started
            useful = sum(useful_tokens(answer, count) for answer in answers)
            echo(f"llama.cpp {name}: {useful} tokens in {elapsed:.1f} s ({useful / elapsed:.1f}/s)")
            if name in seconds and seconds[name] <= elapsed:
                continue
            seconds[name], tokens[name], rates[name] = elapsed, useful, useful / elapsed
            timings[name] = _mean_timings(answers)
    first: list[float] = []
    for ids in prompts:
        started = time.perf_counter()
        asyncio.run(_complete_all(server.url, [ids], 1, stop, 1))
        first.append(time.perf_counter() - started)
    return {
        "tokens_per_s": {name: round(rate, 2) for name, rate in rates.items()},
        "ttft_s": round(statistics.median(first), 4),
        "peak_rss_mb": server.peak_rss_mb(),
        "seconds": {name: round(value, 2) for name, value in seconds.items()},
        "useful_tokens": tokens,
        "server_timings_mean": timings,
        "server_start_s": server.started_s,
    }


def _mean_timings(answers: list[dict[str, Any]]) -> dict[str, float]:
    """The server's own per-request figures, averaged: prompt and generated tokens per second as it measured them."""
    keys = ("prompt_per_second", "predicted_per_second", "prompt_n", "predicted_n")
    found = [answer.get("timings") or {} for answer in answers]
    return {
        key: round(statistics.mean(float(t[key]) for t in found), 2) for key in keys if all(key in t for t in found)
    }


def peer_thread_plan(spec: str, cores: int, concurrencies: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """`--peer-threads` as {threads: the numbers in flight to run with them}: `1,2` runs both at every number,
    `1,2@8` runs 2 threads at 8 in flight only (a 2-thread batch-1 run on busy shared cores takes minutes and is
    never the best); empty: 1 and `cores` at every number."""
    plan: dict[int, tuple[int, ...]] = {}
    items = [item.strip() for item in spec.split(",") if item.strip()] or ["1", str(cores)]
    for item in items:
        threads, _, only = item.partition("@")
        count = int(threads)
        wanted = tuple(c for c in concurrencies if not only or c == int(only))
        if count < 1 or not wanted:
            raise ValueError(f"--peer-threads {item!r}: T or T@C with T >= 1 and C one of {concurrencies}")
        plan[count] = tuple(dict.fromkeys(plan.get(count, ()) + wanted))
    return plan


def best_of_threads(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The peer's figures from runs at several thread counts: each tokens/s the best of any count (with the count
    that gave it), the lowest time to first token, the highest peak RSS; every run kept under `by_threads`."""
    if not runs:
        raise ValueError("no runs")
    keys = dict.fromkeys(key for run in runs.values() for key in run["tokens_per_s"])
    best = {key: max(runs, key=lambda threads: runs[threads]["tokens_per_s"].get(key, 0.0)) for key in keys}
    rss = [run["peak_rss_mb"] for run in runs.values() if run.get("peak_rss_mb") is not None]
    return {
        "tokens_per_s": {key: runs[threads]["tokens_per_s"][key] for key, threads in best.items()},
        "threads_of_best": best,
        "ttft_s": min(run["ttft_s"] for run in runs.values()),
        "peak_rss_mb": max(rss) if rss else None,
        "by_threads": {str(threads): run for threads, run in runs.items()},
    }


def ratios(veriloop: dict[str, float], peer: dict[str, float]) -> dict[str, float | None]:
    """veriloop's tokens/s over llama.cpp's for each key both measured (None where llama.cpp's is zero)."""
    return {key: (round(veriloop[key] / peer[key], 3) if peer[key] else None) for key in veriloop if key in peer}


def machine() -> dict[str, Any]:
    """The CPU the figures belong to: its model name, core count and the instruction sets that choose kernels."""
    name, flags, fields = "unknown", set[str](), dict[str, str]()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and name == "unknown":
                name = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
            elif key in ("cpu family", "model", "stepping", "vendor_id") and key not in fields:
                fields[key] = value.strip()
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    return {
        "cpu": name,
        "cpuid": fields,
        "cpus": os.cpu_count(),
        "flags": {flag: flag in flags for flag in wanted},
    }
