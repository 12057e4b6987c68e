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
from veriloop.verifiers.target import verifier_target


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
        suite = verifier_target(options["target"]).suite if options["target"] else None
        if suite is None:
            raise ConfigError("pass --suite (or a --target whose verifier names a default suite, such as dafny)")
    run_agent(ctx, "alphaverus", suite, options, limit=limit, task_ids=task, as_json=as_json, executor=executor)
