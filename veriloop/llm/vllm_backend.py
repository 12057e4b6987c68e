"""The `vllm` backend: an in-process vLLM engine on a CUDA GPU (the `gpu` extra).

vLLM is imported only in `from_settings`, so the rest of veriloop never needs it. Each prompt is
one engine request; concurrent `generate` calls share the engine's continuous batching. Chat
prompts are rendered with the model's chat template; stop strings are left out of the text, as
the Completion record promises.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from veriloop.config import Settings
from veriloop.errors import BackendError
from veriloop.records import Completion, FinishReason, Message, Prompt, SamplingParams, Usage


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:300]


def sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Our SamplingParams as keyword arguments of `vllm.SamplingParams`."""
    kwargs: dict[str, Any] = {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
        "stop": list(params.stop) or None,
        "seed": params.seed,
    }
    if params.logprobs:
        kwargs["logprobs"] = 0  # the sampled token's own logprob, no alternatives
    if params.constraint is not None:
        from vllm.sampling_params import StructuredOutputsParams

        from veriloop.llm.constraints import structured_outputs

        kwargs["structured_outputs"] = StructuredOutputsParams(**structured_outputs(params.constraint))
    return kwargs


def _finish_reason(reason: str | None) -> FinishReason:
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop"
    return "error"  # aborted, or the engine did not say


def completion_from_output(
    output: Any, prompt_tokens: int, params: SamplingParams, model: str, latency_s: float
) -> Completion:
    """One vLLM CompletionOutput (text, token_ids, logprobs, finish_reason) as our record."""
    token_ids = [int(token) for token in output.token_ids]
    logprobs: list[float] | None = None
    if params.logprobs and output.logprobs is not None:
        # One mapping per position from token id to its Logprob; the sampled token is always in it.
        logprobs = [float(position[token].logprob) for token, position in zip(token_ids, output.logprobs, strict=False)]
    return Completion(
        text=output.text,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=_finish_reason(output.finish_reason),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=len(token_ids)),
        model=model,
        params=params,
        latency_s=latency_s,
    )


class VLLMBackend:
    """Completions from a vLLM AsyncLLMEngine running in this process."""

    name = "vllm"

    def __init__(self, engine: Any, model: str, sampling_params_class: Any, final_only: Any = None) -> None:
        self._engine = engine
        self._model = model
        self._sampling_params_class = sampling_params_class
        # RequestOutputKind.FINAL_ONLY where this vLLM has it: one output per request, all n samples in it.
        self._final_only = final_only
        self._tokenizer: Any = None

    @classmethod
    def from_settings(cls, settings: Settings) -> VLLMBackend:
        try:
            import vllm
        except ImportError as exc:
            raise BackendError(
                f"the vllm backend needs the gpu extra (pip install 'veriloop[gpu]'): {_one_line(exc)}"
            ) from None
        import torch

        if not torch.cuda.is_available():
            raise BackendError("the vllm backend needs a CUDA GPU, and torch sees none")
        llm = settings.llm
        # `llm.dtype` defaults to float32 for the CPU; on the GPU let vLLM pick unless asked otherwise.
        dtype = "auto" if llm.dtype == "float32" else llm.dtype
        try:
            engine_args = vllm.AsyncEngineArgs(model=llm.model, dtype=dtype)
            engine = vllm.AsyncLLMEngine.from_engine_args(engine_args)
        except Exception as exc:
            raise BackendError(f"vLLM could not load model {llm.model!r}: {_one_line(exc)}") from None
        try:
            from vllm.sampling_params import RequestOutputKind

            final_only: Any = RequestOutputKind.FINAL_ONLY
        except ImportError:  # releases before 0.6 stream every step; the last output is the same
            final_only = None
        return cls(engine, llm.model, vllm.SamplingParams, final_only)

    @property
    def model_id(self) -> str:
        return self._model

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        kwargs = sampling_kwargs(params)
        if self._final_only is not None:
            kwargs["output_kind"] = self._final_only
        sampling = self._sampling_params_class(**kwargs)
        await self._get_tokenizer()
        return list(await asyncio.gather(*(self._samples(prompt, sampling, params) for prompt in requests)))

    async def aclose(self) -> None:
        shutdown = getattr(self._engine, "shutdown", None) or getattr(self._engine, "shutdown_background_loop", None)
        if callable(shutdown):
            shutdown()

    def token_texts(self, token_ids: Sequence[int]) -> list[str]:
        """Each token's text, for the logprobs of the OpenAI-compatible endpoints."""
        if self._tokenizer is None:
            return [f"token_id:{token}" for token in token_ids]
        return [str(self._tokenizer.decode([token])) for token in token_ids]

    async def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            tokenizer = self._engine.get_tokenizer()  # a coroutine in older vLLM releases
            self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        return self._tokenizer

    async def _render(self, messages: Sequence[Message]) -> str:
        tokenizer = await self._get_tokenizer()
        conversation = [{"role": message.role, "content": message.content} for message in messages]
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        return str(text)

    async def _samples(self, prompt: Prompt, sampling: Any, params: SamplingParams) -> list[Completion]:
        text = prompt if isinstance(prompt, str) else await self._render(prompt)
        started = time.perf_counter()
        final: Any = None
        try:
            async for output in self._engine.generate(text, sampling, uuid4().hex):
                final = output
        except Exception as exc:
            raise BackendError(f"vLLM generation failed: {type(exc).__name__}: {_one_line(exc)}") from None
        if final is None:
            raise BackendError("vLLM returned no output")
        latency = time.perf_counter() - started
        prompt_tokens = len(final.prompt_token_ids or [])
        outputs = sorted(final.outputs, key=lambda output: output.index)
        return [completion_from_output(output, prompt_tokens, params, self._model, latency) for output in outputs]
