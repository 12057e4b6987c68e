"""stdin/stdout problems (APPS, CodeContests, LiveCodeBench) as assert tests the Python harness already runs.

Each case becomes one `assert`, so per-case outcomes, public/private splits and every agent that runs
Python tests work unchanged. The harness imports the solution first (as `__solution__`, with an empty
stdin), so the program must do its work under `if __name__ == "__main__":`; the prompt says so. Each
assert calls `_veriloop_stdio(stdin)`, which the trusted judge binds (`sandbox.inside.harness_py.STDIO`): the
candidate's process runs the program again as `__main__` on that stdin and sends back what it printed,
and the judge compares it line by line with trailing whitespace ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

STDIO_NOTE = (
    "Write a complete Python program that reads standard input and writes standard output. Put the code that "
    'reads and prints under `if __name__ == "__main__":`.'
)


def normalise(text: str) -> str:
    """Expected output as the helper reports actual output: lines right-stripped, trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def stdio_tests(cases: Sequence[tuple[str, str]]) -> str:
    """A test file with one assert per (stdin, expected stdout) case."""
    lines: list[str] = []
    for stdin, expected in cases:
        lines.append(f"assert _veriloop_stdio({stdin!r}) == {normalise(expected)!r}")
    return "\n".join(lines) + "\n"
