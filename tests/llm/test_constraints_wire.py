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


# --------------------------------------------------------------------------- /v1 accepts them

from fastapi.testclient import TestClient  # noqa: E402

from veriloop.config import load_settings  # noqa: E402
from veriloop.service.app import create_app  # noqa: E402
from veriloop.testing import ScriptedBackend  # noqa: E402


def test_v1_accepts_openai_and_vllm_constraint_fields() -> None:
    backend = ScriptedBackend(model="tiny")
    app = create_app(load_settings(llm={"backend": "scripted", "model": "tiny"}), backend=backend)
    messages = [{"role": "user", "content": "x"}]
    with TestClient(app) as client:
        bodies: list[dict[str, object]] = [
            {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}},
            {"response_format": {"type": "json_object"}},
            {"structured_outputs": {"regex": "[0-9]+"}},
            {"guided_grammar": 'root ::= "a"'},
            {"structured_outputs": {"grammar": 'start: "a"'}},
            {},
        ]
        for body in bodies:
            assert client.post("/v1/chat/completions", json={"messages": messages, **body}).status_code == 200
        assert client.post("/v1/completions", json={"prompt": "x", "guided_regex": "a+"}).status_code == 200
        bad = [
            {"structured_outputs": {"regex": "[0-9"}},
            {"response_format": {"type": "xml"}},
            {"response_format": {"type": "json_object"}, "guided_regex": "a"},
            {"structured_outputs": {"choice": ["a"]}},
        ]
        for body in bad:
            response = client.post("/v1/chat/completions", json={"messages": messages, **body})
            assert response.status_code == 400, (body, response.text)
    kinds = [params.constraint and (params.constraint.kind, params.constraint.value) for _, params in backend.requests]
    assert kinds == [
        ("json_schema", json.dumps(SCHEMA)),
        ("json_schema", '{"type": "object"}'),
        ("regex", "[0-9]+"),
        ("gbnf", 'root ::= "a"'),
        ("lark", 'start: "a"'),
        None,
        ("regex", "a+"),
    ]
