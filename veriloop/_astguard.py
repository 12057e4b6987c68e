"""One `ast.parse` at a time in this process, a work-around for a CPython 3.11/3.12 bug.

The AST constructor keeps its recursion depth in per-interpreter state, not per thread. When two threads
build trees at once (the judge parses tests and runs bandit on worker threads while the service loads
a suite) one of them can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905 and its reports). A re-entrant lock around `ast.parse` keeps veriloop's own
threads (and the libraries they call, bandit included) from interleaving, and a parse that still
meets the error (a caller that bypasses `ast.parse`) is retried once.
"""

from __future__ import annotations

import ast
import sys
import threading
from typing import Any

_LOCK = threading.RLock()
_ORIGINAL = ast.parse
MISMATCH = "recursion depth mismatch"


def _guarded_parse(*args: Any, **kwargs: Any) -> Any:
    with _LOCK:
        try:
            return _ORIGINAL(*args, **kwargs)
        except SystemError as exc:
            if MISMATCH not in str(exc):
                raise
            return _ORIGINAL(*args, **kwargs)


def install() -> None:
    """Replace `ast.parse` once, on the CPython versions with the bug."""
    if sys.version_info < (3, 13) and getattr(ast.parse, "__wrapped__", None) is None:
        _guarded_parse.__wrapped__ = _ORIGINAL  # type: ignore[attr-defined]
        ast.parse = _guarded_parse
