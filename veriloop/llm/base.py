"""The inference seam: every agent asks a Backend for completions and never sees how they are made."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from veriloop.config import Settings
from veriloop.records import Completion, Prompt, SamplingParams
from veriloop.registry import Registry


@runtime_checkable
class Backend(Protocol):
    """Something that turns prompts into completions.

    `generate` returns one list per request with `params.n` completions each. Implementations
    may batch concurrent calls together; callers simply `await` many calls at once.
    """

    name: str

    @property
    def model_id(self) -> str: ...

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class StreamDelta:
    """A piece of one sample's text as it is decoded; the sample's last event carries its Completion."""

    index: int
    text: str
    completion: Completion | None = None


@runtime_checkable
class StreamingBackend(Protocol):
    """A Backend that can also hand out text while it decodes (the embedded one does)."""

    def stream(self, request: Prompt, params: SamplingParams) -> AsyncIterator[StreamDelta]:
        """Deltas of the request's `params.n` samples, interleaved as they come; each sample ends with
        one delta whose `completion` is set (its text pieces add up to `completion.text`)."""
        ...


class BackendFactory(Protocol):
    """Backend classes expose this constructor so the registry can build them from settings."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Backend: ...


BACKENDS: Registry[BackendFactory] = Registry(
    "backend",
    {
        "embedded": "veriloop.llm.embedded:EmbeddedBackend",
        "openai": "veriloop.llm.openai_backend:OpenAIBackend",
        "vllm": "veriloop.llm.vllm_backend:VLLMBackend",
        "llama_cpp": "veriloop.llm.llama_cpp_backend:LlamaCppBackend",
        "scripted": "veriloop.testing:ScriptedBackend",
    },
)
"""Backends by name. `scripted` is the tests' double (veriloop.testing): resolvable by name, never listed."""

TEST_DOUBLES = frozenset({"scripted"})
"""Backend names that are test doubles: `veriloop models` leaves them out unless one is selected."""


def get_backend(settings: Settings) -> Backend:
    """Build the backend named in `settings.llm.backend`."""
    return BACKENDS.load(settings.llm.backend).from_settings(settings)
