"""The OpenAI-compatible router over the scripted backend, in process (the real server: tests/llm/test_openai_*)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from veriloop.config import Settings, load_settings
from veriloop.errors import BackendError
from veriloop.records import Completion, Prompt, SamplingParams
from veriloop.service.app import create_app
from veriloop.testing import ScriptedBackend

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


def settings(**service: Any) -> Settings:
    return load_settings(llm={"backend": "scripted", "model": "tiny"}, service=service)


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend(model="tiny")


@pytest.fixture
def client(backend: ScriptedBackend) -> Iterator[TestClient]:
    with TestClient(create_app(settings(), backend=backend)) as test_client:
        yield test_client


def chat(client: TestClient, **body: Any) -> Any:
    body.setdefault("messages", [{"role": "user", "content": "write add"}])
    return client.post(CHAT, json=body)


def assert_openai_error(response: Any, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def test_models_lists_the_served_model(client: TestClient) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [card["id"] for card in body["data"]] == ["tiny"]


def test_chat_completion_shape(client: TestClient, backend: ScriptedBackend) -> None:
    response = chat(
        client,
        model="tiny",
        messages=[{"role": "developer", "content": "be terse"}, {"role": "user", "content": "hi you"}],
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "tiny"
    [choice] = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "echo: hi you"}
    assert choice["finish_reason"] == "stop"
    assert choice["token_ids"] == [0, 1, 2]
    assert choice["logprobs"] is None
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    [(prompt, params)] = backend.requests
    assert isinstance(prompt, list)
    assert [(m.role, m.content) for m in prompt] == [("system", "be terse"), ("user", "hi you")]
    # OpenAI's defaults where the request says nothing.
    assert (params.temperature, params.top_p, params.n, params.max_tokens) == (1.0, 1.0, 1, 256)


def test_chat_sampling_fields_reach_the_backend(client: TestClient, backend: ScriptedBackend) -> None:
    response = chat(client, n=3, temperature=0.7, top_p=0.9, seed=11, stop="END", max_completion_tokens=40)
    assert response.status_code == 200, response.text
    assert [choice["index"] for choice in response.json()["choices"]] == [0, 1, 2]
    params = backend.requests[-1][1]
    assert (params.n, params.temperature, params.top_p, params.seed, params.stop, params.max_tokens) == (
        3,
        0.7,
        0.9,
        11,
        ["END"],
        40,
    )
    chat(client, stop=["a", "b"], max_tokens=7)
    assert backend.requests[-1][1].stop == ["a", "b"]
    assert backend.requests[-1][1].max_tokens == 7


def test_chat_text_parts_are_joined(client: TestClient, backend: ScriptedBackend) -> None:
    content = [{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}]
    response = chat(client, messages=[{"role": "user", "content": content}])
    assert response.json()["choices"][0]["message"]["content"] == "echo: two parts"


def test_chat_logprobs(client: TestClient) -> None:
    body = chat(client, logprobs=True, top_logprobs=2).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert [item["token"] for item in content] == ["token_id:0", "token_id:1", "token_id:2"]
    assert [item["logprob"] for item in content] == [0.0, 0.0, 0.0]
    assert all(item["top_logprobs"] == [] for item in content)


def test_completions_batch_indices_usage_and_logprobs(client: TestClient, backend: ScriptedBackend) -> None:
    response = client.post(TEXT, json={"model": "tiny", "prompt": ["one two", "three"], "n": 2, "logprobs": 0})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion"
    texts = [(choice["index"], choice["text"]) for choice in body["choices"]]
    assert texts == [(0, "echo: one two"), (1, "echo: one two"), (2, "echo: three"), (3, "echo: three")]
    assert body["choices"][0]["logprobs"]["token_logprobs"] == [0.0, 0.0, 0.0]
    assert body["choices"][0]["token_ids"] == [0, 1, 2]
    # prompt tokens once per prompt, completion tokens per sample
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
    assert backend.requests[-1][1].max_tokens == 16  # OpenAI's default for /completions
    assert backend.requests[-1][1].logprobs is True


def test_null_fields_take_the_defaults(client: TestClient, backend: ScriptedBackend) -> None:
    nulls = {"max_tokens": None, "temperature": None, "top_p": None, "stop": None, "seed": None, "logprobs": None}
    assert client.post(TEXT, json={"prompt": "x", **nulls}).status_code == 200
    params = backend.requests[-1][1]
    assert (params.max_tokens, params.temperature, params.top_p, params.stop, params.logprobs) == (
        16,
        1.0,
        1.0,
        [],
        False,
    )


def test_completions_stop_cuts_the_text(client: TestClient) -> None:
    body = client.post(TEXT, json={"prompt": "abc STOP def", "stop": ["STOP"]}).json()
    assert body["choices"][0]["text"] == "echo: abc "


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, {"messages": []}, "messages"),
        (CHAT, {}, "messages"),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
        (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, None),
        (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, None),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
        (TEXT, {"prompt": [1, 2, 3]}, "prompt"),
        (TEXT, {"prompt": []}, "prompt"),
        (TEXT, {"prompt": "x", "echo": True}, "echo"),
        (TEXT, {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        (TEXT, {"prompt": "x", "logprobs": 99}, "logprobs"),
    ],
)
def test_invalid_requests_get_openai_400s(
    client: TestClient, path: str, body: dict[str, Any], param: str | None
) -> None:
    error = assert_openai_error(client.post(path, json=body), 400)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] is not None and error["param"].startswith(param)


def test_malformed_json_is_a_400(client: TestClient) -> None:
    response = client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
    assert_openai_error(response, 400)


def test_unknown_model_is_404(client: TestClient) -> None:
    error = assert_openai_error(chat(client, model="gpt-17"), 404, "model")
    assert error["code"] == "model_not_found"
    assert "tiny" in error["message"]


def test_unknown_route_is_openai_shaped(client: TestClient) -> None:
    assert_openai_error(client.get("/v1/nope"), 404)


def parse_sse(text: str) -> list[Any]:
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


def test_chat_streaming(client: TestClient) -> None:
    with client.stream(
        "POST",
        CHAT,
        json={
            "messages": [{"role": "user", "content": "a b"}],
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = parse_sse(response.read().decode())
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    texts = {0: "", 1: ""}
    finished = {}
    for chunk in chunks[:-1]:
        [choice] = chunk["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
        if choice.get("finish_reason"):
            finished[choice["index"]] = choice["finish_reason"]
    assert texts == {0: "echo: a b", 1: "echo: a b"}
    assert finished == {0: "stop", 1: "stop"}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_completion_streaming(client: TestClient) -> None:
    response = client.post(TEXT, json={"prompt": "x y", "stream": True})
    chunks = parse_sse(response.text)
    assert [chunk["choices"][0]["text"] for chunk in chunks] == ["echo: x y"]
    assert chunks[0]["choices"][0]["finish_reason"] == "stop"


def test_token_auth_guards_everything_but_health(backend: ScriptedBackend) -> None:
    with TestClient(create_app(settings(api_token="s3cret"), backend=backend)) as client:
        assert client.get("/health").json()["status"] == "ok"
        error = assert_openai_error(client.get("/v1/models"), 401)
        assert error["type"] == "authentication_error"
        assert_openai_error(client.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        assert_openai_error(chat(client), 401)
        for path in ("/openapi.json", "/docs", "/v1/unknown"):
            assert_openai_error(client.get(path), 401)
        assert backend.requests == []
        auth = {"Authorization": "Bearer s3cret"}
        assert client.get("/v1/models", headers=auth).status_code == 200
        assert client.post(CHAT, json={"messages": [{"role": "user", "content": "x"}]}, headers=auth).status_code == 200
        assert client.get("/openapi.json", headers=auth).status_code == 200


class FailingBackend(ScriptedBackend):
    def __init__(self, error: Exception) -> None:
        super().__init__(model="tiny")
        self.error = error

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        raise self.error


def test_backend_errors_become_5xx_json() -> None:
    with TestClient(create_app(settings(), backend=FailingBackend(BackendError("model exploded")))) as client:
        error = assert_openai_error(chat(client), 502)
        assert error["message"] == "model exploded"
        assert error["type"] == "server_error"
    with TestClient(
        create_app(settings(), backend=FailingBackend(ZeroDivisionError())), raise_server_exceptions=False
    ) as client:
        error = assert_openai_error(chat(client), 500)
        assert "ZeroDivisionError" in error["message"]


class ClosingBackend(ScriptedBackend):
    instances: list[ClosingBackend] = []  # noqa: RUF012

    def __init__(self, model: str = "scripted") -> None:
        super().__init__(model=model)
        self.closed = False
        ClosingBackend.instances.append(self)

    async def aclose(self) -> None:
        self.closed = True


def test_lifespan_builds_the_backend_from_settings_and_closes_it() -> None:
    configured = load_settings(llm={"backend": f"{__name__}:ClosingBackend", "model": "m"})
    app = create_app(configured)
    with TestClient(app) as client:
        health = client.get("/health").json()
        assert health == {"status": "ok", "version": health["version"], "backend": "scripted", "model": "m"}
        [built] = ClosingBackend.instances
        assert not built.closed
    assert built.closed
    assert app.state.backend is None


class GatedBackend(ScriptedBackend):
    """Answers only once `expected` calls are in flight together: proves requests are not serialised."""

    def __init__(self, expected: int) -> None:
        super().__init__(model="tiny")
        self.expected = expected
        self.in_flight = 0
        self.peak = 0
        self.gate = asyncio.Event()

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.expected:
            self.gate.set()
        try:
            await asyncio.wait_for(self.gate.wait(), timeout=10)
            return await super().generate(requests, params)
        finally:
            self.in_flight -= 1


async def test_concurrent_requests_reach_the_backend_concurrently() -> None:
    backend = GatedBackend(expected=4)
    app = create_app(settings(), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            bodies = [{"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(4)]
            responses = await asyncio.gather(*(client.post(CHAT, json=body) for body in bodies))
    assert [r.status_code for r in responses] == [200] * 4
    assert backend.peak == 4
    assert sorted(r.json()["choices"][0]["message"]["content"] for r in responses) == [f"echo: q{i}" for i in range(4)]


class SpellingBackend(ScriptedBackend):
    """Says what each token id reads as, like a backend with a tokenizer."""

    def token_texts(self, token_ids: Sequence[int]) -> list[str]:
        return [f"<{token_id}>" for token_id in token_ids]


def test_logprob_tokens_use_the_backends_token_texts() -> None:
    with TestClient(create_app(settings(), backend=SpellingBackend(model="tiny"))) as client:
        content = chat(client, logprobs=True).json()["choices"][0]["logprobs"]["content"]
        assert [item["token"] for item in content] == ["<0>", "<1>", "<2>"]
        assert content[0]["bytes"] == list(b"<0>")
        logprobs = client.post(TEXT, json={"prompt": "ab cd", "logprobs": 0}).json()["choices"][0]["logprobs"]
        assert logprobs["tokens"] == ["<0>", "<1>", "<2>"]
        assert logprobs["text_offset"] == [5, 8, 11]  # after the 5-character prompt
