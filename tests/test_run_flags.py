"""`veriloop run <method>` flags come from `<Method>Options`: every field has its flag, shared ideas share a name,
bounds and choices are the model's, and the old spellings still work (hidden)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.testing import CliRunner

from veriloop.agents.base import AGENTS
from veriloop.cli import main
from veriloop.cli.app import app
from veriloop.cli.options import flag_name

METHODS = ("mucode", "alphaverus", "f2strans", "revise")
SHARED = {
    "--samples": ("mucode", "f2strans", "revise"),
    "--selection": ("mucode", "revise"),
    "--source": ("alphaverus", "f2strans"),
    "--target": ("alphaverus", "f2strans"),
    "--train": ("mucode", "f2strans", "revise"),
    "--lora": ("f2strans", "revise"),
    "--max-tokens": METHODS,
    "--temperature": METHODS,
    "--seed": METHODS,
    "--concurrency": METHODS,
}
OLD_SPELLINGS = {
    "mucode": ("--n", "--select"),
    "f2strans": ("--from", "--to"),
    "revise": ("--refinements", "--full"),
    "alphaverus": ("--explore",),
}


def _help(method: str) -> str:
    result = CliRunner().invoke(app, ["run", method, "--help"], env={"COLUMNS": "250", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    return {method: _help(method) for method in METHODS}


@pytest.mark.parametrize("method", METHODS)
def test_every_option_of_the_model_is_a_flag_with_its_description(method: str, helps: dict[str, str]) -> None:
    options: Any = AGENTS.load(method).Options
    flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", helps[method]))
    for name, field in options.model_fields.items():
        assert flag_name(name) in flags, f"{method}: {name} has no flag"
        first_words = " ".join((field.description or "").split()[:3])
        assert first_words in " ".join(helps[method].split()), f"{method}: help of {name} is not its description"
    assert not flags & set(OLD_SPELLINGS[method]), "old spellings are hidden"


def test_shared_ideas_have_one_flag_name_in_every_method(helps: dict[str, str]) -> None:
    for flag, methods in SHARED.items():
        for method in methods:
            assert re.search(rf"{re.escape(flag)}\b", helps[method]), f"{method} lacks {flag}"
    for old in ("--n ", "--select ", "--from ", "--to ", "--refinements ", "--explore "):
        assert not any(old in text for text in helps.values())


def test_bounds_and_choices_come_from_the_model(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    help_text = " ".join(_help("mucode").split())
    assert "1<=x<=10" in help_text and "[pt|lv|pt+lv|random]" in help_text  # turns le=10; Selection Literal
    assert main(["--home", str(tmp_path), "run", "mucode", "--turns", "11"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "Invalid value for '--turns'" in err and "less than or equal to 10" in err
    assert main(["--home", str(tmp_path), "run", "mucode", "--selection", "best"]) != 0
    err = capsys.readouterr().err
    assert "bad options for agent 'mucode': selection: Input should be 'pt', 'lv', 'pt+lv' or 'random'" in err
    assert main(["--home", str(tmp_path), "run", "mucode", "--n", "0"]) != 0  # an alias gets the model's bound too
    assert "samples: Input should be greater than or equal to 1" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "run", "alphaverus", "--suite", "x", "--node-temperature", "0"]) != 0
    assert "node_temperature: Input should be greater than 0" in capsys.readouterr().err  # exclusive: the model's


def test_old_spellings_still_reach_the_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(ctx: Any, agent: str, suite: str, options: dict[str, Any], **_: Any) -> tuple[Any, list[Any]]:
        seen.append((agent, options))
        raise SystemExit(0)

    monkeypatch.setattr("veriloop.cli.run_mucode_cmd.run_agent", record)
    monkeypatch.setattr("veriloop.cli.run_revise_cmd.run_agent", record)
    monkeypatch.setattr("veriloop.cli.run_alphaverus_cmd.run_agent", record)
    home = ["--home", str(tmp_path)]
    main([*home, "run", "mucode", "--n", "3", "--select", "random"])
    main([*home, "run", "revise", "--refinements", "1", "--lora", "--full"])
    main([*home, "run", "alphaverus", "--target", "dafny", "--explore", "2", "--search", "best-of-n"])
    (_, mucode), (_, revise), (_, alphaverus) = seen
    assert (mucode["samples"], mucode["selection"]) == (3, "random")
    assert (revise["max_refinements"], revise["lora"]) == (1, False)
    assert (alphaverus["explore_samples"], alphaverus["search"]) == (2, "best_of_n")
    assert set(mucode) == set(AGENTS.load("mucode").Options.model_fields)  # every field, defaults included
