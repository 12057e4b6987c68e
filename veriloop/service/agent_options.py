"""Each method's options as the API schema and the dashboard's queue form show them, read from `<Method>Options`.

The pydantic model is the one declaration (the CLI's flags come from it too, `cli/options.py`): the OpenAPI
schema of `POST /api/runs` lists every method's options with their bounds, choices and help (one alternative
per method, chosen by `agent`), and the dashboard builds one input per option from the same JSON schema.
Validation stays with the agent's model, so the form, the API and the CLI accept and refuse the same values with
the same messages; the API reads them as JSON, with JSON's types (strict), as its schema says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, GetJsonSchemaHandler, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from veriloop.agents.base import AGENTS
from veriloop.errors import ConfigError

Kind = Literal["integer", "number", "boolean", "choice", "text", "json"]


def options_schema(agent: str) -> dict[str, Any]:
    """The JSON schema of one method's options, titled with the method's name."""
    schema = AGENTS.load(agent).Options.model_json_schema()
    return {**schema, "title": f"{agent} options"}


def options_schemas() -> dict[str, dict[str, Any]]:
    """Every registered method's options schema, by method name."""
    return {agent: options_schema(agent) for agent in sorted(AGENTS)}


def known_agent(name: str) -> str:
    """`name` when a method is registered under it (no import), else a ValueError naming the ones there are."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose one of: {', '.join(sorted(AGENTS))}")
    return name


class _AgentNames:
    """`Annotated` metadata: the schema of a method name is the enum of the methods registered when it is built."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(core_schema), "enum": sorted(AGENTS)}


AgentName = Annotated[str, AfterValidator(known_agent), _AgentNames()]
"""A registered method's name (`AGENTS`), checked without importing it."""


def _said(error: Any) -> str:
    """A validation error's message; a validator's own words without pydantic's "Value error, "."""
    return str(error["ctx"]["error"]) if error["type"] == "value_error" else str(error["msg"])


def validate_options(agent: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` when they are valid for `agent` as JSON (strict types, as the schema says), else a ValueError."""
    try:
        AGENTS.load(agent).Options.model_validate_json(json.dumps(options), strict=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {_said(e)}" for e in exc.errors())
        raise ValueError(f"bad options for agent {agent!r}: {problems}") from None
    except ConfigError as exc:  # a validator of the options that raised a ConfigError, not a ValueError
        raise ValueError(f"bad options for agent {agent!r}: {exc}") from None
    return options


def document_options(schema: dict[str, Any]) -> None:
    """`json_schema_extra` of `RunCreate`: `options` are those of the method that `agent` names, one alternative
    per registered method (its `agent` value and its options schema)."""
    schema["oneOf"] = [
        {"properties": {"agent": {"const": agent}, "options": options}} for agent, options in options_schemas().items()
    ]


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
    """The queue form's inputs for one method, in the order its options are declared (not the old names)."""
    properties: dict[str, Any] = options_schema(agent)["properties"]
    return [_field(name, prop) for name, prop in properties.items() if not prop.get("deprecated")]
