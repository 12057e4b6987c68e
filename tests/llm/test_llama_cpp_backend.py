"""The `llama_cpp` backend against a fake `llama-server` (tests/bench/fake_llama_server.py, `--mode backend`) and a
character tokenizer: what it sends (prompt ids, veriloop's sampler chain, seeds, constraints) and how it reads the
answers (EOS, stop strings, limits, logprobs, crashes). The same backend against a real llama-server is in
test_llama_cpp_real.py."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.errors import BackendError
from veriloop.llm import get_backend
from veriloop.llm.llama_cpp_backend import RANDOM_SEED, SAMPLERS, LlamaCppBackend, server_seed
from veriloop.llm.llama_server import SERVER_ENV
from veriloop.records import Constraint, Message, SamplingParams

FAKE = Path(__file__).resolve().parents[1] / "bench" / "fake_llama_server.py"
EOS = 2


class CharTokenizer:
    """Token id = code point; id 2 is EOS (special, skipped when decoding)."""

    chat_template = "<{role}>{content}"
    eos_token_id = EOS
    all_special_ids = (EOS,)

    class _Encoded:
        def __init__(self, ids: list[int]) -> None:
            self.input_ids = ids

    def __call__(self, text: str, add_special_tokens: bool = True) -> CharTokenizer._Encoded:
        return self._Encoded([ord(char) for char in text])

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool, tokenize: bool) -> str:
        assert add_generation_prompt and not tokenize
        return "".join(f"<{message['role']}>{message['content']}" for message in messages) + "<assistant>"

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(token) for token in ids if not (skip_special_tokens and token == EOS))


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    binary = tmp_path / "llama-server"
    record = tmp_path / "requests.jsonl"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" --mode backend --record "{record}" "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def requests(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
async def backend(fake_binary: Path, tmp_path: Path) -> Any:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    made = LlamaCppBackend(
        binary=fake_binary,
        gguf=gguf,
        tokenizer_source=tmp_path,
        gguf_file=None,
        model_id="fake-model",
        slots=2,
        log_dir=tmp_path / "logs",
        tokenizer=CharTokenizer(),
        ready_timeout_s=30,
    )
    yield made
    await made.aclose()


async def test_a_raw_prompt_goes_as_its_ids_with_veriloops_sampler_chain_and_eos_is_left_out(
    backend: LlamaCppBackend, tmp_path: Path
) -> None:
    [[completion]] = await backend.generate(["def f():"], SamplingParams(max_tokens=50, temperature=0.7, top_p=0.9))
    assert completion.text == "def f():"
    assert completion.token_ids == [ord(char) for char in "def f():"]
    assert completion.finish_reason == "stop" and completion.logprobs is None
    assert completion.usage.prompt_tokens == 8 and completion.usage.completion_tokens == 8
    assert completion.model == "fake-model" and completion.latency_s > 0
    [body] = requests(tmp_path)
    assert body["prompt"] == completion.token_ids and body["n_predict"] == 50
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["samplers"] == SAMPLERS
    assert body["top_k"] == 0 and body["min_p"] == 0.0  # llama-server's own top-k 40 and min-p 0.05 are off
    assert body["return_tokens"] is True and body["stream"] is False and body["seed"] == RANDOM_SEED
    assert "grammar" not in body and "json_schema" not in body and "n_probs" not in body
    assert backend.server is not None
    command = backend.server.command
    assert command[command.index("-np") + 1] == "2"


async def test_the_token_limit_is_a_length_finish_and_a_stop_string_cuts_text_and_ids(
    backend: LlamaCppBackend,
) -> None:
    [[long]], [[stopped]] = [
        await backend.generate(["abcdefgh"], SamplingParams(max_tokens=3)),
        await backend.generate(["ab```cd"], SamplingParams(max_tokens=50, stop=["```"])),
    ]
    assert long.text == "abc" and long.token_ids == [97, 98, 99] and long.finish_reason == "length"
    assert stopped.text == "ab" and stopped.token_ids == [97, 98] and stopped.finish_reason == "stop"


async def test_a_chat_goes_through_the_tokenizers_template(backend: LlamaCppBackend) -> None:
    chat = [Message(role="system", content="S"), Message(role="user", content="U")]
    [[completion]] = await backend.generate([chat], SamplingParams(max_tokens=100))
    assert completion.text == "<system>S<user>U<assistant>"


async def test_each_sample_gets_the_embedded_backends_seed_and_answers_keep_request_order(
    backend: LlamaCppBackend, tmp_path: Path
) -> None:
    answers = await backend.generate(["one", "two"], SamplingParams(n=3, seed=7, max_tokens=10, temperature=1.0))
    assert [[sample.text for sample in group] for group in answers] == [["one"] * 3, ["two"] * 3]
    seeds = sorted(body["seed"] for body in requests(tmp_path))
    assert seeds == sorted([server_seed(7, index) for index in range(3)] * 2)
    assert len(set(seeds)) == 3 and RANDOM_SEED not in seeds


async def test_logprobs_come_back_for_each_kept_token(backend: LlamaCppBackend, tmp_path: Path) -> None:
    [[completion]] = await backend.generate(["xyz"], SamplingParams(max_tokens=10, logprobs=True))
    assert completion.token_ids == [120, 121, 122] and completion.logprobs == [-0.25, -0.5, -0.75]
    assert requests(tmp_path)[0]["n_probs"] == 1


async def test_grammars_and_schemas_are_sent_and_other_constraints_fail_before_a_server_starts(
    backend: LlamaCppBackend, tmp_path: Path
) -> None:
    with pytest.raises(BackendError, match="cannot enforce a regex constraint"):
        await backend.generate(["a"], SamplingParams(constraint=Constraint(kind="regex", value="a+")))
    assert backend.server is None and requests(tmp_path) == []
    with pytest.raises(BackendError, match="invalid json_schema"):
        await backend.generate(["a"], SamplingParams(constraint=Constraint(kind="json_schema", value="{nope")))
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    grammar = 'root ::= "yes" | "no"'
    await backend.generate(["a"], SamplingParams(constraint=Constraint(kind="gbnf", value=grammar)))
    await backend.generate(["a"], SamplingParams(constraint=Constraint(kind="json_schema", value=json.dumps(schema))))
    first, second = requests(tmp_path)
    assert first["grammar"] == grammar and "json_schema" not in first
    assert second["json_schema"] == schema and "grammar" not in second


async def test_a_crashed_server_is_one_backend_error_and_the_next_call_starts_a_fresh_one(
    backend: LlamaCppBackend,
) -> None:
    await backend.generate(["warm"], SamplingParams(max_tokens=8))
    first = backend.server
    assert first is not None
    with pytest.raises(BackendError, match="llama-server exited with 3"):
        await backend.generate(["!boom"], SamplingParams(max_tokens=8))
    [[completion]] = await backend.generate(["again"], SamplingParams(max_tokens=8))
    assert completion.text == "again"
    assert backend.server is not None and backend.server.process.pid != first.process.pid


async def test_aclose_stops_the_server_and_later_calls_are_refused(backend: LlamaCppBackend) -> None:
    await backend.generate(["hi"], SamplingParams(max_tokens=4))
    server = backend.server
    assert server is not None and server.exited() is None
    await backend.aclose()
    assert server.process.poll() is not None
    with pytest.raises(BackendError, match="closed"):
        await backend.generate(["hi"], SamplingParams(max_tokens=4))


async def test_more_requests_than_slots_all_come_back(backend: LlamaCppBackend) -> None:
    prompts = [f"p{index}" for index in range(7)]
    answers = await backend.generate(prompts, SamplingParams(max_tokens=8))
    assert [group[0].text for group in answers] == prompts


def test_the_registry_builds_it_from_settings_for_a_gguf_file(
    fake_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv(SERVER_ENV, str(fake_binary))
    settings = load_settings(
        paths={"home": tmp_path / "home"},
        llm={"backend": "llama_cpp", "model": str(gguf), "max_concurrency": 3, "llama_threads": 2},
    )
    made = get_backend(settings)
    assert isinstance(made, LlamaCppBackend)
    assert made.binary == fake_binary and made.gguf == gguf and made.slots == 3 and made.threads == 2
    assert made.model_id == str(gguf)


def test_settings_errors_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    home = {"home": tmp_path / "home"}
    with pytest.raises(BackendError, match=r"python -m veriloop\.llm\.llama_server build"):
        LlamaCppBackend.from_settings(load_settings(paths=home, llm={"backend": "llama_cpp"}))
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "nothing-here"))
    with pytest.raises(BackendError, match="is not an executable file"):
        LlamaCppBackend.from_settings(load_settings(paths=home, llm={"backend": "llama_cpp"}))
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv(SERVER_ENV, str(binary))
    with pytest.raises(BackendError, match="serves GGUF files"):
        LlamaCppBackend.from_settings(load_settings(paths=home, llm={"backend": "llama_cpp", "model": str(tmp_path)}))
