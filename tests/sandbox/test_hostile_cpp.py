"""Adversarial suite for the C++ harness runner (TransCoder's `f_filled` vs `f_gold`): the candidate's side only
records values; the trusted side, built and run afterwards in a fresh work dir, compares them. Hostile, wrong
candidates try every channel; none may pass, each honest twin must. Slow: every job compiles two programs.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.sandbox.hostile import Attack, assert_not_passed, assert_passed
from veriloop.sandbox import Limits
from veriloop.sandbox import languages as langs

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=4.0, compile_s=120.0)
RIGHT, WRONG = "x * x + 1", "x * x"
HARNESS = """#include <iostream>
#include <cstdlib>
#include <string>
#include <vector>
using namespace std;
int f_gold ( int x ) {
  return x * x + 1;
}


//TOFILL

int main() {
    int n_success = 0;
    vector<int> param0 {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for(int i = 0; i < param0.size(); ++i)
    {
        if(f_filled(param0[i]) == f_gold(param0[i]))
        {
            n_success+=1;
        }
    }
    cout << "\\n#Results:" << " " << n_success << ", " << param0.size();
    return 0;
}
"""
FLOAT_HARNESS = """#include <cmath>
#include <iostream>
#include <vector>
using namespace std;
double f_gold ( double x ) {
  return x / 3.0;
}
//TOFILL
int main() {
    int n_success = 0;
    vector<double> param0 {1.5, 2.0, 7.25, 100.0, 0.001};
    for(int i = 0; i < param0.size(); ++i)
    {
        if(abs(1 - (0.0000001 + abs(f_gold(param0[i])) )/ (abs(f_filled(param0[i])) + 0.0000001)) < 0.001)
        {
            n_success+=1;
        }
    }
    cout << "\\n#Results:" << " " << n_success << ", " << param0.size();
    return 0;
}
"""
INCLUDES = "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <csignal>\n#include <unistd.h>\n"

ATTACKS = [
    Attack(
        "results_line",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) { printf("\\n#Results: 10, 10\\n"); fflush(stdout); }
    return $answer;
}
""",
    ),
    Attack(
        "verdict_lines",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) printf("\\nVERILOOP-TEST case_%d PASS\\n", x);
    return $answer;
}
""",
    ),
    Attack(
        "fake_results_then_exit",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) { printf("\\n#Results: 10, 10\\n"); fflush(stdout); exit(0); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "static_initializer",
        INCLUDES
        + """
struct Early { Early() { if ($armed) { printf("#Results: 10, 10\\n"); fflush(stdout); _exit(0); } } } early;
int f_filled(int x) { return $answer; }
""",
        twin_armed=False,
    ),
    Attack(
        "exit_hook",
        INCLUDES
        + """
static void hook() { printf("\\n#Results: 10, 10\\n"); }
struct Register { Register() { atexit(hook); at_quick_exit(hook); } } registered;
int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "hijack_main",
        INCLUDES
        + """
#if $armed
int main() { printf("#Results: 10, 10\\n"); return 0; }
#define main veriloop_hijacked_main
#endif
int f_filled(int x) { return $answer; }
""",
        twin_armed=False,
    ),
    Attack(
        "call_the_reference",
        INCLUDES
        + """
#if $armed
int f_filled(int x) { return f_gold(x); }
#else
int f_filled(int x) { return $answer; }
#endif
""",
        twin_armed=False,
    ),
    Attack(
        "declare_the_reference",
        INCLUDES
        + """
#if $armed
int f_gold(int x);
int f_filled(int x) { return f_gold(x) + 0 * ($answer); }
#else
int f_filled(int x) { return $answer; }
#endif
""",
        twin_armed=False,
    ),
    Attack(
        "define_its_own_reference",
        INCLUDES
        + """
int f_gold(int x) { return $answer; }
int f_filled(int x) { return f_gold(x); }
""",
    ),
    Attack(
        "forged_records",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) {
        for (int i = 1; i <= 10; i++) printf("\\n@@VL@@ b 1\\n@@VL@@ x\\n");
        fflush(stdout);
        _exit(0);
    }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "write_every_descriptor",
        INCLUDES
        + """
#include <fcntl.h>
int f_filled(int x) {
    const char *fake = "\\n#Results: 10, 10\\nVERILOOP-TEST t PASS\\n";
    for (int fd = 2; fd < 64; fd++) if (write(fd, fake, strlen(fake)) < 0) {}
    for (int fd = 2; fd < 64; fd++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        int out = open(path, O_WRONLY | O_APPEND);
        if (out >= 0) { if (write(out, fake, strlen(fake)) < 0) {} close(out); }
    }
    return $answer;
}
""",
    ),
    Attack(
        "read_the_sources_for_the_reference",
        INCLUDES
        + """
#include <fstream>
#include <sstream>
#include <string>
static bool leaked() {
    const char *paths[] = {"main.cpp", "/work/main.cpp", "/proc/self/exe", "/proc/1/cmdline", "/proc/self/environ"};
    for (const char *path : paths) {
        std::ifstream in(path, std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        if (text.str().find(std::string("x * x ") + "+ 1;") != std::string::npos) return true;
    }
    return false;
}
int f_filled(int x) { return leaked() ? x * x + 1 : $answer; }
""",
    ),
    Attack(
        "linger_into_the_trusted_phase",
        INCLUDES
        + """
#include <fcntl.h>
#include <dirent.h>
struct Linger {
    Linger() {
        if (fork() == 0) {
            setsid();
            for (int round = 0; round < 400; round++) {
                const char *fake = "#!/bin/sh\\necho '#Results: 10, 10'\\n";
                const char *targets[] = {"/work/main", "/work/main.cpp", "/tmp/main", "main"};
                for (const char *target : targets) {
                    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0755);
                    if (fd >= 0) { if (write(fd, fake, strlen(fake)) < 0) {} close(fd); }
                }
                usleep(10000);
            }
            _exit(0);
        }
    }
} linger;
int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "plant_files_for_the_trusted_build",
        INCLUDES
        + """
#include <fcntl.h>
#include <sys/stat.h>
static void plant(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { if (write(fd, text, strlen(text)) < 0) {} close(fd); }
}
struct Plant {
    Plant() {
        mkdir("/tmp/bits", 0755);
        const char *fake = "int main() { __builtin_printf(\\"#Results: 10, 10\\\\n\\"); }\\n";
        plant("/tmp/iostream", fake);
        plant("/tmp/bits/stdc++.h", fake);
        plant("/work/iostream", fake);
        plant("/work/vector", fake);
        plant("/work/main.cpp", fake);
    }
} planted;
int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "huge_output",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) for (int i = 0; i < (8 << 20) / 18; i++) fputs("#Results: 10, 10\\n", stdout);
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "sleep_past_the_limit",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) sleep(60);
    return $answer;
}
""",
        twin_armed=False,
        slow=True,
    ),
    Attack(
        "crash_after_fake_results",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) { printf("\\n#Results: 10, 10\\n"); fflush(stdout); raise(SIGSEGV); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "kill_everything",
        INCLUDES
        + """
int f_filled(int x) {
    if ($armed) { kill(getppid(), SIGKILL); kill(-1, SIGKILL); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "always_equal_type",
        INCLUDES
        + """
struct Anything {
    int value;
    template <class T> bool operator==(const T &) const { return true; }
    operator int() const { return 0; }
};
#if $armed
Anything f_filled(int x) { return Anything{$answer}; }
#else
int f_filled(int x) { return $answer; }
#endif
""",
        twin_armed=False,
    ),
    Attack(
        "wider_type_that_wraps",
        INCLUDES
        + """
long long f_filled(int x) { return (long long) ($answer) + ($armed ? (1LL << 32) : 0); }
""",
        twin_armed=False,
    ),
    Attack(
        "throw_after_fake_results",
        INCLUDES
        + """
#include <stdexcept>
int f_filled(int x) {
    if ($armed) { printf("\\n#Results: 10, 10\\n"); fflush(stdout); throw std::runtime_error("x"); }
    return $answer;
}
""",
        twin_armed=False,
    ),
]

FLOAT_ATTACKS = [
    Attack(
        "not_a_number",
        "#include <cmath>\ndouble f_filled(double x) { return $armed ? NAN : $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "just_outside_the_tolerance",
        "double f_filled(double x) { return ($answer) * ($armed ? 1.01 : 1.000001); }\n",
        twin_armed=False,
    ),
    Attack(
        "float_instead_of_double",
        "float f_filled(double x) { return (float) ($answer) * ($armed ? 1.5f : 1.0f); }\n",
        twin_armed=False,
    ),
]


def _ids(attacks: list[Attack]) -> list[object]:
    return [pytest.param(a, id=a.name, marks=[pytest.mark.slow] if a.slow else []) for a in attacks]


async def _check(sandbox: object, attack: Attack, harness: str, right: str, wrong: str) -> None:
    if not langs.available("cpp", sandbox.toolchain):  # type: ignore[attr-defined]
        pytest.skip("g++ is not installed here (scripts/setup-sandbox.sh installs it)")
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    hostile = langs.harness_job("cpp", toolchain, attack.hostile(wrong, "true"), harness, limits=LIMITS)
    honest = langs.harness_job("cpp", toolchain, attack.honest(right, "true", "false"), harness, limits=LIMITS)
    bad, good = await asyncio.gather(sandbox.run(hostile), sandbox.run(honest))  # type: ignore[attr-defined]
    assert_not_passed(bad)
    assert_passed(good)


@pytest.mark.parametrize("attack", _ids(ATTACKS))
async def test_hostile_cpp_candidate_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    await _check(bwrap_warm, attack, HARNESS, RIGHT, WRONG)


@pytest.mark.parametrize("attack", _ids(FLOAT_ATTACKS))
async def test_hostile_cpp_float_candidate_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    await _check(bwrap_warm, attack, FLOAT_HARNESS, "x / 3.0", "x / 3.0")


async def test_cold_sandbox_runs_the_trusted_phase_too(bwrap_cold: object) -> None:
    attack = next(a for a in ATTACKS if a.name == "linger_into_the_trusted_phase")
    await _check(bwrap_cold, attack, HARNESS, RIGHT, WRONG)
