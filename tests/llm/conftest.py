"""Shared fixtures for the inference tests: a tiny random llama, and one converted-model home per session.

Slow tests share a single home under pytest's session temp dir, so the GGUF conversion (about
15 s) runs once per session and is itself under test: its cache is created fresh, never borrowed
from the user's ~/.local/share/veriloop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from veriloop.config import Settings, load_settings
from veriloop.testing import tiny_causal_lm

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """(model, tokenizer) of a 2-layer random llama; treat as read-only."""
    return tiny_causal_lm(seed=0)


@pytest.fixture(scope="session")
def model_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A veriloop home whose model cache starts empty; the first slow test that loads the model converts it."""
    yield tmp_path_factory.mktemp("veriloop-model-home")


@pytest.fixture(scope="session")
def model_settings(model_home: Path) -> Settings:
    return load_settings(paths={"home": model_home}, llm={"backend": "embedded", "torch_threads": 1})
