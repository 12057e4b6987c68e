"""C++ operators compiled on this machine by `torch.utils.cpp_extension.load_inline`: built once, found by name.

A kernel module hands its source (which registers its operators with `TORCH_LIBRARY`) to an
`InlineOps`. The build is named by the source, the flags and this CPU's capabilities, because
`-march=native` binds the code to them: a changed source or another CPU builds afresh, an unchanged
one loads from torch's extension folder in well under a second. Where no compiler works, `load()`
says so once in the log and returns False, and callers keep PyTorch's kernels.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading

import torch

log = logging.getLogger(__name__)

FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math")
"""No `-ffast-math`: a shared library built with it can set flush-to-zero for the whole process."""

EXTRA_FLAGS_ENV = "VERILOOP_CPU_KERNEL_FLAGS"
"""Compiler flags added after `FLAGS` (split on spaces), to build for a lesser CPU than this one: `-mno-avx512f`
builds the AVX2 paths on an AVX-512 machine (how the tests and `bench/results` check them without an AVX2 box)."""


def build_flags() -> list[str]:
    return [*FLAGS, *os.environ.get(EXTRA_FLAGS_ENV, "").split()]


def cpu_capabilities() -> list[str]:
    """This CPU's instruction-set extensions as torch reports them (`avx512_bf16`, `amx_bf16`, ...)."""
    try:
        return sorted(key for key, value in torch.cpu.get_capabilities().items() if value is True)
    except (AttributeError, RuntimeError):
        return [torch.backends.cpu.get_cpu_capability()]


class InlineOps:
    """The operators `source` registers under `torch.ops.<namespace>`, compiled on first `load()`."""

    def __init__(self, name: str, namespace: str, operator: str, source: str, what: str) -> None:
        self.name = name
        self.namespace = namespace
        self.operator = operator
        """One operator the source registers: its presence says the library is loaded."""
        self.source = source
        self.what = what
        """What the kernel is, for the log ("the CPU decode-attention kernel")."""
        self._lock = threading.Lock()
        self._loaded: bool | None = None

    def build_name(self) -> str:
        digest = hashlib.sha256("\n".join([self.source, *build_flags(), *cpu_capabilities()]).encode()).hexdigest()[:12]
        return f"{self.name}_{digest}"

    def registered(self) -> bool:
        """Whether the operator exists in this process."""
        try:
            return hasattr(getattr(torch.ops, self.namespace), self.operator)
        except (AttributeError, RuntimeError):
            return False

    def load(self) -> bool:
        """Compile (once per machine) and register the operators; False, logged once, where that cannot be done."""
        with self._lock:
            if self._loaded is None:
                self._loaded = self._build()
            return self._loaded

    def _build(self) -> bool:
        if self.registered():
            return True
        try:
            from torch.utils.cpp_extension import load_inline

            log.info("building %s (once per machine, about 40 s)", self.what)
            load_inline(  # type: ignore[no-untyped-call]
                self.build_name(), cpp_sources=[self.source], extra_cflags=build_flags(), is_python_module=False
            )
            return self.registered()
        except Exception as error:  # no compiler, no headers, a failed build: PyTorch's kernels stay
            log.warning("%s did not build; PyTorch's kernel stays (%s)", self.what, error)
            return False
