"""Sandboxed execution of generated code: bubblewrap (default), Docker, and an opt-in unsafe process backend.

`get_sandbox(settings).run(job)` returns an ExecResult; `languages` builds jobs for programs and tests.
"""

from veriloop.sandbox.base import SANDBOXES, Sandbox, SandboxBackend, Toolchain, default_limits, get_sandbox
from veriloop.sandbox.job import Checks, Job, Limits, StdioCase, Step, simple_job

__all__ = [
    "SANDBOXES",
    "Checks",
    "Job",
    "Limits",
    "Sandbox",
    "SandboxBackend",
    "StdioCase",
    "Step",
    "Toolchain",
    "default_limits",
    "get_sandbox",
    "simple_job",
]
