"""Performance benchmarks run by `veriloop bench NAME`; each measures its baseline in the same
run and prints one JSON object with the ratios."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sandbox bench and the CLI import this package without torch
    import torch


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (what else ran on the cores while a bench measured);
    zeros where the platform has none."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]


def dtype_name(dtype: torch.dtype) -> str:
    """`float16` for torch.float16: how the bench JSON names an element type."""
    return str(dtype).removeprefix("torch.")
