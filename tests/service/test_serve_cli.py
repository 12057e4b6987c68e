"""`veriloop serve` as a real process: it announces its URL, answers, and stops cleanly on signals."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from veriloop.testing import CLI, free_port, served


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "as_json"), [(signal.SIGTERM, True), (signal.SIGINT, False)])
def test_serve_announces_answers_and_stops_cleanly(tmp_path: Path, sig: signal.Signals, as_json: bool) -> None:
    flags = ["--json"] if as_json else []
    with served("--backend", "scripted", home=tmp_path, serve_args=flags) as server:
        reply = httpx.post(
            f"{server.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "ping"}]}
        )
        assert reply.json()["choices"][0]["message"]["content"] == "echo: ping"
        assert server.stop(sig) == 0
    output = server.output()
    first = output.splitlines()[0]
    if as_json:
        assert json.loads(first) == {
            "url": server.url,
            "dashboard_url": f"{server.url}/",
            "api_url": f"{server.url}/api",
            "openai_base_url": server.base_url,
            "backend": "scripted",
            "model": "smollm2-135m-instruct",
            "workers": "1",
        }
    else:
        assert first.startswith(
            f"veriloop serving on {server.url}: dashboard {server.url}/, REST API {server.url}/api,"
        )
        assert f"OpenAI-compatible API {server.base_url} (backend scripted" in first
    assert f"stopped on {sig.name}" in output
    assert "Traceback" not in output


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "--home", str(home), *args], capture_output=True, text=True, timeout=60, cwd=home, check=False
    )


@pytest.mark.slow
def test_busy_port_is_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("--backend", "scripted", "serve", "--port", str(port), home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_unknown_backend_is_one_line_error(tmp_path: Path) -> None:
    result = run_cli("--backend", "nope", "serve", "--port", str(free_port()), home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: unknown backend 'nope'; choose one of: embedded, llama_cpp, openai, scripted, vllm"
    ]


@pytest.mark.slow
def test_the_openai_client_understands_the_server(tmp_path: Path) -> None:
    """OpenAI's own client parses every answer, streamed ones included."""
    import openai

    with served("--backend", "scripted", home=tmp_path) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        assert [model.id for model in client.models.list()] == ["smollm2-135m-instruct"]
        chat = client.chat.completions.create(
            model="smollm2-135m-instruct", messages=[{"role": "user", "content": "one two"}], n=2, logprobs=True
        )
        assert [choice.message.content for choice in chat.choices] == ["echo: one two"] * 2
        assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content is not None
        assert len(chat.choices[0].logprobs.content) == 3
        assert chat.usage is not None and chat.usage.total_tokens == 2 + 6
        text = client.completions.create(model="smollm2-135m-instruct", prompt="a b c", stop=[" c"], max_tokens=5)
        assert text.choices[0].text == "echo: a b"
        stream = client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "streamed"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, usage = [], None
        for chunk in stream:
            pieces += [choice.delta.content or "" for choice in chunk.choices]
            usage = chunk.usage or usage
        assert "".join(pieces) == "echo: streamed"
        assert usage is not None and usage.completion_tokens == 2
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
        client.close()


@pytest.mark.slow
def test_serve_can_front_another_openai_server(tmp_path: Path) -> None:
    """`serve --backend openai` proxies to an upstream server; when that goes away, clients get a 502 naming it."""
    with served("--backend", "scripted", home=tmp_path / "upstream") as upstream:
        env = {"VERILOOP_LLM__BASE_URL": upstream.base_url, "VERILOOP_LLM__MAX_RETRIES": "1"}
        with served("--backend", "openai", home=tmp_path / "front", env=env) as front:
            body = {"messages": [{"role": "user", "content": "via proxy"}]}
            reply = httpx.post(f"{front.base_url}/chat/completions", json=body, timeout=30).json()
            assert reply["choices"][0]["message"]["content"] == "echo: via proxy"
            assert reply["choices"][0]["token_ids"] == [0, 1, 2]
            assert upstream.stop() == 0
            failed = httpx.post(f"{front.base_url}/chat/completions", json=body, timeout=30)
            assert failed.status_code == 502
            message = failed.json()["error"]["message"]
            assert upstream.base_url in message
            assert "failed after 2 attempts" in message
