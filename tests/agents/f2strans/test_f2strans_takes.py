"""F2STrans's direction selects a run's tasks where the run is created (`Agent.takes` in `runner.new_run`), so
a run made by the CLI, by `POST /api/runs` or for a worker covers the same functions and records no error
attempts for functions that lack a side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.agents.runner import create_run, suite_of
from veriloop.config import load_settings
from veriloop.errors import NotFoundError
from veriloop.store import TrajectoryStore

CPP = "int f_gold(int x) { return x; }"
PY = "def f_gold(x):\n    return x\n"
ROWS = [
    {
        "id": "both",
        "prompt": "p",
        "tests": "assert f_gold(3) == 3\n",
        "metadata": {"functions": {"cpp": CPP, "python": PY}, "tests": {"cpp": "t", "python": "t"}},
    },
    {
        "id": "cpp_only",
        "prompt": "p",
        "tests": "assert f_gold(3) == 3\n",
        "metadata": {"functions": {"cpp": CPP}, "tests": {"cpp": "t"}},
    },
    {
        "id": "also",
        "prompt": "p",
        "tests": "assert f_gold(3) == 3\n",
        "metadata": {"functions": {"cpp": CPP, "python": PY}, "tests": {"python": "t"}},
    },
]


def test_a_run_covers_only_the_functions_with_its_direction(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    settings = load_settings(paths={"home": tmp_path / "home"})
    options = {"source": "cpp", "target": "python"}
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="f2strans", suite=str(path), options=options)
        assert run.settings["task_ids"] == ["pairs/both", "pairs/also"]
        assert [task.id for task in suite_of(run, settings).tasks] == ["pairs/both", "pairs/also"]
        limited = create_run(store, settings, agent="f2strans", suite=str(path), options=options, limit=1)
        assert [task.id for task in suite_of(limited, settings).tasks] == ["pairs/both"]
        named = create_run(
            store, settings, agent="f2strans", suite=str(path), options=options, task_ids=["pairs/cpp_only"]
        )
        assert [task.id for task in suite_of(named, settings).tasks] == ["pairs/cpp_only"]  # asked for by name
        with pytest.raises(NotFoundError, match="no task of suite"):
            create_run(
                store, settings, agent="f2strans", suite=str(path), options={"source": "java", "target": "python"}
            )
        everything = create_run(store, settings, agent="direct", suite=str(path))
        assert everything.settings["task_ids"] == [] and len(suite_of(everything, settings).tasks) == 3
