"""Fixtures shared by every test area.

One converted-model home per session: the first test that needs the embedded model converts the
bundled GGUF into a fresh, empty home (about 15 s), and every later test reuses that folder. The
conversion is itself under test, and the user's ~/.local/share/veriloop is never touched.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from veriloop.config import Settings, load_settings
from veriloop.testing import ModelConversion

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_conversion(tmp_path_factory: pytest.TempPathFactory) -> ModelConversion:
    """Convert the embedded model into a new home whose cache starts empty."""
    from veriloop.llm.embedded import default_model_dir, ensure_default_model

    home = tmp_path_factory.mktemp("veriloop-model-home")
    settings = load_settings(paths={"home": home})
    folder = default_model_dir(settings)
    assert not folder.exists(), "the session's model cache starts empty"
    started = time.perf_counter()
    assert ensure_default_model(settings) == folder
    return ModelConversion(home, folder, time.perf_counter() - started)


@pytest.fixture(scope="session")
def model_home(model_conversion: ModelConversion) -> Path:
    """A veriloop home holding the converted embedded model."""
    return model_conversion.home


@pytest.fixture(scope="session")
def model_folder(model_conversion: ModelConversion) -> Path:
    """The converted embedded model as a Hugging Face folder."""
    return model_conversion.folder


@pytest.fixture(scope="session")
def model_settings(model_home: Path) -> Settings:
    return load_settings(paths={"home": model_home}, llm={"backend": "embedded", "torch_threads": 1})
