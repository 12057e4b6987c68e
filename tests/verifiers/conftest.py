"""Shared pieces of the verifier tests: the tools (skipped, with the reason, when missing), the data dir, and one
warm Nagini worker for the whole session (a cold start costs 7 to 27 s)."""

from __future__ import annotations

import shutil
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
    if shutil.which("dafny") is None:
        pytest.skip("dafny is not installed; scripts/setup-verifiers.sh installs Debian's dafny")
    return DafnyVerifier(timeout_s=300, time_limit_s=DAFNY_TIME_LIMIT_S)


@pytest.fixture(scope="session")
def nagini() -> Iterator[NaginiVerifier]:
    python = default_python(load_settings())
    if not python.exists():
        pytest.skip(f"Nagini's virtualenv ({python}) is missing; scripts/setup-verifiers.sh creates it")
    yield NaginiVerifier(python, timeout_s=300)
    close_workers()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    settings = load_settings()
    folder = settings.paths.data_dir
    if folder is None or not folder.is_dir():
        pytest.skip("the benchmark data folder is not configured (VERILOOP_PATHS__DATA_DIR=../shared/data)")
    return folder
