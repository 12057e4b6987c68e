"""Shared pieces of the verifier tests: the tools, the data dir, and one warm Nagini worker for the whole session
(a cold start costs 7 to 27 s). A test using `dafny`, `nagini` or `data_dir` carries that marker (tests/conftest.py),
which skips it, with the reason, where the part is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from veriloop.config import load_settings
from veriloop.verifiers.dafny import DafnyVerifier
from veriloop.verifiers.nagini import NaginiVerifier, close_workers, default_python

DAFNY_TIME_LIMIT_S = 5
"""Per-VC solver limit in the tests: the nonlinear fixture times out on it, every other program is far below."""


@pytest.fixture(scope="session")
def dafny() -> DafnyVerifier:
    return DafnyVerifier(timeout_s=300, time_limit_s=DAFNY_TIME_LIMIT_S)


@pytest.fixture(scope="session")
def nagini() -> Iterator[NaginiVerifier]:
    yield NaginiVerifier(default_python(load_settings()), timeout_s=300)
    close_workers()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    folder = load_settings().paths.data_dir
    assert folder is not None, "the `data` marker skips tests using this fixture when no data folder is configured"
    return folder
