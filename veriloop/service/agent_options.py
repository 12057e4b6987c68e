"""Each method's options as the API schema and the dashboard's queue form show them, read from `<Method>Options`.

The pydantic model is the one declaration (the CLI's flags come from it too, `cli/options.py`): the OpenAPI
schema of `POST /api/runs` lists every method's options with their bounds, choices and help, and the
dashboard builds one input per option from the same JSON schema. Validation stays with the agent, so the
form, the API and the CLI accept and refuse the same values with the same messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from veriloop.agents.base import AGENTS

Kind = Literal["integer", "number", "boolean", "choice", "text", "json"]


def options_schema(agent: str) -> dict[str, Any]:
    """The JSON schema of one method's options, titled with the method's name."""
    schema = AGENTS.load(agent).Options.model_json_schema()
    return {**schema, "title": f"{agent} options"}


def options_schemas() -> dict[str, dict[str, Any]]:
    """Every registered method's options schema, by method name."""
    return {agent: options_schema(agent) for agent in sorted(AGENTS)}


def document_options(schema: dict[str, Any]) -> None:
    """`json_schema_extra` of `RunCreate.options`: any one method's options (the `agent` field says which)."""
    schema["anyOf"] = list(options_schemas().values())


@dataclass(frozen=True)
class FormField:
    """One input of the queue form: the option's name, how to edit it, its default as the form shows it."""

    name: str
    kind: Kind
    default: str
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _field(name: str, prop: dict[str, Any]) -> FormField:
    variants = prop.get("anyOf", [prop])
    typed = [v for v in variants if v.get("type") != "null"]
    nullable = len(typed) < len(variants)
    inner = typed[0] if len(typed) == 1 else {}
    kind: Kind = "json"
    choices: tuple[str, ...] = ()
    if "enum" in inner:
        kind, choices = "choice", tuple(str(choice) for choice in inner["enum"])
    elif inner.get("type") in ("integer", "number", "boolean"):
        kind = inner["type"]
    elif inner.get("type") == "string":
        kind = "text"
    return FormField(
        name=name,
        kind=kind,
        default=_shown(prop.get("default")),
        help=prop.get("description", ""),
        choices=choices,
        minimum=inner.get("minimum"),
        maximum=inner.get("maximum"),
        nullable=nullable,
    )


def form_fields(agent: str) -> list[FormField]:
    """The queue form's inputs for one method, in the order its options are declared."""
    properties: dict[str, Any] = options_schema(agent)["properties"]
    return [_field(name, prop) for name, prop in properties.items()]
