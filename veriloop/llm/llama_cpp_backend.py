"""The `llama_cpp` backend: llama.cpp's own `llama-server` on the model's GGUF file, started by veriloop.

Where it pays (docs/backend.md, "The llama_cpp backend"): llama.cpp multiplies the 4-bit GGUF blocks themselves, so
at batch 1 on a CPU it can beat the embedded backend (Qwen2.5-Coder-0.5B on a shared 2-core EPYC: veriloop / llama.cpp
0.70 and 0.85 in two runs). The server is started once, on the first `generate`, with `-np` = `llm.max_concurrency`
slots (continuous batching), and stopped by `aclose`; one that died is started again by the next call.

Prompts are tokenized here, with the tokenizer the embedded backend uses (the converted model folder's, else the
GGUF's own), chat templates included, and sent to the native `/completion` endpoint as token ids, so both backends
feed the model the same prompt tokens. Answers come back as token ids and are cut as the embedded batcher cuts them
(EOS and a stop string's tokens left out; text decoded by the same tokenizer). Constraints: GBNF grammars and JSON
Schemas (llama-server converts those to GBNF itself); regex and Lark raise, as llama-server has no way to take them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from veriloop.config import Settings
from veriloop.errors import BackendError
from veriloop.llm.embedded import bundled_model_dir, is_converted, sample_seed
from veriloop.llm.llama_server import (
    BUILD_COMMAND,
    SERVER_ENV,
    LlamaServer,
    bundled_gguf,
    find_llama_server,
    start_llama_server,
)
from veriloop.llm.models import BUNDLED
from veriloop.records import Completion, Constraint, FinishReason, Prompt, SamplingParams, Usage

SAMPLERS = ["temperature", "top_p"]
"""The embedded backend's chain (temperature, then nucleus over the tempered distribution); llama-server's default
chain adds top-k 40, min-p 0.05 and others, and applies top-p before temperature."""

RANDOM_SEED = 0xFFFFFFFF
"""llama.cpp's LLAMA_DEFAULT_SEED: the server draws a seed of its own."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:300]


def missing_binary_error() -> BackendError:
    return BackendError(
        f"the llama_cpp backend needs llama.cpp's llama-server: set llm.llama_server or {SERVER_ENV} to one, put"
        f" llama-server on PATH, or build and cache it once with `{BUILD_COMMAND}` (6 to 20 minutes on two cores)"
    )


def model_files(settings: Settings) -> tuple[Path, Path, str | None]:
    """(GGUF to serve, folder or GGUF file to load the tokenizer from, the GGUF file name when it is the GGUF).

    The tokenizer is the converted folder's where the embedded backend converted the model (the one it encodes with),
    else the same tokenizer read from the GGUF, without converting the weights.
    """
    spec = settings.llm.model
    if spec in BUNDLED:
        gguf = bundled_gguf(settings.paths.cache_dir, spec)
        folder = bundled_model_dir(settings, spec)
        if is_converted(folder):
            return gguf, folder, None
        return gguf, gguf.parent, gguf.name
    path = Path(spec).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path, path.parent, path.name
    raise BackendError(
        f"the llama_cpp backend serves GGUF files: llm.model must be a bundled model ({', '.join(BUNDLED)}) or a"
        f" .gguf file, not {spec!r}"
    )


def load_tokenizer(source: Path, gguf_file: str | None) -> Any:
    from transformers import AutoTokenizer

    try:
        if gguf_file is None:
            return AutoTokenizer.from_pretrained(source)
        return AutoTokenizer.from_pretrained(source, gguf_file=gguf_file)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise BackendError(f"cannot load the tokenizer of {source / (gguf_file or '')}: {_one_line(exc)}") from None


def encode(tokenizer: Any, prompt: Prompt, model: str) -> list[int]:
    """Prompt token ids exactly as `EmbeddedBackend.encode` makes them (raw text as is, chats through the template)."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=True).input_ids)
    if not getattr(tokenizer, "chat_template", None):
        raise BackendError(f"model {model!r} has no chat template; send a raw text prompt")
    messages = [{"role": message.role, "content": message.content} for message in prompt]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def constraint_fields(constraint: Constraint | None) -> dict[str, Any]:
    """The /completion fields that enforce a constraint; raises for the kinds llama-server cannot take."""
    if constraint is None:
        return {}
    if constraint.kind == "gbnf":
        return {"grammar": constraint.value}
    if constraint.kind == "json_schema":
        try:
            return {"json_schema": json.loads(constraint.value)}
        except ValueError as exc:
            raise BackendError(f"invalid json_schema constraint: {_one_line(exc)}") from None
    raise BackendError(
        f"the llama_cpp backend cannot enforce a {constraint.kind} constraint: llama-server takes GBNF grammars and"
        " JSON Schemas only (use a gbnf or json_schema constraint, or the embedded backend)"
    )


def server_seed(seed: int | None, index: int) -> int:
    """Sample `index`'s seed as the embedded backend derives it, folded into llama.cpp's 32 bits (never its
    'draw one' value); a request without a seed lets the server draw."""
    derived = sample_seed(seed, index)
    if derived is None:
        return RANDOM_SEED
    folded = derived % (1 << 32)
    return folded - 1 if folded == RANDOM_SEED else folded


def request_body(ids: list[int], params: SamplingParams, seed: int) -> dict[str, Any]:
    """One /completion request: the prompt's ids, veriloop's sampling, the generated ids (and logprobs) back."""
    body: dict[str, Any] = {
        "prompt": ids,
        "n_predict": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": 0,
        "min_p": 0.0,
        "samplers": SAMPLERS,
        "seed": seed,
        "stop": list(params.stop),
        "cache_prompt": True,
        "return_tokens": True,
        "stream": False,
        **constraint_fields(params.constraint),
    }
    if params.logprobs:
        body["n_probs"] = 1  # the sampled token's log-softmax before sampling, plus the top one
    return body


def cut_answer(
    tokenizer: Any, tokens: list[int], stop_type: str, stop: Sequence[str]
) -> tuple[list[int], str, FinishReason]:
    """(token ids, text, finish reason) as the embedded batcher reports them: the end-of-generation token left out; at
    the earliest stop string the text ends and the ids are the longest prefix whose text is inside it."""

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=True))

    reason: FinishReason = "length" if stop_type == "limit" else "stop"
    if stop_type == "eos":
        ends = set(getattr(tokenizer, "all_special_ids", None) or []) | {getattr(tokenizer, "eos_token_id", None)}
        while tokens and tokens[-1] in ends:  # the end-of-generation token, where the server returns it
            tokens = tokens[:-1]
    text = decode(tokens)
    cuts = [index for word in stop if word and (index := text.find(word)) >= 0]
    if not cuts:
        return tokens, text, reason
    kept = text[: min(cuts)]
    count = len(tokens)
    while count > 0:
        decoded = decode(tokens[:count])
        if len(decoded) <= len(kept) and kept.startswith(decoded):
            break
        count -= 1
    return tokens[:count], kept, "stop"


def answer_logprobs(answer: dict[str, Any], ids: list[int]) -> list[float]:
    """The log-probability of each kept token from `completion_probabilities` (matched by position and id)."""
    entries = answer.get("completion_probabilities") or []
    out: list[float] = []
    for token, entry in zip(ids, entries, strict=False):
        if int(entry.get("id", -1)) != token:
            break
        out.append(float(entry.get("logprob", 0.0)))
    if len(out) != len(ids):
        raise BackendError(f"llama-server returned logprobs for {len(out)} of {len(ids)} tokens")
    return out


class LlamaCppBackend:
    """Completions from a `llama-server` this backend starts on first use and stops on `aclose`."""

    name = "llama_cpp"

    def __init__(
        self,
        *,
        binary: Path,
        gguf: Path,
        tokenizer_source: Path,
        gguf_file: str | None,
        model_id: str,
        slots: int = 8,
        context: int = 4096,
        threads: int = 1,
        timeout_s: float = 120.0,
        log_dir: Path,
        tokenizer: Any = None,
        ready_timeout_s: float = 300.0,
    ) -> None:
        self.binary, self.gguf, self._model_id = binary, gguf, model_id
        self._tokenizer_from = (tokenizer_source, gguf_file)
        self.tokenizer: Any = tokenizer
        self.slots, self.context, self.threads = slots, context, threads
        self._timeout_s, self._log_dir, self._ready_timeout_s = timeout_s, log_dir, ready_timeout_s
        self.server: LlamaServer | None = None
        self._client: httpx.AsyncClient | None = None
        self._start_lock = asyncio.Lock()
        self._gate = asyncio.Semaphore(slots)
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> LlamaCppBackend:
        llm = settings.llm
        binary = find_llama_server(settings.paths.cache_dir, llm.llama_server)
        if binary is None:
            raise missing_binary_error()
        gguf, source, gguf_file = model_files(settings)
        return cls(
            binary=binary,
            gguf=gguf,
            tokenizer_source=source,
            gguf_file=gguf_file,
            model_id=llm.model,
            slots=llm.max_concurrency,
            context=llm.llama_context,
            threads=llm.llama_threads or len(os.sched_getaffinity(0)),
            timeout_s=llm.timeout_s,
            log_dir=settings.paths.cache_dir / "llama.cpp" / "logs",
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        if self._closed:
            raise BackendError("the llama_cpp backend is closed")
        constraint_fields(params.constraint)  # an unsupported constraint fails before a server is started
        client = await self._ensure_server()
        prompts = [encode(self.tokenizer, prompt, self._model_id) for prompt in requests]
        samples = [self._sample(client, ids, params, index) for ids in prompts for index in range(params.n)]
        flat = list(await asyncio.gather(*samples))
        return [flat[start : start + params.n] for start in range(0, len(flat), params.n)]

    async def aclose(self) -> None:
        self._closed = True
        await self._stop()

    async def _stop(self) -> None:
        client, server, self._client, self.server = self._client, self.server, None, None
        if client is not None:
            await client.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)

    async def _ensure_server(self) -> httpx.AsyncClient:
        """The client of a running server: started (with the tokenizer loaded) on first use, or again after a crash."""
        async with self._start_lock:
            if self.server is not None and self.server.exited() is not None:
                await self._stop()  # it died: the next request gets a fresh one
            if self._client is not None:
                return self._client
            if self.tokenizer is None:
                self.tokenizer = await asyncio.to_thread(load_tokenizer, *self._tokenizer_from)
            self.server = await asyncio.to_thread(self._start)
            self._finalizer = weakref.finalize(self, self.server.stop)  # no orphan server if aclose is never called
            limits = httpx.Limits(max_connections=self.slots + 2, max_keepalive_connections=self.slots + 2)
            self._client = httpx.AsyncClient(base_url=self.server.url, timeout=self._timeout_s, limits=limits)
            return self._client

    def _start(self) -> LlamaServer:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log", dir=self._log_dir)
        os.close(handle)
        return start_llama_server(
            self.binary,
            self.gguf,
            slots=self.slots,
            context=self.context * self.slots,
            threads=self.threads,
            log=Path(name),
            ready_timeout_s=self._ready_timeout_s,
        )

    async def _sample(
        self, client: httpx.AsyncClient, ids: list[int], params: SamplingParams, index: int
    ) -> Completion:
        body = request_body(ids, params, server_seed(params.seed, index))
        async with self._gate:
            started = time.perf_counter()
            answer = await self._post(client, body)
            latency = time.perf_counter() - started
        tokens = [int(token) for token in answer.get("tokens") or []]
        kept, text, reason = cut_answer(self.tokenizer, tokens, str(answer.get("stop_type", "")), params.stop)
        return Completion(
            text=text,
            token_ids=kept,
            logprobs=answer_logprobs(answer, kept) if params.logprobs else None,
            finish_reason=reason,
            usage=Usage(prompt_tokens=len(ids), completion_tokens=len(kept)),
            model=self._model_id,
            params=params,
            latency_s=latency,
        )

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
        """POST /completion; a dead server, a transport failure or an error status is one BackendError."""
        try:
            response = await client.post("/completion", json=body)
        except httpx.HTTPError as exc:
            server = self.server
            ended = server.exited() if server is not None else None
            with contextlib.suppress(Exception):
                if ended is None and server is not None:  # a crash can take a moment to show as an exit
                    await asyncio.to_thread(server.process.wait, 1.0)
                    ended = server.exited()
            message = ended or f"llama-server at {client.base_url}: {type(exc).__name__}: {_one_line(exc)}"
            raise BackendError(message) from None
        if response.status_code != 200:
            raise BackendError(
                f"llama-server rejected the request ({response.status_code}): {_error_message(response)}"
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("tokens"), list):
            raise BackendError(f"llama-server did not answer with a completion: {_one_line(response.text)}")
        return answer


def _error_message(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        error = response.json().get("error")
        if isinstance(error, dict):
            return _one_line(error.get("message", error))
        if error:
            return _one_line(error)
    return _one_line(response.text)
