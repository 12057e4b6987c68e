"""`veriloop run <method>` flags generated from the method's `<Method>Options`, so each option is declared once.

The pydantic model is the one source of truth: a field `max_tokens: int = Field(384, ge=16, le=4096,
description=...)` becomes `--max-tokens INTEGER RANGE [16<=x<=4096]` with that help and default; a bool
becomes `--name/--no-name`; a `Literal` lists its choices in the help. The model alone validates the
values (choices, cross-field rules), so the CLI and `POST /api/runs` accept and refuse the same options
with the same messages; click checks only the inclusive bounds, which it reads from the same model.

Old flag spellings stay usable as hidden aliases (`Alias`), so scripts written before the vocabulary
was unified (`--n`, `--select`, `--from/--to`, `--refinements`, `--explore`) keep working.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.markup import escape

F = TypeVar("F", bound=Callable[..., Any])

_UNSET: Any = object()
"""Default of an alias flag: tells "not given" apart from any value the user may pass."""


@dataclass(frozen=True)
class Alias:
    """An old flag spelling of a field, hidden from --help; `value` makes it a switch that sets that value."""

    flag: str
    field: str
    value: Any = _UNSET


def flag_name(field: str) -> str:
    """The flag of an options field: the field's name with dashes (`max_tokens` -> `--max-tokens`)."""
    return "--" + field.replace("_", "-")


def _optional(annotation: Any) -> tuple[Any, bool]:
    """(the type without `None`, whether `None` was allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def choices(annotation: Any) -> tuple[str, ...] | None:
    """The allowed values of a `Literal` or `Enum` field (None for any other type)."""
    inner, _ = _optional(annotation)
    if get_origin(inner) is Literal:
        return tuple(str(arg) for arg in get_args(inner))
    if isinstance(inner, type) and issubclass(inner, Enum):
        return tuple(str(member.value) for member in inner)
    return None


def _bounds(field: FieldInfo) -> dict[str, Any]:
    """The inclusive bounds click can check (exclusive ones are left to the model)."""
    bounds: dict[str, Any] = {}
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            bounds["min"] = item.ge
        elif isinstance(item, annotated_types.Le):
            bounds["max"] = item.le
    return bounds


def _help(field: FieldInfo, allowed: tuple[str, ...] | None) -> str:
    text = escape((field.description or "").strip())  # `[refine]` is text, not rich markup
    extra = [f"one of: {', '.join(allowed)}"] if allowed else []
    extra += [f"> {item.gt}" for item in field.metadata if isinstance(item, annotated_types.Gt)]
    extra += [f"< {item.lt}" for item in field.metadata if isinstance(item, annotated_types.Lt)]
    return f"{text} [{'; '.join(extra)}]" if extra else text


def _parameter(name: str, field: FieldInfo, panel: str | None) -> inspect.Parameter:
    """The typer parameter of one options field."""
    annotation, optional = _optional(field.annotation)
    allowed = choices(field.annotation)
    flag = flag_name(name)
    info: dict[str, Any] = {"help": _help(field, allowed), "rich_help_panel": panel}
    kind: Any
    if annotation is bool:
        decls, kind = (f"{flag}/--no-{flag[2:]}",), bool
    elif allowed is not None:
        decls, kind = (flag,), str
        info["metavar"] = "[" + "|".join(allowed) + "]"
    else:
        decls, kind = (flag,), annotation
        info.update(_bounds(field))
    if optional:
        kind = kind | None
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    if isinstance(default, Enum):
        default = default.value
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, typer.Option(*decls, **info)]
    )


def _alias_parameter(alias: Alias, field: FieldInfo) -> inspect.Parameter:
    annotation, _ = _optional(field.annotation)
    if alias.value is not _UNSET:
        kind: Any = bool
        option = typer.Option(alias.flag, hidden=True)
        default: Any = False
    else:
        kind = str if choices(field.annotation) is not None else annotation
        option = typer.Option(alias.flag, hidden=True)
        default = None
        kind = kind | None
    return inspect.Parameter(
        _alias_key(alias), inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )


def _alias_key(alias: Alias) -> str:
    return "alias_" + alias.flag.lstrip("-").replace("-", "_")


def _normalized(value: Any, allowed: tuple[str, ...] | None) -> Any:
    """A choice typed with dashes (`best-of-n`) for one spelt with underscores (`best_of_n`)."""
    if allowed is not None and isinstance(value, str) and value not in allowed:
        underscored = value.replace("-", "_")
        if underscored in allowed:
            return underscored
    return value


def option_flags(
    model: type[BaseModel],
    *,
    aliases: Sequence[Alias] = (),
    exclude: Sequence[str] = (),
    panel: str | None = "Method options",
) -> Callable[[F], F]:
    """Decorate a command taking `options: dict[str, Any]` so typer sees one flag per field of `model` instead.

    The command receives the fields as a dict ready for `make_agent` (aliases folded in, dashed choices
    normalised); `exclude` leaves fields to the command (or to their defaults).
    """
    fields = {name: field for name, field in model.model_fields.items() if name not in exclude}
    for alias in aliases:
        if alias.field not in fields:
            raise ValueError(f"alias {alias.flag} names {alias.field!r}, which is not a flag of {model.__name__}")

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [parameter for name, parameter in signature.parameters.items() if name != "options"]
        taken = {parameter.name for parameter in own}
        clash = taken & set(fields)
        if clash:
            raise ValueError(f"{command.__name__} declares {sorted(clash)} itself; exclude them from the flags")
        generated = [_parameter(name, field, panel) for name, field in fields.items()]
        generated += [_alias_parameter(alias, fields[alias.field]) for alias in aliases]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            options = {name: _normalized(kwargs.pop(name), choices(field.annotation)) for name, field in fields.items()}
            for alias in aliases:
                given = kwargs.pop(_alias_key(alias))
                if alias.value is not _UNSET:
                    if given:
                        options[alias.field] = alias.value
                elif given is not None:
                    options[alias.field] = _normalized(given, choices(fields[alias.field].annotation))
            return command(*args, options=options, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=[*own, *generated])  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
