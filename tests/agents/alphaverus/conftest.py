"""Shared by the hints tests: a constraint matcher with no model behind it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from veriloop.records import Constraint


@pytest.fixture(scope="session")
def accepts() -> Callable[[Constraint, str], bool]:
    """Whether a constraint's matcher takes `text` whole and may end there (llguidance over a byte-level
    tokenizer, built in memory: no model needed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from veriloop.llm.constraints import ConstraintEngine

    vocab = {"<|im_end|>": 0, **{symbol: i + 1 for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer: Any = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")  # type: ignore[no-untyped-call]
    engine = ConstraintEngine(tokenizer, len(vocab))

    def check(constraint: Constraint, text: str) -> bool:
        matcher = engine.matcher(constraint)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        return all(matcher.advance(token) for token in tokens) and matcher.accepting

    return check
