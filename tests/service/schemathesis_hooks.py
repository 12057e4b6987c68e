"""schemathesis hooks of tests/service/test_api_contract.py: the constraint languages the API's schema names.

A regex, a grammar or a JSON Schema is a value in a language of its own, which the server compiles and refuses
when it does not compile; the schema says so with a `format` on the strings (`constraint-regex`,
`constraint-grammar`, `constraint-json-schema`, see `veriloop.service.openai_schema`) and in the descriptions of the
JSON Schema objects. schemathesis cannot check that, so these hooks teach it: strategies that draw values of each
format, and a filter that drops the schema-valid (positive) cases whose constraint does not compile, since they
are not valid requests (its coverage phase fills strings with "" or "0" whatever their format). Negative cases are
left alone. Loaded through `SCHEMATHESIS_HOOKS` (a file path).
"""

from __future__ import annotations

import json
import string
from typing import Any

import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode

from veriloop.errors import ConfigError
from veriloop.llm.constraints import validate
from veriloop.records import Constraint

WORDS = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=8)
REGEX_PIECES = st.one_of(WORDS, st.sampled_from([r"[a-z]+", r"\d{1,3}", r"(yes|no)", r"[A-Z][a-z]*", r" ?", r"\w*"]))
SCHEMAS = st.recursive(
    st.sampled_from([{"type": kind} for kind in ("string", "integer", "number", "boolean", "null")])
    | st.lists(WORDS, min_size=1, max_size=3, unique=True).map(lambda words: {"enum": words}),
    lambda inner: (
        st.builds(lambda items: {"type": "array", "items": items}, inner)
        | st.dictionaries(WORDS, inner, max_size=3).map(
            lambda properties: {"type": "object", "properties": properties, "required": sorted(properties)}
        )
    ),
    max_leaves=4,
)

schemathesis.openapi.format("constraint-regex", st.lists(REGEX_PIECES, min_size=1, max_size=4).map("".join))
schemathesis.openapi.format(
    "constraint-grammar",
    st.one_of(
        st.lists(WORDS, min_size=1, max_size=3).map(lambda words: "start: " + " | ".join(map(json.dumps, words))),
        st.lists(WORDS, min_size=1, max_size=3).map(lambda words: "root ::= " + " | ".join(map(json.dumps, words))),
    ),
)
schemathesis.openapi.format("constraint-json-schema", SCHEMAS.map(json.dumps))


def _constraints(body: dict[str, Any]) -> list[Constraint | None]:
    """The constraints an OpenAI request body holds; None for an empty one (no value of any of the languages)."""
    found: list[tuple[str, Any]] = []
    outputs = body.get("structured_outputs")
    if isinstance(outputs, dict):
        found += [(key, outputs.get(key)) for key in ("regex", "json", "grammar")]
    found += [(key, body.get(f"guided_{key}")) for key in ("regex", "json", "grammar")]
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        found.append(("json", fmt["json_schema"].get("schema")))
    constraints: list[Constraint | None] = []
    for key, value in found:
        if key == "json" and isinstance(value, dict):
            value = json.dumps(value)
        if not isinstance(value, str):
            continue  # absent, or a type the schema refuses: the validator's business, not a language's
        if not value:
            constraints.append(None)
        elif key == "regex":
            constraints.append(Constraint(kind="regex", value=value))
        elif key == "json":
            constraints.append(Constraint(kind="json_schema", value=value))
        else:
            constraints.append(Constraint(kind="gbnf" if "::=" in value else "lark", value=value))
    return constraints


def _compiles(constraint: Constraint | None) -> bool:
    if constraint is None:
        return False
    try:
        validate(constraint)
    except ConfigError:
        return False
    return True


@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    """Keep every negative case, and the positive ones whose constraints compile."""
    meta = case.meta
    if meta is None or meta.generation.mode is not GenerationMode.POSITIVE or not isinstance(case.body, dict):
        return True
    return all(_compiles(constraint) for constraint in _constraints(case.body))
