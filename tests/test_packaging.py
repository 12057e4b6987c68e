"""The distribution installs only `veriloop`; its subpackages are this repository's folders."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["kernels", "agents", "judge", "search", "llm", "sandbox", "store", "verifiers"])
def test_subpackages_resolve_to_repository_folders(name: str) -> None:
    module = importlib.import_module(f"veriloop.{name}")
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == REPO / "veriloop" / name


def test_no_top_level_collisions_installed() -> None:
    top_level = importlib.metadata.distribution("veriloop").read_text("top_level.txt")
    provided = importlib.metadata.packages_distributions()
    for name in ("agents", "kernels", "search"):
        assert "veriloop" not in provided.get(name, []), f"veriloop must not install top-level {name!r}"
        if top_level is not None:
            assert name not in top_level.split()
