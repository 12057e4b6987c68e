"""The `openai` backend against a real `veriloop serve` process, and against a tiny scripted HTTP server
for what a healthy server never does (failing, throttling, ignoring `n`, rejecting extra fields)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.errors import BackendError
from veriloop.llm.base import get_backend
from veriloop.llm.openai_backend import OpenAIBackend
from veriloop.records import SamplingParams
from veriloop.testing import CLI, ServedProcess, free_port, served, user

TOKEN = "test-token"
MODEL = "smollm2-135m-instruct"  # the default settings.llm.model, which the scripted server reports


# --------------------------------------------------------------------------- against `veriloop serve`


@pytest.fixture(scope="module")
def scripted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    with served("--backend", "scripted", home=home, env={"VERILOOP_SERVICE__API_TOKEN": TOKEN}) as server:
        yield server


def backend_for(server: ServedProcess, **llm: Any) -> OpenAIBackend:
    values = {"backend": "openai", "base_url": server.base_url, "api_key": TOKEN, **llm}
    backend = get_backend(load_settings(llm=values))
    assert isinstance(backend, OpenAIBackend)
    return backend


async def test_chat_through_a_real_server(scripted_server: ServedProcess) -> None:
    backend = backend_for(scripted_server)
    try:
        [[completion]] = await backend.generate([user("add two numbers")], SamplingParams(max_tokens=32))
    finally:
        await backend.aclose()
    assert completion.text == "echo: add two numbers"
    assert completion.token_ids == [0, 1, 2, 3]  # the server's extra `token_ids` field
    assert completion.logprobs is None
    assert completion.finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 4)
    assert completion.model == MODEL
    assert completion.params.max_tokens == 32
    assert completion.latency_s > 0


async def test_raw_prompts_samples_stop_and_logprobs(scripted_server: ServedProcess) -> None:
    backend = backend_for(scripted_server)
    params = SamplingParams(n=3, temperature=0.8, seed=3, stop=["d"], logprobs=True)
    try:
        raw, chat = await backend.generate(["a b c d", user("x y")], params)
    finally:
        await backend.aclose()
    assert [c.text for c in raw] == ["echo: a b c "] * 3
    assert [c.text for c in chat] == ["echo: x y"] * 3
    for completion in (*raw, *chat):
        assert completion.logprobs is not None
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        assert completion.params == params


async def test_many_concurrent_calls(scripted_server: ServedProcess) -> None:
    backend = backend_for(scripted_server, max_concurrency=2)
    try:
        results = await asyncio.gather(*(backend.generate([user(f"q{i}")], SamplingParams()) for i in range(8)))
    finally:
        await backend.aclose()
    assert [r[0][0].text for r in results] == [f"echo: q{i}" for i in range(8)]


async def test_wrong_token_and_wrong_model_are_not_retried(scripted_server: ServedProcess) -> None:
    backend = backend_for(scripted_server, api_key="wrong", max_retries=5)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"rejected the request \(401\)"):
        await backend.generate([user("x")], SamplingParams())
    await backend.aclose()
    backend = backend_for(scripted_server, model="no-such-model", max_retries=5)
    with pytest.raises(BackendError, match=r"\(404\).*does not exist") as caught:
        await backend.generate(["x"], SamplingParams())
    await backend.aclose()
    assert scripted_server.base_url in str(caught.value)
    assert time.monotonic() - started < 5  # five retries with back-off would take longer


async def test_unreachable_server_is_one_line_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend(base_url=url, model="m", max_retries=2, backoff_s=0.01)
    with pytest.raises(BackendError) as caught:
        await backend.generate([user("x")], SamplingParams())
    await backend.aclose()
    message = str(caught.value)
    assert "\n" not in message
    assert url in message
    assert "after 3 attempts" in message


# --------------------------------------------------------------------------- against a scripted HTTP server

Reply = tuple[int, dict[str, Any], dict[str, str]]


def chat_body(texts: list[str], **choice_extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
                **choice_extra,
            }
            for i, text in enumerate(texts)
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2 * len(texts), "total_tokens": 5 + 2 * len(texts)},
    }


OK: Reply = (200, chat_body(["fine"], token_ids=[7, 8]), {})


class FakeServer:
    """A threaded HTTP server that answers POSTs from `reply(request_json, hit_number)` and records them."""

    def __init__(self, reply: Callable[[dict[str, Any], int], Reply], delay_s: float = 0.0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with lock:
                    fake.requests.append(body)
                    hit = len(fake.requests)
                    fake.in_flight += 1
                    fake.peak = max(fake.peak, fake.in_flight)
                time.sleep(delay_s)
                status, payload, headers = reply(body, hit)
                with lock:
                    fake.in_flight -= 1
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def error(status: int, message: str = "boom") -> Reply:
    return (status, {"error": {"message": message, "type": "x", "param": None, "code": None}}, {})


def client(server: FakeServer, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAIBackend(base_url=server.base_url, model="m", **kwargs)


async def test_request_mapping_and_token_ids(tmp_path: Path) -> None:
    with FakeServer(lambda body, hit: OK) as server:
        backend = client(server)
        params = SamplingParams(n=1, temperature=0.5, top_p=0.9, max_tokens=12, stop=["\n\n"], seed=4, logprobs=True)
        [[completion]] = await backend.generate([user("hi")], params)
        await backend.aclose()
    [sent] = server.requests
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert {k: sent[k] for k in ("model", "n", "temperature", "top_p", "max_tokens", "stop", "seed", "logprobs")} == {
        "model": "m",
        "n": 1,
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 12,
        "stop": ["\n\n"],
        "seed": 4,
        "logprobs": True,
    }
    assert sent["return_token_ids"] is True
    assert (completion.text, completion.token_ids, completion.finish_reason) == ("fine", [7, 8], "length")


async def test_token_ids_from_vllm_token_id_spelling() -> None:
    logprobs: dict[str, Any] = {
        "content": [{"token": f"token_id:{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for i in (3, 9)]
    }
    reply: Reply = (200, chat_body(["ab"], logprobs=logprobs), {})
    with FakeServer(lambda body, hit: reply) as server:
        backend = client(server)
        [[completion]] = await backend.generate([user("hi")], SamplingParams(logprobs=True))
        await backend.aclose()
    assert completion.token_ids == [3, 9]
    assert completion.logprobs == [-0.5, -0.5]


async def test_retries_connection_level_failures_then_succeeds() -> None:
    script = {1: error(503), 2: (429, error(429)[1], {"retry-after": "0"})}
    with FakeServer(lambda body, hit: script.get(hit, OK)) as server:
        backend = client(server, max_retries=3)
        [[completion]] = await backend.generate([user("hi")], SamplingParams())
        await backend.aclose()
    assert len(server.requests) == 3
    assert completion.text == "fine"


async def test_client_errors_are_not_retried() -> None:
    with FakeServer(lambda body, hit: error(422, "bad field\nsecond line")) as server:
        backend = client(server, max_retries=3)
        with pytest.raises(BackendError, match=r"\(422\): bad field second line") as caught:
            await backend.generate([user("hi")], SamplingParams())
        await backend.aclose()
    assert len(server.requests) == 1
    assert "\n" not in str(caught.value)


async def test_persistent_5xx_gives_up_after_the_retries() -> None:
    with FakeServer(lambda body, hit: error(500, "overloaded")) as server:
        backend = client(server, max_retries=2)
        with pytest.raises(BackendError, match="failed after 3 attempts: HTTP 500") as caught:
            await backend.generate(["hi"], SamplingParams())
        await backend.aclose()
    assert len(server.requests) == 3
    assert server.base_url in str(caught.value)


async def test_timeouts_are_retried_then_reported() -> None:
    with FakeServer(lambda body, hit: OK, delay_s=0.5) as server:
        backend = client(server, max_retries=1, timeout_s=0.1)
        with pytest.raises(BackendError, match="failed after 2 attempts: timed out"):
            await backend.generate([user("hi")], SamplingParams())
        await backend.aclose()


async def test_concurrency_is_bounded() -> None:
    with FakeServer(lambda body, hit: OK, delay_s=0.1) as server:
        backend = client(server, max_concurrency=2)
        await asyncio.gather(*(backend.generate([user(str(i))], SamplingParams()) for i in range(6)))
        await backend.aclose()
    assert len(server.requests) == 6
    assert server.peak == 2


async def test_servers_that_ignore_n_are_asked_again() -> None:
    with FakeServer(lambda body, hit: (200, chat_body([f"s{hit}"]), {})) as server:
        backend = client(server)
        [samples] = await backend.generate([user("hi")], SamplingParams(n=3, seed=5))
        await backend.aclose()
    assert [s.text for s in samples] == ["s1", "s2", "s3"]
    assert [r["n"] for r in server.requests] == [3, 2, 1]
    assert [r["seed"] for r in server.requests] == [5, 6, 7]  # new seeds, or the same sample would come back


async def test_strict_servers_get_requests_without_the_token_ids_field() -> None:
    def reply(body: dict[str, Any], hit: int) -> Reply:
        if "return_token_ids" in body:
            return error(400, "Unrecognized request argument supplied: return_token_ids")
        return (200, chat_body(["plain"]), {})

    with FakeServer(reply) as server:
        backend = client(server)
        [[first]] = await backend.generate([user("hi")], SamplingParams())
        [[second]] = await backend.generate([user("hi")], SamplingParams())
        await backend.aclose()
    assert (first.text, second.text) == ("plain", "plain")
    assert ["return_token_ids" in r for r in server.requests] == [True, False, False]
    assert first.token_ids == []
    assert first.usage.completion_tokens == 2  # from the usage total, as no ids came back


def test_from_settings_reads_the_llm_section() -> None:
    settings = load_settings(
        llm={"backend": "openai", "base_url": "http://127.0.0.1:1/v1/", "model": "qwen", "max_concurrency": 3}
    )
    backend = get_backend(settings)
    assert isinstance(backend, OpenAIBackend)
    assert (backend.base_url, backend.model_id, backend.name) == ("http://127.0.0.1:1/v1", "qwen", "openai")


async def test_a_non_openai_answer_is_a_backend_error() -> None:
    with FakeServer(lambda body, hit: (200, {"hello": "world"}, {})) as server:
        backend = client(server)
        with pytest.raises(BackendError, match="did not answer with an OpenAI completion"):
            await backend.generate([user("hi")], SamplingParams())
        await backend.aclose()


@pytest.mark.slow
def test_cli_with_an_unreachable_server_is_one_line_and_non_zero(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    env = {**os.environ, "VERILOOP_LLM__BASE_URL": url, "VERILOOP_LLM__MAX_RETRIES": "1"}
    result = subprocess.run(
        [*CLI, "--home", str(tmp_path), "--backend", "openai", "generate", "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert result.returncode == BackendError.exit_code
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: OpenAI-compatible server at ")
    assert url in line
