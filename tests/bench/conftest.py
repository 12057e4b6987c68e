"""The real judge, shared by the training benches' tests (their toy tasks are in `toys.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from veriloop.config import load_settings
from veriloop.training.rewards import LocalJudge


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalJudge]:
    """The real judge, in a home of its own."""
    local = LocalJudge(load_settings(paths={"home": tmp_path_factory.mktemp("bench-judge")}))
    yield local
    local.close()
