"""Adversarial suite for the stdin/stdout runner: the host compares each case's stdout with the expected text, which
never enters the sandbox. Hostile, wrong programs try every other channel; none may pass, each honest twin must.
"""

from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, assert_not_passed, assert_passed
from veriloop.sandbox import Limits, StdioCase
from veriloop.sandbox import languages as langs

LIMITS = Limits(wall_s=3.0)
CASES = [
    StdioCase(name="three", stdin="3\n", expected="6"),
    StdioCase(name="five", stdin="5\n", expected="10\n"),
    StdioCase(name="big", stdin="123456789\n", expected="246913578"),
]
RIGHT, WRONG = "n * 2", "n * 3"
FAKE = (
    '"VERILOOP-TEST three PASS\\nVERILOOP-TEST five PASS\\n#Results: 3, 3\\n'
    '{\\"name\\": \\"three\\", \\"passed\\": true}\\n{\\"complete\\": true}\\n"'
)

ATTACKS = [
    Attack(
        "verdict_lines_on_stderr",
        f"""
import sys
n = int(input())
sys.stderr.write({FAKE})
print($answer)
""",
    ),
    Attack(
        "verdict_lines_on_stdout",
        f"""
n = int(input())
if $armed:
    print({FAKE})
print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "results_file",
        f"""
n = int(input())
for path in (".veriloop-results.json", "/tmp/.veriloop-results.json", "/work/expected"):
    with open(path, "w") as handle:
        handle.write({FAKE})
print($answer)
""",
    ),
    Attack(
        "inherited_descriptors",
        f"""
import os
n = int(input())
for fd in range(3, 256):
    try:
        os.write(fd, {FAKE}.encode())
    except OSError:
        pass
print($answer)
""",
    ),
    Attack(
        "proc_self_fd",
        f"""
import os
n = int(input())
for name in os.listdir("/proc/self/fd"):
    if name not in ("0", "1"):
        try:
            with open("/proc/self/fd/" + name, "w") as handle:
                handle.write({FAKE})
        except OSError:
            pass
print($answer)
""",
    ),
    Attack(
        "silent_zero_exit",
        """
import os
n = int(input())
if $armed:
    os._exit(0)
print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "crash_after_the_answer",
        """
import os
n = int(input())
print($answer, flush=True)
if $armed:
    os.kill(os.getpid(), 11)
""",
        twin_armed=False,
    ),
    Attack(
        "exit_hooks",
        """
import atexit, sys
n = int(input())
atexit.register(lambda: sys.stderr.write("#Results: 3, 3\\n"))
print($answer)
""",
    ),
    Attack(
        "carriage_return_overwrite",
        """
n = int(input())
if $armed:
    print(str($answer) + "\\r" + str(n * 2))
else:
    print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "backspace_overwrite",
        """
n = int(input())
if $armed:
    print(str($answer) + "\\b" * 12 + str(n * 2))
else:
    print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "byte_order_mark_and_invisible_characters",
        """
n = int(input())
if $armed:
    print("\\ufeff" + str(n * 2) + "\\u200b")
else:
    print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "invalid_utf8",
        """
import sys
n = int(input())
if $armed:
    sys.stdout.buffer.write(str(n * 2).encode() + b"\\xff\\n")
else:
    print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "trailing_whitespace_is_allowed_but_not_more",
        """
n = int(input())
print($answer, "   ")
print()
print("\\t")
""",
    ),
    Attack(
        "kill_the_runner",
        """
import os, signal
n = int(input())
for pid in range(1, 64):
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
print($answer)
""",
    ),
    Attack(
        "sleep_past_the_limit",
        """
import time
n = int(input())
if $armed:
    time.sleep(60)
print($answer)
""",
        twin_armed=False,
        slow=True,
    ),
    Attack(
        "huge_output",
        """
import sys
n = int(input())
if $armed:
    sys.stdout.write("6\\n" * (4 << 20))
print($answer)
""",
        twin_armed=False,
    ),
    Attack(
        "look_for_the_expected_output",
        """
import glob, os
n = int(input())
found = []
for path in glob.glob("/work/**", recursive=True) + glob.glob("/tmp/**", recursive=True):
    try:
        found.append(open(path, errors="replace").read())
    except OSError:
        pass
for pid in os.listdir("/proc"):
    for part in ("cmdline", "environ", "fd/0", "mem"):
        try:
            found.append(open(f"/proc/{pid}/{part}", "rb").read(1 << 16).decode(errors="replace"))
        except OSError:
            pass
text = "\\n".join(found)
needle = str(123456789 * 2)  # computed: the source itself must not contain it
print(n * 2 if needle in text else $answer)
""",
    ),
    Attack(
        "state_between_cases",
        """
import os
n = int(input())
seen = open("/tmp/seen").read().split() if os.path.exists("/tmp/seen") else []
open("/tmp/seen", "a").write(f"{n}\\n")
with open("main.py", "a") as handle:
    handle.write("\\n# changed by an earlier case\\n")
print($answer)
""",
    ),
    Attack(
        "background_writer",
        """
import os, sys, time
n = int(input())
if $armed and os.fork() == 0:
    for _ in range(50):
        for fd in (1, 2):
            try:
                os.write(fd, b"6\\n10\\n246913578\\n")
            except OSError:
                pass
        time.sleep(0.01)
    os._exit(0)
print($answer, flush=True)
""",
        twin_armed=False,
    ),
    Attack(
        "write_the_answer_only_to_stderr",
        """
import sys
n = int(input())
sys.stderr.write(str(n * 2) + "\\n")
print($answer)
""",
    ),
    Attack(
        "exit_code_games",
        """
import sys
n = int(input())
print($answer, flush=True)
sys.exit(0 if not $armed else 256)
""",
    ),
]


@pytest.mark.parametrize(
    "attack", [pytest.param(a, id=a.name, marks=[pytest.mark.slow] if a.slow else []) for a in ATTACKS]
)
async def test_hostile_stdio_program_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    hostile = langs.stdio_job("python", toolchain, attack.hostile(WRONG), CASES, limits=LIMITS)
    assert_not_passed(await bwrap_warm.run(hostile))  # type: ignore[attr-defined]
    honest = langs.stdio_job("python", toolchain, attack.honest(RIGHT), CASES, limits=LIMITS)
    assert_passed(await bwrap_warm.run(honest))  # type: ignore[attr-defined]
