"""`veriloop bench verify`: the same Dafny and Nagini programs verified cold, warm and from the cache, in one run.

- dafny: cold = the first pass in this process (tool version asked, Mono's and the OS's caches cold); warm = a
  second pass of the same programs (Debian's Dafny has no resident mode, so this is the CLI with warm caches);
- nagini: cold = Nagini's own CLI (`nagini FILE` from its virtualenv: JVM start, Viper prelude, JIT per file);
  warm = our supervised warm worker (its one-off start is reported as `worker_start_s`, not counted per program);
- cache = a third pass through the store-backed cache (a fresh SQLite store filled by the warm pass).

Programs: the test fixtures (tests/verifiers/data) without the deliberate time-out, topped up with DafnyBench
ground-truth programs from the data dir. The spec guard is off, so every pass times the verifier alone. Means are
seconds per program; ratios are cold/warm and warm/cache. Verdicts must agree across passes (`agree`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.records import Candidate, Task, VerifyResult, VerifyStatus
from veriloop.store import TrajectoryStore
from veriloop.verifiers.cache import CachedVerifier
from veriloop.verifiers.dafny import DafnyVerifier
from veriloop.verifiers.guard import static_check
from veriloop.verifiers.nagini import NaginiVerifier, close_workers, default_python
from veriloop.verifiers.target import verifier_target

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "verifiers" / "data"
SKIP = {"timeout_nonlinear"}
DAFNYBENCH = (
    "Clover_abs",
    "Clover_array_sum",
    "Clover_below_zero",
    "Clover_avg",
    "Clover_array_copy",
    "Clover_binary_search",
    "Clover_array_append",
    "Clover_array_concat",
    "Clover_array_product",
    "Clover_cal_ans",
    "Clover_compare",
    "Clover_count_lessthan",
)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def dafny_programs(settings: Settings, count: int) -> list[tuple[str, str]]:
    programs = [(p.stem, p.read_text()) for p in sorted((FIXTURES / "dafny").glob("*.dfy")) if p.stem not in SKIP]
    data = settings.paths.data_dir
    folder = data / "dafnybench" / "DafnyBench" / "dataset" / "ground_truth" if data else None
    for name in DAFNYBENCH:
        if folder is not None and (folder / f"{name}.dfy").exists():
            programs.append((name, (folder / f"{name}.dfy").read_text()))
    return programs[:count]


def nagini_programs(count: int) -> list[tuple[str, str]]:
    honest = [p for p in sorted((FIXTURES / "nagini").glob("*.nagini")) if not p.stem.startswith("hack_")]
    runnable = [p for p in honest if "error" not in p.stem]
    return [(p.stem, p.read_text()) for p in runnable][:count]


async def _pass(verifier: Any, programs: list[tuple[str, str]], label: str) -> tuple[list[float], list[str]]:
    seconds, verdicts = [], []
    task = Task(id="bench", suite="bench", prompt="")
    for name, code in programs:
        started = time.perf_counter()
        result: VerifyResult = await verifier.verify(Candidate(task_id=name, code=code), task)
        seconds.append(time.perf_counter() - started)
        verdicts.append(result.status.value)
        _log(f"  {label} {name}: {result.status.value} {seconds[-1]:.2f}s{' (cache)' if result.cache_hit else ''}")
    return seconds, verdicts


def _nagini_cli(python: Path, code: str, timeout_s: float) -> str:
    """Nagini's own CLI on one file: the cold path every call would pay without a warm worker."""
    nagini = python.parent / "nagini"
    with tempfile.TemporaryDirectory(prefix="veriloop-bench-") as work:
        path = Path(work, "program.py")
        path.write_text(code)
        try:
            run = subprocess.run(
                [str(nagini), str(path)], capture_output=True, text=True, timeout=timeout_s, cwd=work, check=False
            )
        except subprocess.TimeoutExpired:
            return VerifyStatus.TIMEOUT.value
    if "Verification successful" in run.stdout:
        return VerifyStatus.VERIFIED.value
    if "Verification failed" in run.stdout:
        return VerifyStatus.FAILED.value
    return VerifyStatus.SYNTAX_ERROR.value if "Type error" in run.stdout else VerifyStatus.INFRA_ERROR.value


def _summary(cold: list[float], warm: list[float], cache: list[float], verdicts: list[list[str]]) -> dict[str, Any]:
    cold_s, warm_s, cache_s = statistics.fmean(cold), statistics.fmean(warm), statistics.fmean(cache)
    return {
        "programs": len(warm),
        "cold_s": round(cold_s, 4),
        "warm_s": round(warm_s, 4),
        "cache_s": round(cache_s, 5),
        "cold_over_warm": round(cold_s / warm_s, 2),
        "warm_over_cache": round(warm_s / cache_s, 1),
        "cold_over_cache": round(cold_s / cache_s, 1),
        "agree": all(v == verdicts[0] for v in verdicts),
        "verdicts": {status: verdicts[1].count(status) for status in sorted(set(verdicts[1]))},
    }


async def _run(settings: Settings, args: argparse.Namespace, store: TrajectoryStore) -> dict[str, Any]:
    report: dict[str, Any] = {}
    if args.dafny:
        programs = dafny_programs(settings, args.dafny)
        _log(f"dafny: {len(programs)} programs")
        cold_verifier = DafnyVerifier.from_settings(settings)
        cold, cold_v = await _pass(cold_verifier, programs, "cold")
        warm, warm_v = await _pass(cold_verifier, programs, "warm")
        cache, cache_v = await _pass(CachedVerifier(cold_verifier, store), programs, "fill")
        cache, cache_v = await _pass(CachedVerifier(cold_verifier, store), programs, "cache")
        report["dafny"] = _summary(cold, warm, cache, [cold_v, warm_v, cache_v])
        report["dafny"]["version"] = await cold_verifier.version()
    if args.nagini:
        programs = nagini_programs(args.nagini)
        python = default_python(settings)
        _log(f"nagini: {len(programs)} programs")
        cold, cold_v = [], []
        for name, code in programs:
            started = time.perf_counter()
            cold_v.append(await asyncio.to_thread(_nagini_cli, python, code, settings.verifiers.timeout_s * 5))
            cold.append(time.perf_counter() - started)
            _log(f"  cold {name}: {cold_v[-1]} {cold[-1]:.2f}s")
        verifier = NaginiVerifier.from_settings(settings)
        started = time.perf_counter()
        version = await verifier.version()
        worker_start = time.perf_counter() - started
        warm, warm_v = await _pass(verifier, programs, "warm")
        await _pass(CachedVerifier(verifier, store), programs, "fill")
        cache, cache_v = await _pass(CachedVerifier(verifier, store), programs, "cache")
        report["nagini"] = _summary(cold, warm, cache, [cold_v, warm_v, cache_v])
        report["nagini"].update(version=version, worker_start_s=round(worker_start, 2))
        close_workers()
    return report


def _reason_kind(reason: str) -> str:
    """A rejection reason without the names in it, so counts group by rule."""
    text = re.sub(r"`[^`]*`", "`...`", reason)
    text = re.sub(
        r"\b(function|predicate|method|lemma|const|datatype|type|constructor|fn|def|spec)\s+\S+", r"\1 X", text
    )
    return re.sub(r"^[\w']+: ", "", text).split(" (line")[0][:90]


def guard_counts(settings: Settings) -> dict[str, Any]:
    """The guard's static rules on the benchmark references against their own task specs: how many are accepted,
    and for the rest which rule rejected them (no tool runs; the post-run probes are exercised by the tests)."""
    data = settings.paths.data_dir
    if data is None or not data.is_dir():
        return {"error": "no data dir (VERILOOP_PATHS__DATA_DIR)"}
    suites: dict[str, list[tuple[str, str, str | None]]] = {}
    bench = data / "dafnybench" / "DafnyBench" / "dataset"
    suites["dafnybench"] = [
        ("dafny", path.read_text(), (bench / "hints_removed" / f"{path.stem}_no_hints.dfy").read_text())
        for path in sorted((bench / "ground_truth").glob("*.dfy"))
        if (bench / "hints_removed" / f"{path.stem}_no_hints.dfy").exists()
    ]
    mbpp = data / "mbpp_dfy" / "mbpp_dfy_153.jsonl"
    if mbpp.exists():
        rows = [json.loads(line) for line in mbpp.read_text().splitlines() if line.strip()]
        suites["mbpp_dfy"] = [("dafny", row["src"], row["src"]) for row in rows]
    for name in ("hev", "mbpp"):
        path = data / "alphaverus" / f"{name}.jsonl"
        if path.exists():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            suites[f"alphaverus_{name}"] = [("verus", row["y"], row["x"]) for row in rows]
    report: dict[str, Any] = {}
    for suite, items in suites.items():
        reasons: collections.Counter[str] = collections.Counter()
        for verifier, code, spec in items:
            dialect = verifier_target(verifier).dialect
            assert dialect is not None, verifier  # a formal verifier's descriptor names its dialect
            reason = static_check(dialect, code, spec)
            if reason:
                reasons[_reason_kind(reason)] += 1
        report[suite] = {
            "programs": len(items),
            "accepted": len(items) - sum(reasons.values()),
            "rejected": sum(reasons.values()),
            "why": dict(reasons.most_common()),
        }
        _log(f"guard {suite}: {report[suite]['accepted']}/{len(items)} accepted")
    return report


def main(settings: Settings, argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="veriloop bench verify", description=__doc__.splitlines()[0])
    parser.add_argument("--dafny", type=int, default=30, help="Dafny programs (0 skips Dafny).")
    parser.add_argument("--nagini", type=int, default=10, help="Nagini programs (0 skips Nagini).")
    parser.add_argument(
        "--guard-counts", action="store_true", help="Also count the guard's verdicts on the benchmark references."
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="veriloop-bench-verify-") as home:
        store = TrajectoryStore(f"sqlite:///{Path(home) / 'bench.db'}")
        try:
            report = asyncio.run(_run(settings, args, store))
            if args.guard_counts:
                report["guard"] = guard_counts(settings)
            return report
        finally:
            store.close()
