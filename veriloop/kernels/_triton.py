"""When a Triton kernel may run: Triton installed, and either a CUDA tensor or the CPU interpreter.

Triton has no CPU backend; `TRITON_INTERPRET=1` (read when a kernel module is first imported)
runs kernels through numpy instead, slowly, which is how the tests check them on CPU machines.
"""

from __future__ import annotations

import importlib.util
import os

import torch


def triton_installed() -> bool:
    """Whether the optional `triton` package is importable (the `gpu` extra)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton kernels run in the numpy interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_usable(tensor: torch.Tensor) -> bool:
    """A Triton kernel can run on this tensor: on CUDA, or on the CPU under the interpreter."""
    if not triton_installed():
        return False
    if tensor.is_cuda:
        return not interpreting()
    return tensor.device.type == "cpu" and interpreting()


def resolve_impl(impl: str, tensor: torch.Tensor) -> str:
    """Map `auto` to `triton` on CUDA (when installed) and to `torch` elsewhere; check explicit choices."""
    if impl == "auto":
        return "triton" if tensor.is_cuda and triton_usable(tensor) else "torch"
    if impl == "triton" and not triton_usable(tensor):
        raise RuntimeError(
            "the Triton kernel needs the `triton` package and a CUDA tensor, or TRITON_INTERPRET=1 for CPU tensors"
        )
    if impl not in ("torch", "triton"):
        raise ValueError(f"impl must be auto, torch or triton, not {impl!r}")
    return impl
