"""`import veriloop` makes `ast.parse` safe to call from several threads (a CPython 3.11/3.12 bug, see _astguard)."""

from __future__ import annotations

import ast
import subprocess
import sys

import veriloop  # installs the guard

# Threads parse while garbage collection runs finalizers that switch threads, the way a socket's or a process
# object's __del__ does in the service: without the guard this meets "recursion depth mismatch" within seconds.
RACE = """
import ast, sys, threading, time
if sys.argv[1] == "guarded":
    import veriloop
source = open(sys.argv[2]).read()
class Switches:
    def __del__(self):
        time.sleep(0.0001)
errors = []
def work():
    for i in range(100):
        try:
            ast.parse(source)
        except SystemError as exc:
            errors.append(str(exc))
        if i % 3 == 0:
            a, b = Switches(), Switches()
            a.other, b.other = b, a
            del a, b
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), errors[:1])
"""


def test_ast_parse_is_guarded_after_importing_veriloop() -> None:
    assert getattr(ast.parse, "__wrapped__", None) is not None or sys.version_info >= (3, 13)
    assert isinstance(ast.parse("x = 1"), ast.Module)


def test_threads_parsing_at_once_meet_no_recursion_depth_mismatch() -> None:
    source = veriloop.__file__.replace("__init__.py", "config.py")
    result = subprocess.run(
        [sys.executable, "-c", RACE, "guarded", source], capture_output=True, text=True, timeout=300, check=True
    )
    assert result.stdout.startswith("0 "), result.stdout
