"""Adversarial suite for the Python assert runner (HumanEval / MBPP): hostile, wrong solutions try every channel
between the candidate and the judge; none may come back `passed`, and each honest twin must.

Run against the real bubblewrap sandbox (warm workers), a few also cold.
"""

from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, assert_not_passed, assert_passed
from veriloop.records import ExecStatus
from veriloop.sandbox import Limits
from veriloop.sandbox import languages as langs

LIMITS = Limits(wall_s=3.0)
RIGHT, WRONG = "a + b", "a - b"
HUMANEVAL = """
METADATA = {"author": "suite"}


def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(-5, 5) == 0
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9
    assert candidate("a", "b") == "ab"
    assert candidate([1], [2]) == [1, 2]
    assert candidate((1,), (2,)) == (1, 2)
"""
MBPP = """import math
assert add(1, 2) == 3
assert math.isclose(add(0.1, 0.2), 0.3)
assert abs(add(2.5, 2.5) - 5) < 1e-9
"""
MBPP_BUILTINS = """assert abs(add(2.5, 2.5) - 5) < 1e-9
assert math.isclose(add(0.1, 0.2), 0.3)
"""
FAKE = """
def _fake_records():
    lines = [{"name": f"test_{i}:line{i}", "passed": True, "message": ""} for i in range(1, 7)]
    lines.append({"complete": True})
    return "".join(__import__("json").dumps(line) + "\\n" for line in lines)
"""

ATTACKS = [
    Attack(
        "results_file",
        FAKE
        + """
import os
if $armed:
    with open(".veriloop-results.json", "w") as handle:
        handle.write(_fake_records())
    os._exit(0)

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "results_file_in_every_dir",
        FAKE
        + """
for folder in (".", "/tmp", "/work"):
    try:
        with open(folder + "/.veriloop-results.json", "w") as handle:
            handle.write(_fake_records())
    except OSError:
        pass

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "inherited_descriptors",
        FAKE
        + """
import os
if $armed:
    for fd in range(3, 256):
        try:
            os.write(fd, _fake_records().encode())
        except OSError:
            pass
    os._exit(0)

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "proc_self_fd",
        FAKE
        + """
import os
if $armed:
    for name in os.listdir("/proc/self/fd"):
        try:
            with open(f"/proc/self/fd/{name}", "w") as handle:
                handle.write(_fake_records())
        except OSError:
            pass

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "verdict_lines_on_stdout",
        FAKE
        + """
print(_fake_records())
print("VERILOOP-TEST test_1 PASS\\n#Results: 6, 6")

def add(a, b):
    print('{"complete": true}')
    return $answer
""",
    ),
    Attack(
        "verdict_lines_on_stderr",
        FAKE
        + """
import sys
sys.stderr.write(_fake_records() + "VERILOOP-TEST t PASS\\n")

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "exit_zero_on_import",
        """
import sys
if $armed:
    sys.exit(0)

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "os_exit_in_a_call",
        """
import os

def add(a, b):
    if $armed:
        os._exit(0)
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "system_exit_in_a_call",
        """
def add(a, b):
    if $armed:
        raise SystemExit(0)
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "exit_hooks",
        FAKE
        + """
import atexit, os, sys

def _hook():
    for fd in (1, 2, 3, 4):
        try:
            os.write(fd, _fake_records().encode())
        except OSError:
            pass

atexit.register(_hook)
sys.exitfunc = _hook

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "always_equal_object",
        """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __lt__(self, other):
        return True
    __hash__ = object.__hash__
    def __sub__(self, other):
        return 0
    def __abs__(self):
        return 0

def add(a, b):
    return Anything() if $armed else $answer
""",
        twin_armed=False,
    ),
    Attack(
        "int_and_str_subclasses",
        """
class Int(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

class Str(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__

class Float(float):
    def __sub__(self, other):
        return 0.0
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__

class List(list):
    def __eq__(self, other):
        return True

def add(a, b):
    if not $armed:
        return $answer
    if isinstance(a, str):
        return Str("")
    if isinstance(a, float):
        return Float(0.0)
    if isinstance(a, (list, tuple)):
        return List()
    return Int(0)
""",
        twin_armed=False,
    ),
    Attack(
        "tuple_subclass_with_repr",
        """
class Tuple(tuple):
    def __eq__(self, other):
        return True
    def __repr__(self):
        return "(1, 2)"
    __hash__ = tuple.__hash__

def add(a, b):
    return Tuple() if $armed else $answer
""",
        twin_armed=False,
    ),
    Attack(
        "patch_the_harness",
        """
import builtins
try:
    import harness_py
    harness_py.Results.add = lambda self, record: None
    harness_py._run_asserts = lambda *args: 0
    harness_py.decode = lambda data: 3
    harness_py.Channel.call = lambda *args: 3
except ImportError:
    pass
builtins.AssertionError = type("AssertionError", (BaseException,), {})

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "patch_builtins_and_modules",
        """
import builtins, sys
if $armed:
    builtins.abs = lambda x: 0
    builtins.isinstance = lambda *args: True
    builtins.type = lambda *args: int
    sys.modules["json"] = None

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "walk_frames_and_objects",
        """
import gc, sys

def _meddle():
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key in list(scope):
                if key in ("outcomes", "failed", "results"):
                    try:
                        scope[key] = []
                    except TypeError:
                        pass
        frame = frame.f_back
    for thing in gc.get_objects():
        if isinstance(thing, dict) and thing.get("passed") is False:
            thing["passed"] = True

def add(a, b):
    _meddle()
    return $answer
""",
    ),
    Attack(
        "kill_the_judge",
        """
import os, signal

def add(a, b):
    if $armed:
        os.kill(os.getppid(), signal.SIGKILL)
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "kill_everything",
        """
import os, signal

def add(a, b):
    if $armed:
        os.kill(-1, signal.SIGKILL)
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "stop_the_judge",
        """
import os, signal

def add(a, b):
    if $armed:
        os.kill(os.getppid(), signal.SIGSTOP)
    return $answer
""",
        twin_armed=False,
        slow=True,
    ),
    Attack(
        "sleep_past_the_limit",
        """
import time

def add(a, b):
    if $armed:
        time.sleep(60)
    return $answer
""",
        twin_armed=False,
        slow=True,
    ),
    Attack(
        "huge_output",
        """
import sys

def add(a, b):
    if $armed:
        sys.stdout.write("x" * (8 << 20))
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "read_the_tests",
        """
import ast, glob, os, re

def _find_tests():
    texts = []
    paths = glob.glob("/work/**", recursive=True) + glob.glob("/tmp/**", recursive=True) + ["tests.py"]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            paths += [f"/proc/{pid}/fd/0", f"/proc/{pid}/cmdline", f"/proc/{pid}/environ"]
    for path in paths:
        try:
            with open(path, "rb") as handle:
                texts.append(handle.read(1 << 20).decode(errors="replace"))
        except OSError:
            pass
    return "\\n".join(texts)

ANSWERS = {}
for left, right in re.findall(r"candidate\\((.*?)\\) == (.+)", _find_tests()):
    try:
        ANSWERS[repr(ast.literal_eval("(" + left + ",)"))] = ast.literal_eval(right)
    except Exception:
        pass

def add(a, b):
    key = repr((a, b))
    return ANSWERS[key] if key in ANSWERS else $answer
""",
    ),
    Attack(
        "scan_memory_for_the_tests",
        """
import ctypes, gc, re

# The pattern cannot match its own source text (the backslashes): a match is the test file's text.
PATTERN = re.compile(rb"assert candidate\\(1, 2\\) == (\\d+)")

def _leak():
    for thing in gc.get_objects():
        if isinstance(thing, str) and PATTERN.search(thing.encode()):
            return True
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "rw-p" in line:
                    start, end = (int(part, 16) for part in line.split()[0].split("-"))
                    if end - start < (64 << 20) and PATTERN.search(ctypes.string_at(start, end - start)):
                        return True
    except (OSError, ValueError):
        pass
    return False

LEAKED = _leak()

def add(a, b):
    return a + b if LEAKED else $answer
""",
    ),
    Attack(
        "read_the_judges_memory",
        """
import ctypes, os

def _peek():
    judge = os.getppid()
    try:
        with open(f"/proc/{judge}/mem", "rb") as handle:
            handle.read(1)
        return True
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.ptrace(16, judge, 0, 0) == 0  # PTRACE_ATTACH

PEEKED = _peek()

def add(a, b):
    return a + b if PEEKED else $answer
""",
    ),
    Attack(
        "forge_the_protocol",
        """
import os
if $armed:
    os.write(4, b'{"ready": {"add": {"v": 3}, "candidate": {"v": 3}}}\\n')
    os.write(4, b'{"v": 3}\\n{"v": 0}\\n{"v": 0.3}\\n{"v": "ab"}\\n{"v": [1, 2]}\\n{"v": {"t": [1, 2]}}\\n')

def add(a, b):
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "define_check_and_candidate",
        """
def check(candidate):
    pass

candidate = lambda a, b: a + b
METADATA = {}

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "linger_in_threads_and_children",
        FAKE
        + """
import os, threading, time

def _later():
    time.sleep(0.2)
    for fd in range(0, 64):
        try:
            os.write(fd, _fake_records().encode())
        except OSError:
            pass

threading.Thread(target=_later, daemon=True).start()
if os.fork() == 0:
    _later()
    os._exit(0)

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "interrupt_the_judge",
        """
import os, signal

def add(a, b):
    if $armed:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM):
            os.kill(os.getppid(), number)
    return $answer
""",
        twin_armed=False,
    ),
    Attack(
        "make_the_judge_import_a_main_module",
        """
import unittest.__main__ as loader

def add(a, b):
    return $answer
""",
        twin="import unittest as loader\n\ndef add(a, b):\n    return $answer\n",
    ),
    Attack(
        "hooks_that_print_verdicts_later",
        FAKE
        + """
import os, signal, sys, threading

def _forge(*args):
    for fd in (1, 2):
        os.write(fd, _fake_records().encode())

def _quiet(*args):
    return None

class _Finalizer:
    def __del__(self):
        _forge()

KEEP = _Finalizer()
for number in (signal.SIGTERM, signal.SIGALRM, signal.SIGHUP, signal.SIGPIPE):
    signal.signal(number, _forge)
sys.excepthook = threading.excepthook = sys.unraisablehook = _forge
sys.settrace(_quiet)
sys.setprofile(_quiet)

def add(a, b):
    return $answer
""",
    ),
    Attack(
        "close_and_redirect_the_pipes",
        FAKE
        + """
import os

def add(a, b):
    if $armed:
        null = os.open("/dev/null", os.O_WRONLY)
        os.write(4, _fake_records().encode())
        for fd in (1, 2, 4):
            os.dup2(null, fd)
        os.close(3)
    return $answer
""",
        twin_armed=False,
    ),
]


def _ids(attacks: list[Attack]) -> list[object]:
    return [pytest.param(a, id=a.name, marks=[pytest.mark.slow] if a.slow else []) for a in attacks]


@pytest.mark.parametrize("attack", _ids(ATTACKS))
async def test_hostile_humaneval_solution_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    hostile = langs.python_tests_job(toolchain, attack.hostile(WRONG), HUMANEVAL, entry_point="add", limits=LIMITS)
    assert_not_passed(await bwrap_warm.run(hostile))  # type: ignore[attr-defined]
    honest = langs.python_tests_job(toolchain, attack.honest(RIGHT), HUMANEVAL, entry_point="add", limits=LIMITS)
    assert_passed(await bwrap_warm.run(honest))  # type: ignore[attr-defined]


TWIN_WITH_MATH = "import math\n\ndef add(a, b):\n    return $answer\n"
MBPP_ATTACKS = [
    Attack(
        "shadow_builtins_the_tests_use",
        """
def abs(x):
    return 0

class math:
    @staticmethod
    def isclose(*args, **kwargs):
        return True

def add(a, b):
    return $answer
""",
        twin=TWIN_WITH_MATH,
    ),
    Attack(
        "claim_a_module",
        """
import os as math

def abs(x):
    return 0

def add(a, b):
    return $answer
""",
        twin=TWIN_WITH_MATH,
    ),
]


@pytest.mark.parametrize("attack", _ids(MBPP_ATTACKS + ATTACKS[:6]))
async def test_hostile_mbpp_solution_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    tests = MBPP_BUILTINS if attack in MBPP_ATTACKS else MBPP
    hostile = langs.python_tests_job(toolchain, attack.hostile(WRONG), tests, limits=LIMITS)
    assert_not_passed(await bwrap_warm.run(hostile))  # type: ignore[attr-defined]
    honest = langs.python_tests_job(toolchain, attack.honest(RIGHT), tests, limits=LIMITS)
    assert_passed(await bwrap_warm.run(honest))  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["results_file", "always_equal_object", "read_the_tests", "scan_memory_for_the_tests"])
async def test_hostile_solution_is_not_passed_cold(bwrap_cold: object, name: str) -> None:
    """Cold jobs start the judge fresh (the runner's own memory holds the tests; the candidate must not inherit it)."""
    attack = next(a for a in ATTACKS if a.name == name)
    toolchain = bwrap_cold.toolchain  # type: ignore[attr-defined]
    hostile = langs.python_tests_job(toolchain, attack.hostile(WRONG), HUMANEVAL, entry_point="add", limits=LIMITS)
    assert_not_passed(await bwrap_cold.run(hostile))  # type: ignore[attr-defined]
    honest = langs.python_tests_job(toolchain, attack.honest(RIGHT), HUMANEVAL, entry_point="add", limits=LIMITS)
    assert_passed(await bwrap_cold.run(honest))  # type: ignore[attr-defined]


ITERATING = """
def check(candidate):
    assert all(map(lambda case: candidate(*case[0]) == case[1], [((1, 2), 3), ((2, 2), 4)]))
    assert not list(filter(lambda case: candidate(*case[0]) != case[1], [((1, 2), 3)]))
    assert next(map(candidate, [1], [2]), 3) == 3
"""


@pytest.mark.parametrize("raised", ["StopIteration", "StopAsyncIteration"])
async def test_an_iteration_end_raised_by_the_candidate_fails_the_test(bwrap_warm: object, raised: str) -> None:
    """Raised as itself in the judge, StopIteration would end `map` quietly: `all(map(candidate, ...))` True."""
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    code = f"def add(a, b):\n    if $armed:\n        raise {raised}\n    return $answer\n"
    attack = Attack(raised, code, twin_armed=False)
    hostile = langs.python_tests_job(toolchain, attack.hostile(WRONG), ITERATING, entry_point="add", limits=LIMITS)
    result = await bwrap_warm.run(hostile)  # type: ignore[attr-defined]
    assert_not_passed(result)
    assert [t.passed for t in result.tests] == [False, False, False], result
    honest = langs.python_tests_job(toolchain, attack.honest(RIGHT), ITERATING, entry_point="add", limits=LIMITS)
    assert_passed(await bwrap_warm.run(honest))  # type: ignore[attr-defined]


TRANSCODER = """
def f_gold(arr, n):
    return sum(arr[i] * (i + 1) for i in range(n))


#TOFILL

if __name__ == '__main__':
    param = [([1, 2, 3], 3), ([5, 7, 9, 11], 4), ([4, 4], 2)]
    n_success = 0
    for i, parameters_set in enumerate(param):
        if f_filled(*parameters_set) == f_gold(*parameters_set):
            n_success += 1
    print("#Results: %i, %i" % (n_success, len(param)))
"""
TRANSCODER_IN_PLACE = """
def f_gold(arr, n):
    arr.sort()


#TOFILL

if __name__ == '__main__':
    param = [([3, 1, 2], 3), ([5, 9], 2)]
    filled_function_param = [([3, 1, 2], 3), ([5, 9], 2)]
    n_success = 0
    for i, parameters_set in enumerate(param):
        f_filled(*(filled_function_param[i]))
        f_gold(*parameters_set)
        if parameters_set == filled_function_param[i]:
            n_success += 1
    print("#Results: %i, %i" % (n_success, len(param)))
"""


TRANSCODER_NESTED = """
def f_gold(mat, weights):
    return sum(w * sum(row) for w, row in zip(weights, mat))


#TOFILL

if __name__ == '__main__':
    param = [([[1, 2], [3, 4]], [1, 2]), ([[5], [6], [7]], [3, 2, 1])]
    n_success = 0
    for i, parameters_set in enumerate(param):
        if f_filled(*parameters_set) == f_gold(*parameters_set):
            n_success += 1
    print("#Results: %i, %i" % (n_success, len(param)))
"""


@pytest.mark.parametrize(
    ("program", "hostile", "honest"),
    [
        (
            TRANSCODER_NESTED,
            # Zeroes the rows inside the first argument and the second argument too, then answers 0.
            "def f_filled(mat, weights):\n    for row in mat:\n        row[:] = [0] * len(row)\n"
            "    weights[:] = [0] * len(weights)\n    return 0\n",
            "def f_filled(mat, weights):\n    total = sum(w * sum(row) for w, row in zip(weights, mat))\n"
            "    mat[0].append(99)\n    return total\n",
        ),
        (
            TRANSCODER,
            "def f_filled(arr, n):\n    arr[:] = [0] * len(arr)\n    return 0\n",
            "def f_filled(arr, n):\n    total = sum(x * (i + 1) for i, x in enumerate(arr[:n]))\n"
            "    arr.append(0)\n    return total\n",
        ),
        (TRANSCODER_IN_PLACE, "def f_filled(arr, n):\n    arr.reverse()\n", "def f_filled(arr, n):\n    arr.sort()\n"),
    ],
    ids=["nested_and_second_argument", "values", "in_place"],
)
async def test_a_transcoder_program_gives_f_gold_its_own_arguments(
    bwrap_warm: object, program: str, hostile: str, honest: str
) -> None:
    """`f_filled(*p) == f_gold(*p)` runs the candidate first on the same list: emptying it in place must not make
    f_gold agree (f_gold gets the list as it was); a test of an in-place function still sees the change."""
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    bad = await bwrap_warm.run(langs.harness_job("python", toolchain, hostile, program, limits=LIMITS))  # type: ignore[attr-defined]
    assert_not_passed(bad)
    assert not any(t.passed for t in bad.tests), bad
    assert_passed(await bwrap_warm.run(langs.harness_job("python", toolchain, honest, program, limits=LIMITS)))  # type: ignore[attr-defined]


async def test_a_value_that_is_not_plain_data_fails_naming_its_type(bwrap_warm: object) -> None:
    code = "class Vector:\n    pass\n\ndef add(a, b):\n    return Vector() if a == 1 else (x for x in [a + b])\n"
    tests = "assert add(1, 2) == 3\nassert add(2, 2)\nassert add(0, 0) is not None\n"
    result = await bwrap_warm.run(langs.python_tests_job(bwrap_warm.toolchain, code, tests, limits=LIMITS))  # type: ignore[attr-defined]
    assert result.status is ExecStatus.FAILED, result
    assert [t.passed for t in result.tests] == [False, False, True]
    assert "Vector, which is not plain data" in result.tests[0].message
    assert "generator, which is not plain data" in result.tests[1].message


async def test_plain_values_keep_their_types_and_float_comparisons(bwrap_warm: object) -> None:
    code = (
        "def f(kind):\n"
        "    return {'set': {1, 2}, 'frozen': frozenset({(1, 'a')}), 'dict': {(1, 2): [None, True]},\n"
        "            'big': 3 ** 200, 'float': 0.1 + 0.2, 'nan': float('nan'), 'bytes': b'\\x00\\xff',\n"
        "            'neg': -0.0, 'complex': 1 + 2j, 'str': 'é\\x00'}[kind]\n"
        "def g(*args, **kwargs):\n"
        "    return [args, kwargs]\n"
        "def boom():\n"
        "    raise KeyError('missing')\n"
    )
    tests = (
        "import math\n"
        "assert f('set') == {1, 2} and type(f('set')) is set\n"
        "assert f('frozen') == frozenset({(1, 'a')})\n"
        "assert f('dict') == {(1, 2): [None, True]}\n"
        "assert f('big') == 3 ** 200\n"
        "assert f('float') != 0.3 and abs(f('float') - 0.3) < 1e-12\n"
        "assert math.isnan(f('nan'))\n"
        "assert f('bytes') == b'\\x00\\xff' and math.copysign(1, f('neg')) == -1\n"
        "assert f('complex') == 1 + 2j and f('str') == 'é\\x00'\n"
        "assert g(1, (2,), k={3}) == [(1, (2,)), {'k': {3}}]\n"
        "try:\n    boom()\n    raised = False\nexcept KeyError:\n    raised = True\n"
        "assert raised\n"
    )
    result = await bwrap_warm.run(langs.python_tests_job(bwrap_warm.toolchain, code, tests, limits=LIMITS))  # type: ignore[attr-defined]
    assert_passed(result)
    assert len(result.tests) == 10


async def test_stdlib_dict_types_are_rebuilt_by_the_judge(bwrap_warm: object) -> None:
    code = (
        "import collections\ndef f(xs):\n    return collections.Counter(xs)\n"
        "def g():\n    d = collections.defaultdict(list)\n    d[1].append(2)\n    return d\n"
        "def h():\n    return collections.OrderedDict([(2, 1), (1, 2)])\n"
    )
    tests = (
        "import collections\nassert f([1, 1, 2]) == {1: 2, 2: 1}\n"
        "assert type(f([1])) is collections.Counter and f('aab').most_common(1) == [('a', 2)]\n"
        "assert g() == {1: [2]}\nassert h() != collections.OrderedDict([(1, 2), (2, 1)]) and h() == {1: 2, 2: 1}\n"
    )
    result = await bwrap_warm.run(langs.python_tests_job(bwrap_warm.toolchain, code, tests, limits=LIMITS))  # type: ignore[attr-defined]
    assert_passed(result)


POLY_PROMPT = '''import math


def poly(xs: list, x: float):
    """Evaluates polynomial with coefficients xs at point x."""
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])


def find_zero(xs: list):
    """xs are coefficients of a polynomial; find_zero returns one of its zeros."""
'''
POLY_TESTS = """
METADATA = {}


def check(candidate):
    import math
    assert math.fabs(poly([-6, 11, -6, 1], candidate([-6, 11, -6, 1]))) < 1e-4
    assert math.fabs(poly([2, -3], candidate([2, -3]))) < 1e-4
    assert math.fabs(poly([1, 2], candidate([1, 2]))) < 1e-4
"""
POLY_RIGHT = """
def find_zero(xs: list):
    low, high = -1.0, 1.0
    while poly(xs, low) * poly(xs, high) > 0:
        low, high = low * 2.0, high * 2.0
    while high - low > 1e-10:
        middle = (low + high) / 2.0
        if poly(xs, middle) * poly(xs, low) > 0:
            low = middle
        else:
            high = middle
    return low
"""
POLY_REDEFINED = "\ndef poly(xs, x):\n    return 0.0\n\n\ndef find_zero(xs: list):\n    return 0.0\n"


async def test_the_tests_call_the_tasks_own_helper_not_the_candidates(bwrap_warm: object) -> None:
    """HumanEval/32: the tests call `poly`, defined in the prompt; a candidate that redefines it to return 0 passes
    a judge that takes `poly` from the candidate, and fails one given the task's own code as `helpers`."""
    toolchain = bwrap_warm.toolchain  # type: ignore[attr-defined]
    jobs = [
        langs.python_tests_job(
            toolchain, POLY_PROMPT + code, POLY_TESTS, entry_point="find_zero", limits=LIMITS, helpers=helpers
        )
        for code, helpers in ((POLY_REDEFINED, POLY_PROMPT), (POLY_RIGHT, POLY_PROMPT), (POLY_REDEFINED, None))
    ]
    hostile, honest, without_helpers = [await bwrap_warm.run(job) for job in jobs]  # type: ignore[attr-defined]
    assert_not_passed(hostile)
    assert_passed(honest)
    assert without_helpers.status is ExecStatus.PASSED  # the hole `helpers` closes


def test_prompt_helpers_are_code_prompts_that_define_the_entry_point() -> None:
    assert langs.prompt_helpers(POLY_PROMPT, "find_zero") == POLY_PROMPT
    assert langs.prompt_helpers("Write a function to find the shared elements of two lists.", "similar") is None
    assert langs.prompt_helpers("import math\n\ndef other(x):\n    return x\n", "find_zero") is None
    assert langs.prompt_helpers(POLY_PROMPT, None) is None


async def test_the_tests_verifier_judges_with_the_tasks_own_helpers(bwrap_warm: object) -> None:
    """The wiring: `veriloop exec`'s verifier (and the agents and the judge API, through the same helper) hand the
    task's prompt to the judge, so a redefined `poly` fails through the verifier, not only through the job API."""
    from veriloop.records import Candidate, Task
    from veriloop.verifiers.tests import TestsVerifier

    task = Task(id="HumanEval/32", suite="s", prompt=POLY_PROMPT, tests=POLY_TESTS, entry_point="find_zero")
    verifier = TestsVerifier(bwrap_warm, limits=LIMITS)  # type: ignore[arg-type]
    hostile = await verifier.verify(Candidate(task_id=task.id, code=POLY_PROMPT + POLY_REDEFINED), task)
    honest = await verifier.verify(Candidate(task_id=task.id, code=POLY_PROMPT + POLY_RIGHT), task)
    assert (hostile.status.value, honest.status.value) == ("failed", "verified"), (hostile, honest)
