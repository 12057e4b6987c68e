"""Create and execute runs: the one code path shared by `veriloop run`, `veriloop demo` and the workers.

A run is created first (status pending, with the agent's validated options, the suite slice, the
model and its provenance in `run.settings`), then executed. Execution is resumable: tasks that already have a
finished attempt in the run are skipped, so a run interrupted by a crash or a killed worker
continues where it stopped.

Executors use two extra knobs: `only` restricts one call to a shard of the run's tasks (the Ray
executor spreads a run over the cluster that way) with `finish=False` leaving the run's status to
the coordinator, and cancelling the executing task with `PREEMPTED` as the message (a worker that
lost its lease) stops it without marking the run, which another worker now holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from veriloop.agents import provenance
from veriloop.agents.base import OnAttempt, make_agent
from veriloop.agents.context import AgentContext
from veriloop.config import LLMSettings, Settings
from veriloop.errors import NotFoundError
from veriloop.llm.base import Backend
from veriloop.records import Attempt, Run, RunStatus, Task
from veriloop.sandbox import Sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import Suite, load_suite
from veriloop.tasks.files import suite_key

FINISHED_ATTEMPTS = frozenset({"passed", "failed"})

PREEMPTED = "veriloop: preempted"
"""Cancellation message meaning "another worker holds this run now": the run's status is left alone."""


def settings_for_run(settings: Settings, run: Run) -> Settings:
    """The executing process's settings, with the model the run asked for (the process picks the backend)."""
    if run.model == settings.llm.model:
        return settings
    llm = LLMSettings.model_validate({**settings.llm.model_dump(), "model": run.model})
    return settings.model_copy(update={"llm": llm})


def preempted(exc: BaseException) -> bool:
    """Whether `exc` is a cancellation sent with `PREEMPTED`."""
    return isinstance(exc, asyncio.CancelledError) and PREEMPTED in exc.args


def todo_tasks(store: TrajectoryStore, run: Run, suite: Suite) -> list[Task]:
    """The run's tasks that have no finished attempt yet, in suite order."""
    done = {attempt.task_id for attempt in store.list_attempts(run.id) if attempt.status in FINISHED_ATTEMPTS}
    return [task for task in suite.tasks if task.id not in done]


def suite_of(run: Run, settings: Settings) -> Suite:
    """The slice of the run's suite that the run covers."""
    return load_suite(run.suite, settings).select(
        limit=run.settings.get("limit"), ids=tuple(run.settings.get("task_ids") or ())
    )


def with_provenance(run: Run, settings: Settings, *, agent_module: str, options: dict[str, Any], suite: Suite) -> Run:
    """`run` with its provenance (`agents/provenance.py`) in `run.settings["provenance"]`: every code path that
    stores a run of a method (this module's `create_run`, the demo's Treefinement step, the benches) passes its run
    through here first, so no run made today is shown as "not recorded"."""
    found = provenance.collect(settings, agent_module=agent_module, options=options, suite=suite)
    return run.model_copy(update={"settings": {**run.settings, "provenance": found.model_dump(mode="json")}})


def create_run(
    store: TrajectoryStore,
    settings: Settings,
    *,
    agent: str,
    suite: str,
    options: dict[str, Any] | None = None,
    limit: int | None = None,
    task_ids: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> Run:
    """Validate the agent's options and the suite slice, store the tasks, and store a pending run (with the model
    the agent's `prepare` chose)."""
    run, _ = new_run(
        store, settings, agent=agent, suite=suite, options=options, limit=limit, task_ids=task_ids, extra=extra
    )
    return run


def new_run(
    store: TrajectoryStore,
    settings: Settings,
    *,
    agent: str,
    suite: str,
    options: dict[str, Any] | None = None,
    limit: int | None = None,
    task_ids: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> tuple[Run, Suite]:
    """`create_run`, also returning the slice it stored, so a caller that executes the run here reads the suite once.

    Without explicit `task_ids`, the slice is the suite's tasks the method takes (`Agent.takes`: F2STrans's
    direction), kept as the run's task ids, so a run made by the CLI, the API or a worker covers the same tasks.
    """
    method = make_agent(agent, options)
    validated = method.options.model_dump(mode="json")
    settings = type(method).prepare(settings)
    loaded = load_suite(suite, settings)
    if not task_ids:
        taken = [task.id for task in loaded.tasks if method.takes(task)]
        if not taken:
            # like task ids that name nothing: the request is well-formed, the tasks it asks for are not there (404)
            raise NotFoundError(f"no task of suite {suite!r} is one {agent!r} takes with these options")
        if len(taken) < len(loaded.tasks):
            task_ids = taken
    chosen = loaded.select(limit=limit, ids=tuple(task_ids))
    store.upsert_tasks(chosen.tasks)
    run_settings: dict[str, Any] = {
        "options": validated,
        "limit": limit,
        "task_ids": list(task_ids),
        "suite_version": chosen.version,
        "llm": settings.llm.model_dump(mode="json", exclude={"api_key"}),
        "sandbox": settings.sandbox.backend,
        **(extra or {}),
    }
    run = Run(agent=agent, suite=suite_key(suite), model=settings.llm.model, settings=run_settings)
    stored = store.create_run(
        with_provenance(run, settings, agent_module=type(method).__module__, options=validated, suite=chosen)
    )
    return stored, chosen


RUN_KEYS = frozenset({"options", "limit", "task_ids", "suite_version", "llm", "sandbox", "provenance"})
"""Keys `create_run` writes itself; any other key of `run.settings` came in as `extra` and is carried over."""


def create_rerun(store: TrajectoryStore, settings: Settings, run_id: str) -> tuple[Run, Run]:
    """A new pending run that repeats a stored one: same method and options, suite slice, model, LLM settings
    and sandbox backend (this process keeps its own secrets and other settings); returns (old, new)."""
    old = store.get_run(run_id)
    stored = old.settings
    llm = LLMSettings.model_validate(
        {**settings.llm.model_dump(), **(stored.get("llm") or {}), "model": old.model, "api_key": settings.llm.api_key}
    )
    sandbox = settings.sandbox
    if isinstance(stored.get("sandbox"), str):
        sandbox = sandbox.model_copy(update={"backend": stored["sandbox"]})
    settings = settings.model_copy(update={"llm": llm, "sandbox": sandbox})
    extra = {key: value for key, value in stored.items() if key not in RUN_KEYS}
    new = create_run(
        store,
        settings,
        agent=old.agent,
        suite=old.suite,
        options=stored.get("options"),
        limit=stored.get("limit"),
        task_ids=stored.get("task_ids") or (),
        extra={**extra, "rerun_of": old.id},
    )
    return old, new


async def execute_run(
    settings: Settings,
    store: TrajectoryStore,
    run_id: str,
    *,
    backend: Backend | None = None,
    sandbox: Sandbox | None = None,
    on_attempt: OnAttempt | None = None,
    only: Sequence[str] | None = None,
    finish: bool = True,
    suite: Suite | None = None,
) -> tuple[Run, list[Attempt]]:
    """Run (or resume) a stored run to the end; returns the finished run and all of its attempts.

    A backend or sandbox passed in stays open (the caller owns it); ones made here are closed here.
    An exception marks the run failed with the error and propagates; cancellation marks it cancelled
    (unless it was sent with `PREEMPTED`). `only` limits this call to those task ids; with
    `finish=False` the run's end status is left to the caller (a coordinator of several shards). `suite` is the
    run's slice when the caller has it already (`new_run`), so it is not read again.
    """
    from veriloop.llm import get_backend
    from veriloop.sandbox import get_sandbox

    run = store.get_run(run_id)
    settings = settings_for_run(settings, run)
    agent = make_agent(run.agent, run.settings.get("options"))
    suite = suite if suite is not None else suite_of(run, settings)
    todo = todo_tasks(store, run, suite)
    if only is not None:
        wanted = set(only)
        todo = [task for task in todo if task.id in wanted]
    run = store.set_run_status(run.id, RunStatus.RUNNING)
    own_backend, own_sandbox = backend is None, sandbox is None
    ctx: AgentContext | None = None
    try:
        backend = backend if backend is not None else get_backend(settings)
        sandbox = sandbox if sandbox is not None else get_sandbox(settings)
        ctx = AgentContext(settings=settings, backend=backend, sandbox=sandbox, store=store, run=run)
        if agent.learns and only is None:  # a learning loop needs every task (the Ray executor never shards one)
            await agent.train(todo, ctx, on_attempt)
        else:
            await agent.run_suite(todo, ctx, on_attempt)
        if finish:
            run = store.finish_run(run.id, RunStatus.FINISHED)
    except BaseException as exc:
        if preempted(exc) or not finish:
            raise
        cancelled = not isinstance(exc, Exception)
        status = RunStatus.CANCELLED if cancelled else RunStatus.FAILED
        store.finish_run(run.id, status, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if ctx is not None:
            await ctx.aclose()
        if own_backend and backend is not None:
            await backend.aclose()
        if own_sandbox and sandbox is not None:
            await sandbox.aclose()
    return run, suite_attempts(store, run.id, suite)


def suite_attempts(store: TrajectoryStore, run_id: str, suite: Suite) -> list[Attempt]:
    """The run's attempts on the suite's tasks, in suite order."""
    order = {task.id: index for index, task in enumerate(suite.tasks)}
    attempts = [attempt for attempt in store.list_attempts(run_id) if attempt.task_id in order]
    attempts.sort(key=lambda attempt: order[attempt.task_id])
    return attempts
