"""EvalPlus (HumanEval+, MBPP+): the expected output of every input is computed by running the reference in the sandbox.

EvalPlus ships inputs (`base_input`, `plus_input`) but not outputs; its own harness computes them by
running the canonical solution. Here the reference runs once per task inside the sandbox (it is data
from a file, so it is treated as hostile code), its results come back as Python literals, and each
input becomes one `assert` (floats compared with `math.isclose(abs_tol=atol)` when the row has an
`atol`). Inputs whose reference call raises or returns a non-literal are dropped and counted in
`metadata["evalplus"]["dropped"]`. Results are cached by content hash under the cache folder, so a
suite is computed once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from veriloop.config import Settings
from veriloop.errors import ConfigError

T = TypeVar("T")
MARK = "VERILOOP-EVALPLUS "

PROBE = """
import ast as _ast, copy as _copy, json as _json, sys as _sys
_results = []
for _args in _json.loads({inputs!r}):
    try:
        _value = {entry}(*_copy.deepcopy(_args))
        _text = repr(_value)
        _ast.literal_eval(_text)
        _results.append(_text)
    except BaseException:
        _results.append(None)
_sys.stdout.write({mark!r} + _json.dumps(_results) + "\\n")
"""

CLOSE = """def _veriloop_close(a, b, atol):
    import math
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, abs_tol=atol)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_veriloop_close(x, y, atol) for x, y in zip(a, b))
    return a == b
"""


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end from sync code, also when an event loop is already running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _assertion(entry: str, args: list[Any], expected: str, atol: float) -> str:
    call = f"{entry}(*{args!r})"
    if atol > 0:
        return f"assert _veriloop_close({call}, {expected}, {atol!r})"
    return f"assert {call} == {expected}"


def tests_for(entry: str, inputs: list[list[Any]], outputs: list[str | None], atol: float) -> tuple[str, int]:
    """(test file, dropped inputs): one assert per input whose reference output is a literal."""
    lines = [CLOSE] if atol > 0 else []
    dropped = 0
    for args, expected in zip(inputs, outputs, strict=True):
        if expected is None:
            dropped += 1
            continue
        lines.append(_assertion(entry, args, expected, atol))
    return "\n".join(lines) + "\n", dropped


async def _outputs(settings: Settings, jobs: list[tuple[str, str, list[list[Any]]]]) -> list[list[str | None] | str]:
    """Per job (reference, entry, inputs): the reprs of the outputs, or the reason the reference did not run."""
    from veriloop.sandbox import default_limits, get_sandbox
    from veriloop.sandbox.languages import program_job

    sandbox = get_sandbox(settings)
    limits = default_limits(settings).model_copy(update={"output_bytes": 64 << 20, "wall_s": 60.0})
    gate = asyncio.Semaphore(max(1, settings.sandbox.warm_workers))

    async def one(reference: str, entry: str, inputs: list[list[Any]]) -> list[str | None] | str:
        code = reference + "\n" + PROBE.format(inputs=json.dumps(inputs), entry=entry, mark=MARK)
        async with gate:
            result = await sandbox.run(program_job("python", sandbox.toolchain, code, limits=limits))
        for line in result.stdout.splitlines():
            if line.startswith(MARK):
                values = json.loads(line[len(MARK) :])
                if len(values) == len(inputs):
                    return [value if isinstance(value, str) else None for value in values]
        return f"the reference solution did not run ({result.status.value}): {result.stderr.strip()[-300:]}"

    try:
        return list(await asyncio.gather(*(one(*job) for job in jobs)))
    finally:
        await sandbox.aclose()


def finish_evalplus(rows: list[dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """Fill in each row's tests from its reference's outputs (cached); public tests are the first base input."""
    keys, jobs = [], []
    for row in rows:
        plus = row["metadata"]["evalplus"]
        inputs = plus["base_input"] + plus["plus_input"]
        payload = json.dumps([row["reference"], row["entry_point"], inputs], sort_keys=True)
        keys.append(hashlib.sha256(payload.encode()).hexdigest()[:24])
        jobs.append((row["reference"], row["entry_point"], inputs))
    cache = settings.paths.cache_dir / "suites" / "evalplus"
    known: dict[str, Any] = {}
    for key in keys:
        path = cache / f"{key}.json"
        if path.is_file():
            known[key] = json.loads(path.read_text())
    todo = [index for index, key in enumerate(keys) if key not in known]
    if todo:
        computed = run_sync(_outputs(settings, [jobs[index] for index in todo]))
        cache.mkdir(parents=True, exist_ok=True)
        for index, outputs in zip(todo, computed, strict=True):
            if isinstance(outputs, str):
                raise ConfigError(f"EvalPlus task {rows[index]['id']}: {outputs}")
            known[keys[index]] = outputs
            (cache / f"{keys[index]}.json").write_text(json.dumps(outputs))
    finished = []
    for row, key, (_, entry, inputs) in zip(rows, keys, jobs, strict=True):
        plus = row["metadata"]["evalplus"]
        outputs = known[key]
        tests, dropped = tests_for(entry, inputs, outputs, plus["atol"])
        base = len(plus["base_input"])
        public, _ = tests_for(entry, inputs[:1], outputs[:1], plus["atol"]) if base else (None, 0)
        metadata = dict(row["metadata"])
        metadata["evalplus"] = {"base": base, "plus": len(plus["plus_input"]), "dropped": dropped, "atol": plus["atol"]}
        if dropped == len(inputs):
            raise ConfigError(f"EvalPlus task {row['id']}: the reference solution fails on every input")
        finished.append({**row, "tests": tests, "public_tests": public, "metadata": metadata})
    return finished
