"""Every language passes, fails and fails to compile on bwrap and Docker; the Python and harness test runners."""

from __future__ import annotations

import pytest

from veriloop.records import ExecStatus
from veriloop.sandbox import Limits, StdioCase
from veriloop.sandbox import languages as langs

BACKENDS = ["bwrap_warm", pytest.param("docker", marks=pytest.mark.docker)]
CASES = [StdioCase(name="three", stdin="3\n", expected="6"), StdioCase(name="five", stdin="5", expected="10\n")]
LIMITS = Limits(wall_s=10.0, compile_s=60.0)

# (doubling program, tripling program, program that does not compile)
PROGRAMS = {
    "python": ("n = int(input())\nprint(n * 2)\n", "n = int(input())\nprint(n * 3)\n", "def f(:\n"),
    "c": (
        '#include <stdio.h>\nint main(){int n; scanf("%d", &n); printf("%d\\n", n * 2); return 0;}\n',
        '#include <stdio.h>\nint main(){int n; scanf("%d", &n); printf("%d\\n", n * 3); return 0;}\n',
        "int main({\n",
    ),
    "cpp": (
        '#include <iostream>\nint main(){int n; std::cin >> n; std::cout << n * 2 << "\\n";}\n',
        '#include <iostream>\nint main(){int n; std::cin >> n; std::cout << n * 3 << "\\n";}\n',
        "int main({\n",
    ),
    "java": (
        "import java.util.*;\npublic class Main { public static void main(String[] a) {"
        " System.out.println(new Scanner(System.in).nextInt() * 2); } }\n",
        "import java.util.*;\npublic class Main { public static void main(String[] a) {"
        " System.out.println(new Scanner(System.in).nextInt() * 3); } }\n",
        "public class Main { void x( }\n",
    ),
    "javascript": (
        'const n = parseInt(require("fs").readFileSync(0, "utf8")); console.log(n * 2);\n',
        'const n = parseInt(require("fs").readFileSync(0, "utf8")); console.log(n * 3);\n',
        "function ( {\n",
    ),
    "rust": (
        "use std::io::*;\nfn main(){let mut s=String::new();stdin().read_line(&mut s).unwrap();"
        'let n:i64=s.trim().parse().unwrap();println!("{}",n*2);}\n',
        "use std::io::*;\nfn main(){let mut s=String::new();stdin().read_line(&mut s).unwrap();"
        'let n:i64=s.trim().parse().unwrap();println!("{}",n*3);}\n',
        'fn main() { let x: i32 = "a"; }\n',
    ),
    "go": (
        'package main\nimport "fmt"\nfunc main() { var n int\nfmt.Scan(&n)\nfmt.Println(n * 2) }\n',
        'package main\nimport "fmt"\nfunc main() { var n int\nfmt.Scan(&n)\nfmt.Println(n * 3) }\n',
        "package main\nfunc main() { x := }\n",
    ),
}


def _available(sandbox: object, name: str) -> None:
    if not langs.available(name, sandbox.toolchain):  # type: ignore[attr-defined]
        pytest.skip(f"{name} toolchain not installed here (scripts/setup-sandbox.sh installs it)")


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_language_pass_fail_compile_error(sandbox: object, name: str) -> None:
    _available(sandbox, name)
    good, bad, broken = PROGRAMS[name]
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    passed = await sandbox.run(langs.stdio_job(name, toolchain, good, CASES, limits=LIMITS))  # type: ignore[attr-defined]
    assert passed.status is ExecStatus.PASSED, passed
    assert [t.passed for t in passed.tests] == [True, True]
    failed = await sandbox.run(langs.stdio_job(name, toolchain, bad, CASES, limits=LIMITS))  # type: ignore[attr-defined]
    assert failed.status is ExecStatus.FAILED, failed
    assert [t.passed for t in failed.tests] == [False, False]
    assert "expected '6', got '9" in failed.tests[0].message
    broken_result = await sandbox.run(langs.stdio_job(name, toolchain, broken, CASES, limits=LIMITS))  # type: ignore[attr-defined]
    assert broken_result.status is ExecStatus.COMPILE_ERROR, broken_result
    assert broken_result.stderr.strip(), "the compiler's message is kept"


HUMANEVAL_TESTS = """
METADATA = {}

def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(2, 2) == 4
    x = 10
    assert candidate(x, -x) == 0
    assert candidate(5, 5) == 11
"""


@pytest.mark.parametrize("sandbox", ["bwrap_warm", "bwrap_cold"], indirect=True)
async def test_humaneval_style_tests_report_each_assert(sandbox: object) -> None:
    job = langs.python_tests_job(
        sandbox.toolchain,
        "def add(a, b):\n    return a + b\n",
        HUMANEVAL_TESTS,
        entry_point="add",  # type: ignore[attr-defined]
    )
    result = await sandbox.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.FAILED
    assert [t.passed for t in result.tests] == [True, True, True, False]
    assert "candidate(5, 5) == 11" in result.tests[3].message


async def test_mbpp_style_asserts_pass(bwrap_warm: object) -> None:
    tests = "assert square(3) == 9\nassert square(-2) == 4\n"
    job = langs.python_tests_job(bwrap_warm.toolchain, "def square(x):\n    return x * x\n", tests)  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.PASSED, result
    assert len(result.tests) == 2 and all(t.passed for t in result.tests)


async def test_crashing_test_carries_its_traceback(bwrap_warm: object) -> None:
    tests = "assert f(1) == 1\nassert f(0) == 0\n"
    job = langs.python_tests_job(bwrap_warm.toolchain, "def f(x):\n    return 1 // x\n", tests)  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.FAILED
    assert result.tests[0].passed and not result.tests[1].passed
    assert "ZeroDivisionError" in result.tests[1].message and "Traceback" in result.tests[1].message


async def test_solution_that_crashes_on_import_is_a_runtime_error(bwrap_warm: object) -> None:
    job = langs.python_tests_job(bwrap_warm.toolchain, "raise ValueError('boom')\n", "assert True\n")  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.RUNTIME_ERROR
    assert "ValueError: boom" in result.stderr


async def test_solution_syntax_error_is_a_compile_error(bwrap_warm: object) -> None:
    job = langs.python_tests_job(bwrap_warm.toolchain, "def f(:\n", "assert f(1)\n")  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.COMPILE_ERROR
    assert "SyntaxError" in result.stderr


async def test_exiting_early_does_not_pass(bwrap_warm: object) -> None:
    code = "import os\nos._exit(0)\n"
    job = langs.python_tests_job(bwrap_warm.toolchain, code, "assert False\n")  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.FAILED


CPP_HARNESS = """#include <iostream>
int f_gold(int x) { return x == 4 ? 9 : 2 * x; }
//TOFILL
int main() {
    int cases[] = {1, 3, 4};
    for (int i = 0; i < 3; i++) {
        bool ok = f_filled(cases[i]) == f_gold(cases[i]);
        std::cout << "VERILOOP-TEST case" << i << (ok ? " PASS" : " FAIL got another value") << std::endl;
    }
}
"""


async def test_cpp_harness_for_translation_tasks(bwrap_warm: object) -> None:
    _available(bwrap_warm, "cpp")
    job = langs.harness_job("cpp", bwrap_warm.toolchain, "int f_filled(int x) { return 2 * x; }", CPP_HARNESS)  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.FAILED, result
    assert [t.passed for t in result.tests] == [True, True, False]


async def test_transcoder_results_line(bwrap_warm: object) -> None:
    harness = "#TOFILL\nok = sum(f_filled(i) == i + 1 for i in range(4))\nprint(f'#Results: {ok}, 4')\n"
    job = langs.harness_job("python", bwrap_warm.toolchain, "def f_filled(x):\n    return x + 1\n", harness)  # type: ignore[attr-defined]
    result = await bwrap_warm.run(job)  # type: ignore[attr-defined]
    assert result.status is ExecStatus.PASSED, result
    assert len(result.tests) == 4


@pytest.mark.parametrize("sandbox", ["bwrap_warm", pytest.param("docker", marks=pytest.mark.docker)], indirect=True)
async def test_warm_jobs_see_nothing_of_earlier_jobs(sandbox: object) -> None:
    first = (
        "import json, os\njson.leaked = 1\nopen('/tmp/left-behind', 'w').write('x')\nopen('mine', 'w').write('x')\n"
        "secret = 'job-one-secret'\nprint(secret)\n"
    )
    second = (
        "import json, os, gc\nprint(hasattr(json, 'leaked'), os.path.exists('/tmp/left-behind'),"
        " sorted(os.listdir('.')), any('job-one-secret' in repr(o) for o in gc.get_objects() if isinstance(o, str)))\n"
    )
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    for _ in range(2):
        one = await sandbox.run(langs.program_job("python", toolchain, first))  # type: ignore[attr-defined]
        assert one.status is ExecStatus.PASSED, one
        two = await sandbox.run(langs.program_job("python", toolchain, second))  # type: ignore[attr-defined]
        assert two.status is ExecStatus.PASSED, two
        assert two.stdout.strip() == "False False ['main.py'] False"


async def test_deterministic_environment(bwrap_warm: object) -> None:
    code = "import os\nenv = os.environ\nprint(env['TZ'], env['PYTHONHASHSEED'], env['OMP_NUM_THREADS'], hash('a'))\n"
    results = [await bwrap_warm.run(langs.program_job("python", bwrap_warm.toolchain, code)) for _ in range(2)]  # type: ignore[attr-defined]
    assert results[0].stdout == results[1].stdout
    assert results[0].stdout.startswith("UTC 0 1 ")


async def test_nonzero_exit_is_a_runtime_error(bwrap_cold: object) -> None:
    result = await bwrap_cold.run(langs.program_job("python", bwrap_cold.toolchain, "import sys\nsys.exit(4)\n"))  # type: ignore[attr-defined]
    assert result.status is ExecStatus.RUNTIME_ERROR
    assert result.exit_code == 4
    assert result.sandbox == "bwrap" and result.sandbox_version
