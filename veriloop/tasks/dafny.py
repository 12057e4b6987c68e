"""Dafny suites: DafnyBench with hints removed (target dafny) and Dafny sources to translate (AlphaVerus).

Every suite keeps only what the installed Dafny accepts: a hints task needs its ground truth to verify and
its hints-removed program to fail (one that already verifies has nothing to fill in); a translation task
needs its Dafny source to verify. The installed version is part of the suite version, and the filtering
verdicts are cached under the cache folder (keyed by data hash, tool version and scan size), so only the
first load of a suite pays for Dafny runs.

Data: `data_dir/dafnybench/DafnyBench/test.json` (782 programs) and `data_dir/alphaverus/dafny_bench.json`
(562 sources) when the data folder is set; otherwise a small bundled DafnyBench subset (Apache-2.0).
Only the first `SCAN` programs of a data file are considered, which bounds the first load to a few minutes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Task, VerifyStatus
from veriloop.tasks.base import Suite

BUNDLED = Path(__file__).with_name("data") / "dafnybench_subset.json"
"""DafnyBench programs (Apache-2.0, sun-wendy/DafnyBench @0cd28fe) that pass the hints filter on Dafny 2.3."""
SCAN = 40
"""Programs of a data file considered by a suite (the first ones, in the file's order)."""


def dafny_version(settings: Settings) -> str:
    from veriloop.verifiers.base import tool_version

    version = tool_version(settings.verifiers.dafny, ["/version"], r"Dafny\s+(\S+)", settings.paths.cache_dir)
    if not version:
        raise ConfigError(f"Dafny suites need Dafny: {settings.verifiers.dafny!r} is not installed or does not run")
    return version


def dafny_status(settings: Settings, code: str) -> VerifyStatus:
    """What the installed Dafny says of `code` (no guard, no store: suites load before any store)."""
    from veriloop.verifiers.base import run_tool
    from veriloop.verifiers.dafny import SOURCE, DafnyVerifier, judge

    verifier = DafnyVerifier.from_settings(settings)
    run = run_tool(verifier.argv(), {SOURCE: code}, timeout_s=verifier.timeout_s)
    status, _, _ = judge(run.returncode, run.timed_out, run.output)
    return status


def cached_filter(
    settings: Settings, name: str, items: list[dict[str, Any]], keep: Callable[[dict[str, Any]], str | None]
) -> tuple[list[dict[str, Any]], str]:
    """The items `keep` accepts (it returns None, or the reason to drop), remembered per data and tool version."""
    version = dafny_version(settings)
    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]
    record = settings.paths.cache_dir / "suites" / f"{name}-{digest}-{version}.json"
    verdicts: dict[str, str | None] = {}
    if record.exists():
        try:
            verdicts = json.loads(record.read_text())["verdicts"]
        except (OSError, ValueError, KeyError):
            verdicts = {}
    todo = [item for item in items if item["key"] not in verdicts]
    if todo:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for item, reason in zip(todo, pool.map(keep, todo), strict=True):
                verdicts[item["key"]] = reason
        record.parent.mkdir(parents=True, exist_ok=True)
        temp = record.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps({"tool": "dafny", "version": version, "verdicts": verdicts}, indent=1))
        temp.replace(record)
    return [item for item in items if verdicts.get(item["key"]) is None], version


def _dafnybench(settings: Settings, scan: int = SCAN) -> tuple[list[dict[str, Any]], str, str | None]:
    """(records with key, ground_truth, hints_removed; where from; Dafny version already filtered for, if any)."""
    data = settings.paths.data_dir
    path = data / "dafnybench" / "DafnyBench" / "test.json" if data else None
    if path is not None and path.exists():
        raw = json.loads(path.read_text())[:scan]
        source, checked = str(path), None
    else:
        bundle = json.loads(BUNDLED.read_text())
        raw, source, checked = bundle["programs"], str(BUNDLED), bundle["filtered_with"]
    items = [
        {
            "key": Path(row["test_file"]).stem.removesuffix("_no_hints"),
            "test_id": row["test_ID"],
            "ground_truth": row["ground_truth"],
            "hints_removed": row["hints_removed"],
        }
        for row in raw
    ]
    return items, source, checked


def _keep_hints(settings: Settings) -> Callable[[dict[str, Any]], str | None]:
    def keep(item: dict[str, Any]) -> str | None:
        if dafny_status(settings, item["ground_truth"]) is not VerifyStatus.VERIFIED:
            return "ground truth does not verify"
        if dafny_status(settings, item["hints_removed"]) is VerifyStatus.VERIFIED:
            return "verifies without hints"
        return None

    return keep


def load_dafnybench_hints(settings: Settings, scan: int = SCAN) -> Suite:
    """DafnyBench hints-removed programs to complete with hints, verified by Dafny (target `dafny`); the first
    `scan` programs of the data file are considered (benchmarks may look further than the default)."""
    items, source, checked = _dafnybench(settings, scan)
    version = dafny_version(settings)
    if checked != version:
        items, version = cached_filter(settings, "dafnybench-hints", items, _keep_hints(settings))
    tasks = tuple(
        Task(
            id=f"dafnybench/{item['key']}",
            suite="dafnybench-hints",
            prompt=item["hints_removed"],
            language="dafny",
            spec=item["hints_removed"],
            reference=item["ground_truth"],
            metadata={"test_id": item["test_id"], "verifier": "dafny", "tool_version": version, "mode": "hints"},
        )
        for item in items
    )
    return Suite("dafnybench-hints", f"dafnybench@0cd28fe;scan={len(items)};dafny=={version}", tasks, source)


def _translation_sources(settings: Settings) -> tuple[list[dict[str, Any]], str, str | None]:
    data = settings.paths.data_dir
    path = data / "alphaverus" / "dafny_bench.json" if data else None
    if path is not None and path.exists():
        programs = json.loads(path.read_text())[:SCAN]
        items = [
            {"key": f"{index:03d}", "ground_truth": text, "hints_removed": ""} for index, text in enumerate(programs)
        ]
        return items, str(path), None
    return _dafnybench(settings)


def translation_suite(settings: Settings, target: str) -> Suite:
    """Dafny programs that verify with the installed Dafny, to translate for the verifier `target` (nagini, verus):
    its descriptor names the language the translations are written in."""
    from veriloop.verifiers.target import verifier_target

    language = verifier_target(target).language
    if language is None:
        raise ConfigError(f"verifier {target!r} checks no language of its own to translate into")
    name = f"alphaverus-dafny2{target}"
    items, source, checked = _translation_sources(settings)
    version = dafny_version(settings)
    if checked != version:

        def keep(item: dict[str, Any]) -> str | None:
            verified = dafny_status(settings, item["ground_truth"]) is VerifyStatus.VERIFIED
            return None if verified else "source does not verify"

        items, version = cached_filter(settings, "dafny-sources", items, keep)
    tasks = tuple(
        Task(
            id=f"{name}/{item['key']}",
            suite=name,
            prompt=item["ground_truth"],
            language=language,
            reference=None,
            metadata={
                "source": item["ground_truth"],
                "source_language": "dafny",
                "verifier": target,
                "source_tool_version": f"dafny {version}",
                "mode": "translate",
            },
        )
        for item in items
    )
    return Suite(name, f"{Path(source).name};scan={len(items)};dafny=={version}", tasks, source)


def load_dafny_to_nagini(settings: Settings) -> Suite:
    return translation_suite(settings, "nagini")


def load_dafny_to_verus(settings: Settings) -> Suite:
    return translation_suite(settings, "verus")
