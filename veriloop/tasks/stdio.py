"""stdin/stdout problems (APPS, CodeContests, LiveCodeBench) as assert tests the Python harness already runs.

Each case becomes one `assert`, so per-case outcomes, public/private splits and every agent that runs
Python tests work unchanged. The harness imports the solution first (as `__solution__`, with an empty
stdin), so the program must do its work under `if __name__ == "__main__":`; the prompt says so. Each
assert then runs the solution file again as `__main__` with the case's stdin, in the sandbox, and
compares its stdout line by line with trailing whitespace ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

STDIO_NOTE = (
    "Write a complete Python program that reads standard input and writes standard output. Put the code that "
    'reads and prints under `if __name__ == "__main__":`.'
)

HELPER = """def _veriloop_stdio(stdin):
    import contextlib, io, sys
    with open("solution.py") as handle:
        source = handle.read()
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(source, "solution.py", "exec"), {"__name__": "__main__"})
            except SystemExit:
                pass
    finally:
        sys.stdin = saved
    return "\\n".join(line.rstrip() for line in out.getvalue().rstrip().splitlines())
"""


def normalise(text: str) -> str:
    """Expected output as the helper reports actual output: lines right-stripped, trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def stdio_tests(cases: Sequence[tuple[str, str]]) -> str:
    """A test file with one assert per (stdin, expected stdout) case."""
    lines = [HELPER]
    for stdin, expected in cases:
        lines.append(f"assert _veriloop_stdio({stdin!r}) == {normalise(expected)!r}")
    return "\n".join(lines) + "\n"
