"""Request and response shapes of the OpenAI-compatible endpoints (the subset veriloop serves).

The request models are the validator and their OpenAPI schema says exactly what they accept: JSON types as
written (strict: no `"1"` for 1, no `0` for false), fields we do not know ignored (clients send vendor extras;
the schema leaves `additionalProperties` open), and the OpenAI features this server cannot honour (tools, echo,
suffix, token-id prompts) refused with a message instead of silently answering something else; the schema admits
only their empty values. At most one structural constraint per request (`response_format`, vLLM's
`structured_outputs` or its older `guided_*` fields). A regex or grammar is a string in a language of its own:
the schema names it with a `format` (`constraint-regex`, `constraint-grammar`, `constraint-json-schema`) and the
server compiles it, refusing what does not compile. Every choice carries `token_ids`, the sampled token ids, beyond
OpenAI's schema.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import combinations
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Tag,
    WithJsonSchema,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from veriloop.records import FinishReason

MAX_TOKENS = 32768
MAX_STOPS = 16
REGEX_FORMAT = "constraint-regex"
"""A regular expression every reply must match fully (llguidance's syntax: no look-around, no back-references)."""
GRAMMAR_FORMAT = "constraint-grammar"
"""A context-free grammar: GBNF when it holds `::=`, else Lark."""
SCHEMA_TEXT_FORMAT = "constraint-json-schema"
"""The JSON text of a JSON Schema."""


class Lenient(BaseModel):
    """A request object: strict JSON types; unknown fields are ignored (the schema leaves them open)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Format:
    """`Annotated` metadata: the JSON schema `format` of a string the server checks by compiling it."""

    name: str

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["format"] = self.name
        return schema


def _not_supported(value: Any) -> Any:
    """An after-validator refusing any value but an empty one, with a message that says why."""
    if value:
        raise ValueError("not supported by this server")
    return value


def _text_prompt(value: Any) -> Any:
    if isinstance(value, list) and value and all(isinstance(item, int | list) for item in value):
        raise ValueError("token-id prompts are not supported by this server; send text")
    return value


RegexText = Annotated[str, Field(min_length=1), Format(REGEX_FORMAT)]
GrammarText = Annotated[str, Field(min_length=1), Format(GRAMMAR_FORMAT)]
SchemaText = Annotated[str, Field(min_length=1), Format(SCHEMA_TEXT_FORMAT)]
StopText = Annotated[str, Field(min_length=1)]
Tools = Annotated[
    list[Any] | None,
    AfterValidator(_not_supported),
    WithJsonSchema({"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}),
]
Echo = Annotated[bool, AfterValidator(_not_supported), WithJsonSchema({"type": "boolean", "const": False})]
Suffix = Annotated[
    str | None,
    AfterValidator(_not_supported),
    WithJsonSchema({"anyOf": [{"type": "string", "maxLength": 0}, {"type": "null"}]}),
]
Stop = Annotated[
    Annotated[StopText, Tag("one")] | Annotated[Annotated[list[StopText], Field(max_length=MAX_STOPS)], Tag("list")],
    Discriminator(lambda value: "one" if isinstance(value, str) else "list"),
]
"""A stop string, or at most 16 of them; none empty."""
TextPrompt = Annotated[str | Annotated[list[str], Field(min_length=1)], BeforeValidator(_text_prompt)]


# --------------------------------------------------------------------------- errors


class ErrorBody(Strict):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(Strict):
    error: ErrorBody


# --------------------------------------------------------------------------- requests


class StreamOptions(Lenient):
    include_usage: bool = False


class TextFormat(Lenient):
    type: Literal["text"]


class JsonObjectFormat(Lenient):
    type: Literal["json_object"]


class JsonSchemaSpec(Lenient):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] = Field(
        alias="schema", description="The JSON Schema every reply must match (one llguidance compiles)."
    )
    strict: bool | None = None


class JsonSchemaFormat(Lenient):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


class StructuredOutputs(BaseModel):
    """vLLM's structured outputs: one of a regex, a JSON Schema (object or JSON text) or a grammar."""

    model_config = ConfigDict(extra="forbid", strict=True)

    regex: RegexText | None = None
    json_: dict[str, Any] | SchemaText | None = Field(
        None, alias="json", description="A JSON Schema (one llguidance compiles), or its JSON text."
    )
    grammar: GrammarText | None = None


def _given(field: str) -> dict[str, Any]:
    """JSON schema: the object has `field`, not null."""
    return {"required": [field], "properties": {field: {"not": {"type": "null"}}}}


CONSTRAINTS: dict[str, dict[str, Any]] = {
    "response_format": {
        "required": ["response_format"],
        "properties": {
            "response_format": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["json_object", "json_schema"]}},
            }
        },
    },
    **{
        f"structured_outputs.{key}": {
            "required": ["structured_outputs"],
            "properties": {"structured_outputs": {"type": "object", **_given(key)}},
        }
        for key in ("regex", "json", "grammar")
    },
    **{field: _given(field) for field in ("guided_regex", "guided_json", "guided_grammar")},
}
"""Each way to ask for a constraint, as a JSON schema that holds when the request uses it."""
ONE_CONSTRAINT: JsonDict = {"not": {"anyOf": [{"allOf": [a, b]} for a, b in combinations(CONSTRAINTS.values(), 2)]}}
"""At most one of them (the schema of the model validator `_one_constraint`)."""


class SamplingFields(Lenient):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(json_schema_extra=ONE_CONSTRAINT)

    model: str | None = Field(None, description="Must name the served model when given.")
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="OpenAI's default is 1.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: Stop | None = None
    seed: int | None = Field(None, description="Any integer: the embedded backend reduces it modulo 2**63.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    return_token_ids: bool | None = Field(None, description="vLLM's switch; token ids are always returned here.")
    response_format: ResponseFormat | None = Field(None, description="OpenAI's: text, json_object or json_schema.")
    structured_outputs: StructuredOutputs | None = Field(None, description="vLLM's: {regex|json|grammar: ...}.")
    guided_regex: RegexText | None = Field(None, description="vLLM < 0.12's spelling of structured_outputs.regex.")
    guided_json: dict[str, Any] | SchemaText | None = Field(
        None, description="vLLM < 0.12's structured_outputs.json (a JSON Schema llguidance compiles, or its text)."
    )
    guided_grammar: GrammarText | None = Field(None, description="vLLM < 0.12's structured_outputs.grammar.")

    @model_validator(mode="after")
    def _one_constraint(self) -> SamplingFields:
        given = self.constraints()
        if len(given) > 1:
            raise ValueError(f"give one constraint, not {' and '.join(given)}")
        return self

    def constraints(self) -> list[str]:
        """The ways this request asks for a constraint (the keys of `CONSTRAINTS`)."""
        given = []
        if self.response_format is not None and self.response_format.type != "text":
            given.append("response_format")
        outputs = self.structured_outputs
        if outputs is not None:
            given += [
                f"structured_outputs.{key}"
                for key, value in (("regex", outputs.regex), ("json", outputs.json_), ("grammar", outputs.grammar))
                if value is not None
            ]
        given += [
            field for field in ("guided_regex", "guided_json", "guided_grammar") if getattr(self, field) is not None
        ]
        return given

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class TextPart(Lenient):
    type: Literal["text"]
    text: str


class ChatMessageIn(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: Tools = Field(None, description="Not supported here: omit it, or send null or [].")


class CompletionRequest(SamplingFields):
    prompt: TextPrompt = Field(description="Text, or a non-empty list of texts (token-id prompts: not supported).")
    max_tokens: int | None = Field(16, ge=1, le=MAX_TOKENS, description="OpenAI's default (and ours for null) is 16.")
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: Echo = Field(False, description="Not supported here: omit it, or send false.")
    suffix: Suffix = Field(None, description="Not supported here: omit it, or send null or an empty string.")


# --------------------------------------------------------------------------- responses


def now() -> int:
    return int(time.time())


class UsageOut(Strict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class TopLogprob(Strict):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(Strict):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(Strict):
    content: list[TokenLogprob] | None = None


class ChatMessageOut(Strict):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(Strict):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReason
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] = Field(default_factory=list)


class ChatCompletionResponse(Strict):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChoice]
    usage: UsageOut
    system_fingerprint: str | None = None


class ChatDelta(Strict):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(Strict):
    index: int
    delta: ChatDelta
    finish_reason: FinishReason | None = None
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(Strict):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChunkChoice]
    usage: UsageOut | None = None


class TextLogprobs(Strict):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] | None = None


class TextChoice(Strict):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: TextLogprobs | None = None
    token_ids: list[int] | None = None


class CompletionResponse(Strict):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[TextChoice]
    usage: UsageOut | None


class ModelCard(Strict):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "veriloop"


class ModelList(Strict):
    object: Literal["list"] = "list"
    data: list[ModelCard]
