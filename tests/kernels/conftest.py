"""Kernel tests run Triton kernels compiled on CUDA, or in Triton's CPU interpreter otherwise.

The interpreter is chosen when Triton first decorates a kernel, so the variable is set here,
before any kernel module is imported.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(1)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device() -> str:
    return DEVICE
