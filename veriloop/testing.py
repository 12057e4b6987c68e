"""Test doubles shared by every test: a scripted backend and helpers. Never used in production paths.

The real parts (embedded model, sandbox, verifiers, databases) each have their own tests too;
these doubles only make the logic around them fast and deterministic to test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def user(content: str) -> list[Message]:
    """A one-message conversation."""
    return [Message(role="user", content=content)]
