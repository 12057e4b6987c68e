"""`veriloop run alphaverus`: self-improving translation with Treefinement and anti-hacking filters.

The method's flags are generated from `AlphaVerusOptions` (`cli/options.py`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from veriloop.agents.alphaverus.state import AlphaVerusOptions
from veriloop.cli.app import JsonFlag
from veriloop.cli.options import Alias, option_flags
from veriloop.cli.run_cmd import ExecutorOption, LimitOption, TaskIdsOption, run_agent, run_app
from veriloop.errors import ConfigError

SUITE_BY_TARGET = {"dafny": "dafnybench-hints", "nagini": "alphaverus-dafny2nagini", "verus": "alphaverus-dafny2verus"}


@run_app.command("alphaverus")
@option_flags(AlphaVerusOptions, aliases=(Alias("--explore", "explore_samples"),))
def run_alphaverus(
    ctx: typer.Context,
    options: dict[str, Any],
    suite: Annotated[
        str | None, typer.Option("--suite", help="Task suite (default: the target's Dafny suite).")
    ] = None,
    limit: LimitOption = None,
    task: TaskIdsOption = None,
    executor: ExecutorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Explore translations, refine the best partial ones with tree search, filter, grow the exemplar pools."""
    from veriloop.agents.base import make_agent

    make_agent("alphaverus", options)  # a bad target or search fails with the model's message, before the suite
    if suite is None:
        target = options["target"]
        if target not in SUITE_BY_TARGET:
            raise ConfigError("pass --suite (or --target dafny|nagini|verus for the default Dafny suite)")
        suite = SUITE_BY_TARGET[target]
    run_agent(ctx, "alphaverus", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
