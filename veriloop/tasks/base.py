"""A suite is a named, versioned list of Tasks; loaders are registered by name and import lazily."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from veriloop.config import Settings
from veriloop.errors import ConfigError, NotFoundError
from veriloop.records import Task
from veriloop.registry import Registry


@dataclass(frozen=True)
class Suite:
    """Tasks plus the facts needed to reproduce a result on them."""

    name: str
    version: str
    tasks: tuple[Task, ...]
    source: str = ""

    def select(self, limit: int | None = None, ids: Sequence[str] = ()) -> Suite:
        """The tasks named in `ids` (in that order), else the first `limit` tasks."""
        if ids:
            by_id = {task.id: task for task in self.tasks}
            missing = [task_id for task_id in ids if task_id not in by_id]
            if missing:
                raise NotFoundError(f"suite {self.name} has no task {missing[0]!r}")
            chosen = tuple(by_id[task_id] for task_id in ids)
        else:
            chosen = self.tasks
        if limit is not None:
            if limit < 1:
                raise ConfigError("--limit must be at least 1")
            chosen = chosen[:limit]
        return Suite(self.name, self.version, chosen, self.source)


SuiteLoader = Callable[[Settings], Suite]

SUITES: Registry[SuiteLoader] = Registry(
    "suite",
    {
        "humaneval": "veriloop.tasks.humaneval:load_humaneval",
        "dafnybench-hints": "veriloop.tasks.dafny:load_dafnybench_hints",
        "alphaverus-dafny2nagini": "veriloop.tasks.dafny:load_dafny_to_nagini",
        "alphaverus-dafny2verus": "veriloop.tasks.dafny:load_dafny_to_verus",
        "transcoder": "veriloop.tasks.transcoder:load_unitrans",
        "transcoder-gfg": "veriloop.tasks.transcoder:load_gfg",
        "humaneval-test": "veriloop.tasks.humaneval:load_humaneval_test",
        "humaneval-train": "veriloop.tasks.humaneval:load_humaneval_train",
        "mbpp": "veriloop.tasks.mbpp:load_mbpp",
        "mbpp-train": "veriloop.tasks.mbpp:load_mbpp_train",
    },
)


def load_suite(name: str, settings: Settings) -> Suite:
    """Load the suite registered as `name`."""
    loader = SUITES.load(name)
    return loader(settings)
