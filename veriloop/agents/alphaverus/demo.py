"""The demo's AlphaVerus step: a short Treefinement (width 4, depth 2) filling in DafnyBench hints, checked by Dafny.

`veriloop demo` calls `treefinement_demo` with its own store, backend and sandbox; the bundled DafnyBench
subset makes it work without a data folder. It returns a small summary for the demo's report.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions
from veriloop.agents.context import AgentContext
from veriloop.agents.runner import with_provenance
from veriloop.config import Settings
from veriloop.llm.base import Backend
from veriloop.records import Run, RunStatus
from veriloop.sandbox import Sandbox
from veriloop.store import TrajectoryStore

SUITE = "dafnybench-hints"


async def treefinement_demo(
    settings: Settings,
    store: TrajectoryStore,
    backend: Backend,
    sandbox: Sandbox,
    *,
    programs: int = 2,
    width: int = 4,
    depth: int = 2,
    max_tokens: int = 320,
) -> dict[str, Any]:
    """Treefinement on the `programs` shortest hints-removed DafnyBench programs; every node is stored."""
    from veriloop.tasks import load_suite

    bundled = settings.model_copy(update={"paths": settings.paths.model_copy(update={"data_dir": None})})
    suite = load_suite(SUITE, bundled)  # the bundled, pre-filtered programs: no first-load Dafny scan
    tasks = sorted(suite.tasks, key=lambda task: len(task.prompt))[:programs]
    options = AlphaVerusOptions(mode="inference", target="dafny", width=width, depth=depth, max_tokens=max_tokens)
    validated = options.model_dump(mode="json")
    store.upsert_tasks(tasks)
    run = Run(
        agent="alphaverus",
        suite=SUITE,
        model=backend.model_id,
        status=RunStatus.RUNNING,
        settings={
            "options": validated,
            "task_ids": [task.id for task in tasks],
            "suite_version": suite.version,
            "demo": True,
        },
    )
    chosen = suite.select(ids=[task.id for task in tasks])  # the slice the run covers, for its content hash
    run = store.create_run(
        with_provenance(run, bundled, agent_module=AlphaVerusAgent.__module__, options=validated, suite=chosen)
    )
    ctx = AgentContext(settings=settings, backend=backend, sandbox=sandbox, store=store, run=run)
    agent = AlphaVerusAgent(options)
    started = time.perf_counter()
    try:
        attempts = await asyncio.gather(*(agent.solve(task, ctx) for task in tasks))
    except BaseException as exc:
        store.finish_run(run.id, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    store.finish_run(run.id, RunStatus.FINISHED)
    verdicts = Counter(node.verify_result.status.value for node in store.list_nodes(run.id) if node.verify_result)
    return {
        "run_id": run.id,
        "suite": SUITE,
        "suite_version": suite.version,
        "width": width,
        "depth": depth,
        "programs": len(tasks),
        "solved": sum(attempt.status == "passed" for attempt in attempts),
        "best_scores": {attempt.task_id: attempt.score for attempt in attempts},
        "nodes": store.count_nodes(run.id),
        "verdicts": dict(verdicts.most_common()),
        "llm_calls": sum(int(attempt.budget.get("llm_calls", 0)) for attempt in attempts),
        "verifier_calls": sum(int(attempt.budget.get("verifier_calls", 0)) for attempt in attempts),
        "seconds": round(time.perf_counter() - started, 2),
    }
