"""Executors: how a claimed run is executed, in this process (`local`) or spread over a Ray cluster (`ray`).

Both drive the same code path, `agents.runner.execute_run`, so every agent runs under either without
knowing it. The Ray executor splits a run's remaining tasks into shards, one Ray task each (every
shard is `execute_run(..., only=shard, finish=False)` in a Ray worker process, writing to the same
database), and marks the run's end itself. An agent that overrides `run_suite` (its unit of work is
the whole suite) runs as one Ray task.

    executor = get_executor(settings)                   # service.executor: local | ray
    run = await executor.execute(settings, run_id)      # resumes: finished tasks are skipped
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from veriloop.agents.base import Agent, make_agent
from veriloop.agents.runner import execute_run, preempted, settings_for_run, suite_of, todo_tasks
from veriloop.config import Settings
from veriloop.errors import ConfigError, VeriloopError
from veriloop.llm.base import Backend
from veriloop.records import Run, RunStatus
from veriloop.registry import Registry
from veriloop.store import TrajectoryStore


class Executor(ABC):
    """Executes one stored run to its end (resuming it when it was interrupted)."""

    name: ClassVar[str]

    @abstractmethod
    async def execute(self, settings: Settings, run_id: str, *, backend: Backend | None = None) -> Run:
        """Run `run_id` to its end; `backend` is a running backend this process may share (used when it fits)."""

    async def aclose(self) -> None:  # noqa: B027 (optional hook; the local executor holds nothing)
        """Release what the executor started."""


class LocalExecutor(Executor):
    """The run's tasks as asyncio tasks in this process, sharing one backend so their requests batch together."""

    name = "local"

    async def execute(self, settings: Settings, run_id: str, *, backend: Backend | None = None) -> Run:
        store = await asyncio.to_thread(TrajectoryStore.from_settings, settings)
        try:
            run = await asyncio.to_thread(store.get_run, run_id)
            run_settings = settings_for_run(settings, run)
            shared = backend if run_settings is settings else None
            finished, _ = await execute_run(run_settings, store, run.id, backend=shared)
            return finished
        finally:
            store.close()


def _execute_shard(settings_data: dict[str, Any], run_id: str, task_ids: list[str] | None) -> int:
    """One Ray task: a shard of a run, in a Ray worker process, against the shared database."""
    import torch

    torch.set_num_threads(1)
    settings = Settings.model_validate(settings_data)

    async def shard() -> int:
        with TrajectoryStore.from_settings(settings) as store:
            _, attempts = await execute_run(settings, store, run_id, only=task_ids, finish=False)
            return len(attempts)

    return asyncio.run(shard())


class RayExecutor(Executor):
    """Shards of a run as Ray tasks: on the cluster at `service.ray_address`, or a local instance it starts."""

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, shards: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.shards = shards
        self._started = False
        self._remote: Any = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RayExecutor:
        return cls(settings.service.ray_address)

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise ConfigError("the ray executor needs Ray: pip install 'veriloop[ray]'") from None
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address:
                kwargs["address"] = self.address
            else:
                kwargs["num_cpus"] = self.num_cpus or os.cpu_count() or 1
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local instance"
                raise ConfigError(f"cannot start Ray on {where}: {exc}") from None
            self._started = True
        if self._remote is None:
            self._remote = ray.remote(_execute_shard)
        return ray

    def _plan(self, ray: Any, store: TrajectoryStore, settings: Settings, run: Run) -> list[list[str] | None]:
        agent = make_agent(run.agent, run.settings.get("options"))
        if agent.learns or type(agent).run_suite is not Agent.run_suite:
            return [None]  # the agent's unit of work is the whole suite (a learning loop needs every task)
        todo = [task.id for task in todo_tasks(store, run, suite_of(run, settings))]
        if not todo:
            return []
        width = self.shards or max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = min(width, len(todo))
        return [todo[index::count] for index in range(count)]

    async def execute(self, settings: Settings, run_id: str, *, backend: Backend | None = None) -> Run:
        ray = await asyncio.to_thread(self._ray)
        store = await asyncio.to_thread(TrajectoryStore.from_settings, settings)
        refs: list[Any] = []
        try:
            run = await asyncio.to_thread(store.get_run, run_id)
            run_settings = settings_for_run(settings, run)
            plan = await asyncio.to_thread(self._plan, ray, store, run_settings, run)
            await asyncio.to_thread(store.set_run_status, run.id, RunStatus.RUNNING)
            data = run_settings.model_dump(mode="json")
            refs = [self._remote.remote(data, run.id, shard) for shard in plan]
            try:
                await asyncio.gather(*refs)
            except BaseException as exc:
                for ref in refs:
                    ray.cancel(ref, force=True)
                if preempted(exc):
                    raise
                if isinstance(exc, asyncio.CancelledError):
                    await asyncio.to_thread(store.finish_run, run.id, RunStatus.CANCELLED, "cancelled")
                    raise
                cause = getattr(exc, "cause", None) or exc
                message = f"{type(cause).__name__}: {cause}"
                await asyncio.to_thread(store.finish_run, run.id, RunStatus.FAILED, message)
                if isinstance(cause, VeriloopError):
                    raise cause from None
                raise VeriloopError(f"a Ray shard of run {run.id} failed: {message}") from None
            return await asyncio.to_thread(store.finish_run, run.id, RunStatus.FINISHED)
        finally:
            store.close()

    async def aclose(self) -> None:
        """Shut down the local Ray instance this executor started (a cluster joined by address stays up)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
            self._remote = None


EXECUTORS: Registry[type[Executor]] = Registry(
    "executor",
    {"local": "veriloop.service.executor:LocalExecutor", "ray": "veriloop.service.executor:RayExecutor"},
)


def get_executor(settings: Settings, name: str | None = None) -> Executor:
    """The executor named by `name` or `service.executor`."""
    kind = EXECUTORS.load(name or settings.service.executor)
    if kind is RayExecutor:
        return RayExecutor.from_settings(settings)
    return kind()
