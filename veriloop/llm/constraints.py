"""Structured generation: a `Constraint` turned into a per-step token mask by llguidance.

The batcher holds one `RowMatcher` per constrained row. Each decode step it calls `mask_rows` once on
the batch's logits (tokens the constraint forbids get -inf, unconstrained rows are untouched) and
`RowMatcher.advance` with the token it chose; a row ends when its matcher has nothing more to add.

Why llguidance (measured on this machine, SmolLM2-135M tokenizer, 49,152 tokens, one core;
`python` script in the closing note of issue 19): it is the only one of the three maintained engines
that takes all four input kinds (regex, JSON Schema, Lark and, through its converter, GBNF); xgrammar
has no Lark and outlines-core has no grammars at all. It was also the fastest to compile and mask:

    regex `[A-Za-z][A-Za-z0-9_]{0,20}\\(([a-z]+, ){0,3}[a-z]+\\)`: compile / mean mask per step
        llguidance 35 ms / 2.2 ms, xgrammar 512 ms / 26 ms, outlines-core 93 s / 12 ms
    small JSON Schema (object, string, integer, array):
        llguidance 18 ms / 0.04 ms, xgrammar 66 ms / 0.013 ms, outlines-core 1.1 s / 19 ms

and it installs as one small wheel, where xgrammar pulls in triton and a TVM runtime.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from veriloop.errors import ConfigError
from veriloop.records import Constraint

_TEMPLATES = 64
"""Compiled constraints kept per engine; rows copy a template instead of compiling again."""


def grammar_text(constraint: Constraint) -> str:
    """The llguidance grammar for a constraint; raises ConfigError when the input is not valid."""
    import llguidance

    kind, value = constraint.kind, constraint.value
    try:
        if kind == "regex":
            return str(llguidance.LLMatcher.grammar_from_regex(value))
        if kind == "json_schema":
            schema = json.loads(value)
            if not isinstance(schema, dict | bool):
                raise ConfigError("invalid json_schema constraint: a JSON Schema is an object (or true/false)")
            if isinstance(schema, dict) and "x-guidance" not in schema:
                # compact separators: with llguidance's default (any whitespace inside the object) small models
                # fill their token budget with newlines; a schema's own "x-guidance" settings are kept
                schema = {**schema, "x-guidance": {"whitespace_flexible": False}}
            return str(llguidance.LLMatcher.grammar_from_json_schema(value if isinstance(schema, bool) else schema))
        if kind == "lark":
            return str(llguidance.LLMatcher.grammar_from_lark(value))
        from llguidance.gbnf_to_lark import gbnf_to_lark

        return str(llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(value)))
    except ConfigError:
        raise
    except Exception as exc:  # json, llguidance and the GBNF converter each raise their own types
        raise ConfigError(f"invalid {kind} constraint: {' '.join(str(exc).split())[:400]}") from None


def validate(constraint: Constraint) -> None:
    """Raise ConfigError if the constraint does not compile (no tokenizer needed)."""
    import llguidance

    grammar = grammar_text(constraint)
    message = str(llguidance.LLMatcher.validate_grammar(grammar) or "")
    if message:
        raise ConfigError(f"invalid {constraint.kind} constraint: {' '.join(message.split())[:400]}")


class RowMatcher:
    """One row's position in its constraint: which tokens may come next, and whether it is finished."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self._matcher = matcher
        self.vocab_size = vocab_size
        """Tokens the mask covers (the tokenizer's vocabulary, or the model's when larger)."""

    @property
    def finished(self) -> bool:
        """Nothing more may be generated (the constraint is complete and allows no continuation)."""
        return bool(self._matcher.is_stopped() or self._matcher.is_error())

    @property
    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    @property
    def error(self) -> str | None:
        return str(self._matcher.get_error()) if self._matcher.is_error() else None

    def advance(self, token: int) -> bool:
        """Consume the chosen token; False when the constraint did not allow it (the row should end)."""
        if self._matcher.is_stopped():
            return False
        return bool(self._matcher.consume_token(token))

    def fill(self, bitmask: torch.Tensor) -> None:
        """Write the allowed-token bitmask (int32 words, bit i of word w = token 32w+i) into `bitmask`."""
        self._matcher.unsafe_compute_mask_ptr(bitmask.data_ptr(), bitmask.numel() * bitmask.element_size())


class ConstraintEngine:
    """Compiles constraints for one tokenizer and hands each row its own matcher; safe from any thread."""

    def __init__(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        self._hf_tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._templates: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def _ll_tokenizer(self) -> Any:
        if self._tokenizer is None:
            import llguidance.hf

            try:
                self._tokenizer = llguidance.hf.from_tokenizer(self._hf_tokenizer, n_vocab=self._vocab_size)
            except ValueError as exc:
                raise ConfigError(f"constrained decoding needs a fast tokenizer: {exc}") from None
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return int(self._ll_tokenizer().vocab_size)

    def matcher(self, constraint: Constraint) -> RowMatcher:
        """A fresh matcher at the start of `constraint`; ConfigError when it does not compile."""
        import llguidance

        key = (constraint.kind, constraint.value)
        with self._lock:
            template = self._templates.get(key)
            if template is not None:
                self._templates.move_to_end(key)
                return RowMatcher(template.deep_copy(), self.vocab_size)
            tokenizer = self._ll_tokenizer()
        grammar = grammar_text(constraint)
        template = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if template.is_error():
            raise ConfigError(f"invalid {constraint.kind} constraint: {' '.join(template.get_error().split())[:400]}")
        with self._lock:
            self._templates[key] = template
            while len(self._templates) > _TEMPLATES:
                self._templates.popitem(last=False)
        return RowMatcher(template.deep_copy(), self.vocab_size)


def mask_rows(logits: torch.Tensor, matchers: Sequence[RowMatcher | None]) -> None:
    """Set the logits of forbidden tokens to -inf, in place, for every row that has a matcher.

    `logits` is (rows, vocab) on any device; the masks are computed on the CPU and applied in one
    indexed write. Columns past the tokenizer's vocabulary (padding rows of the embedding) are forbidden.
    """
    rows = [index for index, matcher in enumerate(matchers) if matcher is not None]
    if not rows:
        return
    vocab = logits.shape[-1]
    covered = {matcher.vocab_size for matcher in matchers if matcher is not None}
    if len(covered) != 1:
        raise ValueError("the matchers of one batch come from engines with different vocabularies")
    words = (covered.pop() + 31) // 32
    bits = torch.zeros((len(rows), words), dtype=torch.int32)
    for place, index in enumerate(rows):
        matcher = matchers[index]
        assert matcher is not None
        matcher.fill(bits[place])
    allowed = np.unpackbits(bits.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab]
    if allowed.shape[1] < vocab:  # logits wider than the tokenizer: the extra columns are never allowed
        allowed = np.pad(allowed, ((0, 0), (0, vocab - allowed.shape[1])))
    forbidden = torch.from_numpy(allowed == 0).to(logits.device)
    logits[rows] = logits[rows].masked_fill(forbidden, float("-inf"))


def masked(logits: torch.Tensor, matcher: RowMatcher | None) -> torch.Tensor:
    """A 1-D logits vector with `matcher`'s mask applied (a copy; the input is left as it is)."""
    if matcher is None:
        return logits
    out = logits.clone().unsqueeze(0)
    mask_rows(out, [matcher])
    return out[0]


def structured_outputs(constraint: Constraint) -> dict[str, Any]:
    """vLLM's `structured_outputs` fields for a constraint (vLLM >= 0.12, which removed the `guided_*` fields)."""
    if constraint.kind == "regex":
        return {"regex": constraint.value}
    if constraint.kind == "json_schema":
        return {"json": json.loads(constraint.value)}
    return {"grammar": constraint.value}  # Lark for the guidance backend, GBNF/EBNF for xgrammar


def openai_request_fields(constraint: Constraint | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(keyword arguments, extra body) that ask an OpenAI-compatible server for the same constraint.

    A JSON Schema goes as OpenAI's own `response_format`; regular expressions and grammars have no OpenAI
    field, so they go as vLLM's `structured_outputs` extra body (SGLang and veriloop's /v1 accept it too).
    """
    if constraint is None:
        return {}, {}
    if constraint.kind == "json_schema":
        schema = json.loads(constraint.value)
        response_format = {"type": "json_schema", "json_schema": {"name": "constraint", "schema": schema}}
        return {"response_format": response_format}, {}
    return {}, {"structured_outputs": structured_outputs(constraint)}
