"""The API schema and the dashboard's queue form are generated from each method's Options, declared once."""

from __future__ import annotations

from veriloop.agents.base import AGENTS
from veriloop.agents.mucode import MuCodeOptions
from veriloop.config import load_settings
from veriloop.service.agent_options import form_fields
from veriloop.service.app import create_app
from veriloop.testing import ScriptedBackend


def test_the_run_schema_lists_every_methods_options_with_bounds_and_choices() -> None:
    app = create_app(load_settings(llm={"backend": "scripted", "model": "scripted"}), backend=ScriptedBackend())
    run = app.openapi()["components"]["schemas"]["RunCreate"]
    assert run["properties"]["agent"]["enum"] == sorted(AGENTS)
    by_agent = {case["properties"]["agent"]["const"]: case["properties"]["options"] for case in run["oneOf"]}
    assert set(by_agent) == set(AGENTS)  # each agent's options, and only its own
    assert {agent: options["title"] for agent, options in by_agent.items()} == {a: f"{a} options" for a in AGENTS}
    mucode = by_agent["mucode"]
    assert mucode["additionalProperties"] is False
    assert set(mucode["properties"]) == set(MuCodeOptions.model_fields) | {"n", "select"}  # + the old names
    assert mucode["properties"]["n"]["deprecated"] and mucode["properties"]["select"]["deprecated"]
    turns = MuCodeOptions.model_fields["turns"]
    assert mucode["properties"]["turns"]["description"] == turns.description
    assert mucode["properties"]["selection"]["enum"] == ["pt", "lv", "pt+lv", "random"]


def test_form_fields_follow_the_option_types() -> None:
    fields = {field.name: field for field in form_fields("mucode")}
    assert list(fields) == list(MuCodeOptions.model_fields)
    assert fields["turns"].kind == "integer" and fields["turns"].minimum == 1 and fields["turns"].default == "3"
    assert fields["selection"].kind == "choice" and fields["selection"].choices == ("pt", "lv", "pt+lv", "random")
    assert fields["train"].kind == "boolean" and fields["train"].default == "false"
    assert (
        fields["temperature"].kind == "number"
        and fields["temperature"].nullable
        and fields["temperature"].default == ""
    )
    revise = {field.name: field for field in form_fields("revise")}
    assert revise["stage_steps"].kind == "json" and revise["stage_steps"].default.startswith("[")
