"""Fixtures for the inference tests: a tiny random llama (the converted-model home is in tests/conftest.py).

Slow tests share a single home under pytest's session temp dir, so the GGUF conversion (about
15 s) runs once per session and is itself under test: its cache is created fresh, never borrowed
from the user's ~/.local/share/veriloop.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from veriloop.testing import tiny_causal_lm

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """(model, tokenizer) of a 2-layer random llama; treat as read-only."""
    return tiny_causal_lm(seed=0)
