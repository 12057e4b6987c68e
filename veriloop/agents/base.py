"""The seam between a method and the machinery that runs it: one `Agent` per method, registered by name.

A method's folder (`agents/<method>/`) exposes an Agent subclass. The runner (`agents/runner.py`),
the CLI (`veriloop run <method>`) and the service's workers all drive agents through this one
shape, so a method never knows whether it runs from a terminal, a worker or a Ray actor.

    agent = make_agent("mucode", {"turns": 3})             # options validated by the agent's model
    attempt = await agent.solve(task, ctx)                 # one task, every step stored as nodes
    attempts = await agent.run_suite(tasks, ctx, on_attempt)   # the whole suite (default: solve each)
    attempts = await agent.train(tasks, ctx, on_attempt)       # options.train: the method's learning loop

Every method with a learning loop has a `train: bool` option and overrides `train`; the runner calls it
instead of `run_suite` when the option is on, so `veriloop run M --train`, `POST /api/runs` with
`{"train": true}` and the workers all reach the same loop.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from veriloop.agents.context import AgentContext
from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Attempt, Task
from veriloop.registry import Registry

OnAttempt = Callable[[Attempt], Awaitable[None] | None]
"""Called once per finished task; the runner uses it for progress bars and live events."""

TrainOnRun = Callable[..., Any]
"""`train_on_run(settings, store, run, tasks, options)`: a method's training round on what a run stored."""


class AgentOptions(BaseModel):
    """Base of every agent's options: strict, so a misspelt option is an error and not a silent default."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(8, ge=1, description="Tasks in flight at once; their requests share the batcher.")


OptionsT = TypeVar("OptionsT", bound=AgentOptions)


class Agent(ABC, Generic[OptionsT]):
    """A method: solves one task at a time, storing each step as a Node and returning the Attempt.

    Methods whose unit of work is the whole suite (self-improvement rounds, training loops)
    override `run_suite`; the default solves tasks concurrently, `options.concurrency` at a time.
    """

    name: ClassVar[str]
    Options: ClassVar[type[AgentOptions]] = AgentOptions

    def __init__(self, options: OptionsT | None = None) -> None:
        self.options: OptionsT = options if options is not None else self.Options()  # type: ignore[assignment]

    @classmethod
    def prepare(cls, settings: Settings) -> Settings:
        """The settings this method's runs need, applied when a run is created (so the run records the model it
        really uses). Default: as given; ReVISE swaps in a copy of the model with its decision tokens."""
        return settings

    def takes(self, task: Task) -> bool:
        """Whether a run of this method (with these options) covers `task` when no task ids are given: the runner
        asks when a run is created, so the CLI, the API and workers run the same slice. Default: every task."""
        return True

    @abstractmethod
    async def solve(self, task: Task, ctx: AgentContext) -> Attempt:
        """Solve one task; store its nodes and its Attempt and return the Attempt."""

    async def run_suite(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """Every task through `solve`, a bounded number at a time, reporting each as it finishes."""
        gate = asyncio.Semaphore(self.options.concurrency)

        async def one(task: Task) -> Attempt:
            async with gate:
                return await self.solve(task, ctx)

        from veriloop.agents.common import gather_as_finished

        return await gather_as_finished([one(task) for task in tasks], on_attempt)

    @property
    def learns(self) -> bool:
        """Whether this run is the method's learning loop (its options say `train=True`)."""
        return bool(getattr(self.options, "train", False))

    async def train(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None = None
    ) -> list[Attempt]:
        """The method's learning loop on the run's tasks; returns the run's attempts like `run_suite`.

        μCode's expert iteration replaces solving; F2STrans and ReVISE solve, then train on what the run stored.
        """
        raise ConfigError(f"method {self.name!r} has no learning loop (no train option)")

    async def solve_then_train(
        self, tasks: Sequence[Task], ctx: AgentContext, on_attempt: OnAttempt | None, train_on_run: TrainOnRun
    ) -> list[Attempt]:
        """The loop F2STrans and ReVISE share: solve the tasks, then train on every task the run has stored
        (a resumed run's earlier tasks too)."""
        from veriloop.agents.runner import suite_of

        attempts = await self.run_suite(tasks, ctx, on_attempt)
        everything = suite_of(ctx.run, ctx.settings).tasks
        await asyncio.to_thread(train_on_run, ctx.settings, ctx.store, ctx.run, everything, self.options)
        return attempts


async def notify(on_attempt: OnAttempt | None, attempt: Attempt) -> None:
    """Call a progress callback that may be sync or async."""
    if on_attempt is None:
        return
    result = on_attempt(attempt)
    if inspect.isawaitable(result):
        await result


AGENTS: Registry[type[Agent[Any]]] = Registry(
    "agent",
    {
        "direct": "veriloop.agents.direct:DirectAgent",
        "mucode": "veriloop.agents.mucode:MuCodeAgent",
        "alphaverus": "veriloop.agents.alphaverus:AlphaVerusAgent",
        "f2strans": "veriloop.agents.f2strans:F2STransAgent",
        "revise": "veriloop.agents.revise:ReviseAgent",
    },
)


def make_agent(name: str, options: dict[str, Any] | None = None) -> Agent[Any]:
    """The agent registered as `name`, with its options validated (bad options are a ConfigError)."""
    agent_type = AGENTS.load(name)
    try:
        parsed = agent_type.Options.model_validate(options or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"bad options for agent {name!r}: {problems}") from None
    return agent_type(parsed)
