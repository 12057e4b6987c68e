"""Test doubles shared by every test: a scripted backend and helpers.

No production layer imports this module (tests/test_layers.py keeps it so): besides the tests, only the
benchmark harness (`veriloop bench`, for its scripted smoke runs and demo data) uses it. The `scripted`
backend name resolves here lazily so that CLI and worker tests can run without a model; `veriloop models`
does not list it. The real parts (embedded model, sandbox, verifiers, databases) each have their own tests
too; these doubles only make the logic around them fast and deterministic to test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from veriloop.config import Settings
from veriloop.records import Completion, Message, Prompt, SamplingParams, Usage

Reply = str | Callable[[Prompt], str]


def prompt_text(prompt: Prompt) -> str:
    """The last user message of a conversation, or the raw prompt."""
    if isinstance(prompt, str):
        return prompt
    users = [message.content for message in prompt if message.role == "user"]
    return users[-1] if users else ""


class ScriptedBackend:
    """Replies from a queue (or a function of the prompt); records every request it saw.

    With an empty queue and no function it echoes the prompt, so it is usable from settings.
    """

    name = "scripted"

    def __init__(self, replies: Sequence[Reply] = (), model: str = "scripted") -> None:
        self._replies: list[Reply] = list(replies)
        self._model = model
        self.requests: list[tuple[Prompt, SamplingParams]] = []

    @classmethod
    def from_settings(cls, settings: Settings) -> ScriptedBackend:
        return cls(model=settings.llm.model)

    @property
    def model_id(self) -> str:
        return self._model

    def _next(self, prompt: Prompt) -> str:
        if not self._replies:
            return f"echo: {prompt_text(prompt)}"
        reply = self._replies[0] if len(self._replies) == 1 else self._replies.pop(0)
        return reply(prompt) if callable(reply) else reply

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        results: list[list[Completion]] = []
        for prompt in requests:
            self.requests.append((prompt, params))
            samples = []
            for _ in range(params.n):
                text = self._next(prompt)
                for stop in params.stop:
                    if stop in text:
                        text = text[: text.index(stop)]
                tokens = list(range(len(text.split())))
                samples.append(
                    Completion(
                        text=text,
                        token_ids=tokens,
                        logprobs=[0.0] * len(tokens) if params.logprobs else None,
                        finish_reason="stop",
                        usage=Usage(prompt_tokens=len(prompt_text(prompt).split()), completion_tokens=len(tokens)),
                        model=self._model,
                        params=params,
                    )
                )
            results.append(samples)
        return results

    async def aclose(self) -> None:
        return None


Scorer = Callable[[str, Sequence[str]], Mapping[str, float]]
"""(raw prompt, tokens) -> log-probability of each token right after the prompt."""


class ScriptedScoringBackend(ScriptedBackend):
    """A ScriptedBackend that also renders chats as plain text and scores next tokens with a function.

    Stands in for the embedded backend's `render_chat` / `next_token_logprobs` (used by ReVISE); it records
    every scored prompt. Without a scorer, every token gets log(1/len(tokens)) and the first one wins ties.
    """

    def __init__(self, replies: Sequence[Reply] = (), scorer: Scorer | None = None, model: str = "scripted") -> None:
        super().__init__(replies, model=model)
        self._scorer = scorer
        self.scored: list[str] = []

    def render_chat(self, messages: Sequence[Message]) -> str:
        turns = "".join(f"<|{message.role}|>\n{message.content}\n" for message in messages)
        return turns + "<|assistant|>\n"

    async def next_token_logprobs(self, prompts: Sequence[str], tokens: Sequence[str]) -> list[dict[str, float]]:
        import math

        results = []
        for prompt in prompts:
            self.scored.append(prompt)
            if self._scorer is None:
                results.append({token: -math.log(len(tokens)) for token in tokens})
            else:
                scores = self._scorer(prompt, tokens)
                results.append({token: float(scores[token]) for token in tokens})
        return results


def user(content: str) -> list[Message]:
    """A one-message conversation."""
    return [Message(role="user", content=content)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


CLI = [sys.executable, "-m", "veriloop.cli"]
"""The `veriloop` command line of this interpreter (works without the console script on PATH)."""


@dataclass
class ServedProcess:
    """A `veriloop serve` child process and where to reach it."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Send `sig` and wait; returns the exit code (the process is killed if it does not stop)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@contextmanager
def served(
    *root_args: str,
    home: Path,
    serve_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> Iterator[ServedProcess]:
    """Run `veriloop <root_args> serve <serve_args>` on a free port, home `home`; yields once /health answers."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = home / f"serve-{port}.log"
    command = [*CLI, "--home", str(home), *root_args, "serve", *serve_args]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    child_env = {key: value for key, value in os.environ.items() if key != "VERILOOP_CONFIG"}
    child_env.update(env or {})
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=home, env=child_env, stdout=sink, stderr=subprocess.STDOUT)
    server = ServedProcess(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"veriloop serve exited with {process.returncode}: {server.output()[-2000:]}")
            try:
                if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"veriloop serve did not answer /health in {timeout_s} s: {server.output()[-2000:]}")
            time.sleep(0.1)
        yield server
    finally:
        server.stop()


def tiny_causal_lm(seed: int = 0, *, layers: int = 2, hidden: int = 64, context: int = 1024) -> tuple[Any, Any]:
    """A randomly initialised llama and a byte-level tokenizer with a ChatML template, built in memory.

    For fast tests of code that drives a causal LM (batcher, trainers, kernels). The vocabulary is
    the 256 byte symbols plus `<|endoftext|>` (0, pad), `<|im_start|>` (1) and `<|im_end|>` (2, EOS); a
    large init range makes the logits decisive, so greedy decoding has no near-ties.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {token: index for index, token in enumerate(specials)}
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer: Any = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.5,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model: Any = LlamaForCausalLM(config)
    model.eval()
    model.generation_config.pad_token_id = 0
    return model, tokenizer


def tiny_model_folder(folder: Path, seed: int = 0, *, context: int = 1024) -> Path:
    """`tiny_causal_lm` saved as a Hugging Face folder, so `--model FOLDER` or `settings.llm.model` can name it."""
    model, tokenizer = tiny_causal_lm(seed, context=context)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class ModelConversion:
    """The test session's one conversion of the embedded model (see tests/conftest.py)."""

    home: Path
    folder: Path
    seconds: float
