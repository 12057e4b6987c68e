"""The openai backend asks its server for the same constraint: OpenAI's response_format for a JSON Schema,
vLLM's structured_outputs extra body for a regex or a grammar (a recording HTTP server stands in for vLLM)."""

from __future__ import annotations

import json

from tests.llm.test_openai_backend import OK, FakeServer, client, user
from veriloop.records import Constraint, SamplingParams

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


async def test_constraints_travel_as_openai_and_vllm_fields() -> None:
    with FakeServer(lambda body, hit: OK) as server:
        backend = client(server)
        for constraint in (
            Constraint(kind="json_schema", value=json.dumps(SCHEMA)),
            Constraint(kind="regex", value=r"\d+"),
            Constraint(kind="lark", value='start: "yes" | "no"'),
            Constraint(kind="gbnf", value='root ::= "yes" | "no"'),
        ):
            await backend.generate([user("hi")], SamplingParams(constraint=constraint))
        await backend.aclose()
    schema, regex, lark, gbnf = server.requests
    assert schema["response_format"] == {"type": "json_schema", "json_schema": {"name": "constraint", "schema": SCHEMA}}
    assert "structured_outputs" not in schema
    assert regex["structured_outputs"] == {"regex": r"\d+"} and "response_format" not in regex
    assert lark["structured_outputs"] == {"grammar": 'start: "yes" | "no"'}
    assert gbnf["structured_outputs"] == {"grammar": 'root ::= "yes" | "no"'}
    assert all(sent["return_token_ids"] is True for sent in server.requests)  # the backend's own extra field stays
