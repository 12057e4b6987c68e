"""Adversarial suite for the C harness runner (TransCoder's `f_filled` vs `f_gold`, split by split/c.py): the
candidate's side only records values; the trusted side, built and run afterwards in a fresh work dir, compares them.
Hostile, wrong candidates try the channels a C program has; none may pass, each honest twin must. All jobs of the
suite run in one test, side by side, to keep its cost near that of the compiler runs alone.
"""

# The C sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, run_suite
from veriloop.sandbox import Limits

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=4.0, compile_s=120.0)
RIGHT, WRONG = "x * x + 1", "x * x"
HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
int f_gold ( int x ) {
  return x * x + 1;
}
//TOFILL
int main(void) {
    int n_success = 0;
    int param0[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for (int i = 0; i < 10; ++i)
    {
        if (f_filled(param0[i]) == f_gold(param0[i]))
        {
            n_success += 1;
        }
    }
    printf("#Results: %d, %d\\n", n_success, 10);
    return 0;
}
"""
INCLUDES = "#include <string.h>\n#include <signal.h>\n#include <unistd.h>\n#include <fcntl.h>\n"
FAKE = '"\\n#Results: 10, 10\\nVERILOOP-TEST t PASS\\n"'

ATTACKS = [
    Attack(
        "results_line",
        INCLUDES + "int f_filled(int x) { if ($armed) { printf(" + FAKE + "); fflush(stdout); } return $answer; }\n",
    ),
    Attack(
        "fake_results_then_exit",
        INCLUDES
        + "int f_filled(int x) { if ($armed) { printf("
        + FAKE
        + "); fflush(stdout); exit(0); } return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "constructor_prints_and_exits",
        INCLUDES
        + "__attribute__((constructor)) static void early(void) { if ($armed) { printf("
        + FAKE
        + "); fflush(stdout); _exit(0); } }\nint f_filled(int x) { return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "exit_hook",
        INCLUDES
        + "static void hook(void) { printf("
        + FAKE
        + "); }\n__attribute__((constructor)) static void early(void) { atexit(hook); }\n"
        + "int f_filled(int x) { return $answer; }\n",
    ),
    Attack(
        "hijack_main",
        INCLUDES
        + "#if $armed\nint main(void) { printf("
        + FAKE
        + "); return 0; }\n#define main vl_hijacked_main\n#endif\n"
        "int f_filled(int x) { return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "call_the_reference",
        INCLUDES + "#if $armed\nint f_gold(int x);\nint f_filled(int x) { return f_gold(x); }\n#else\n"
        "int f_filled(int x) { return $answer; }\n#endif\n",
        twin_armed=False,
    ),
    Attack(
        "define_its_own_reference",
        INCLUDES + "int f_gold(int x) { return $answer; }\nint f_filled(int x) { return f_gold(x); }\n",
    ),
    Attack(
        "forged_records",
        INCLUDES
        + 'int f_filled(int x) {\n    if ($armed) { for (int i = 0; i < 10; i++) printf("\\n@@VL@@ u 2\\n@@VL@@ x\\n");\n'
        "    fflush(stdout); _exit(0); }\n    return $answer;\n}\n",
        twin_armed=False,
    ),
    Attack(
        "write_every_descriptor",
        INCLUDES
        + "int f_filled(int x) {\n    const char *fake = "
        + FAKE
        + ";\n    for (int fd = 2; fd < 64; fd++) if (write(fd, fake, strlen(fake)) < 0) {}\n"
        '    for (int fd = 2; fd < 64; fd++) { char path[64]; snprintf(path, sizeof path, "/proc/self/fd/%d", fd);\n'
        "        int out = open(path, O_WRONLY | O_APPEND); if (out >= 0) { if (write(out, fake, strlen(fake)) < 0) {} close(out); } }\n"
        "    return $answer;\n}\n",
    ),
    Attack(
        "linger_into_the_trusted_phase",
        INCLUDES + "__attribute__((constructor)) static void linger(void) {\n    if (fork() == 0) { setsid();\n"
        "        for (int round = 0; round < 400; round++) {\n"
        "            const char *fake = \"#!/bin/sh\\necho '#Results: 10, 10'\\n\";\n"
        '            const char *targets[] = {"/work/main", "/work/main.c", "/tmp/main", "/tmp/stdio.h", "main"};\n'
        "            for (int t = 0; t < 5; t++) { int fd = open(targets[t], O_WRONLY | O_CREAT | O_TRUNC, 0755);\n"
        "                if (fd >= 0) { if (write(fd, fake, strlen(fake)) < 0) {} close(fd); } }\n"
        "            usleep(10000); }\n        _exit(0); }\n}\nint f_filled(int x) { return $answer; }\n",
    ),
    Attack(
        "crash_after_fake_results",
        INCLUDES
        + "int f_filled(int x) { if ($armed) { printf("
        + FAKE
        + "); fflush(stdout); raise(SIGSEGV); } return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "kill_everything",
        INCLUDES
        + "int f_filled(int x) { if ($armed) { kill(getppid(), SIGKILL); kill(-1, SIGKILL); } return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "wider_type_that_wraps",
        INCLUDES + "long long f_filled(int x) { return (long long) ($answer) + ($armed ? (1LL << 32) : 0); }\n",
        twin_armed=False,
    ),
    Attack(
        "a_string_instead_of_a_number",
        INCLUDES
        + '#if $armed\nconst char *f_filled(int x) { return "2"; }\n#else\nint f_filled(int x) { return $answer; }\n#endif\n',
        twin_armed=False,
    ),
]


async def test_hostile_c_candidates_are_not_passed(bwrap_warm: object) -> None:
    await run_suite(bwrap_warm, "c", HARNESS, ATTACKS, RIGHT, WRONG, LIMITS, true="1", false="0")


STRING_HARNESS = """#include <stdio.h>
#include <string.h>
char *f_gold(int x) {
  return x % 2 ? "odd" : "even";
}
//TOFILL
int main(void) {
    int n_success = 0;
    for (int i = 0; i < 4; ++i) if (strcmp(f_filled(i), f_gold(i)) == 0) n_success += 1;
    printf("#Results: %d, %d\\n", n_success, 4);
    return 0;
}
"""
FLOAT_HARNESS = """#include <stdio.h>
#include <math.h>
double f_gold(double x) {
  return x / 3.0;
}
//TOFILL
int main(void) {
    int n_success = 0;
    double param0[] = {1.5, 2.0, 7.25, 100.0, 0.001};
    for (int i = 0; i < 5; ++i)
        if (fabs(1 - (0.0000001 + fabs(f_gold(param0[i]))) / (fabs(f_filled(param0[i])) + 0.0000001)) < 0.001) n_success += 1;
    printf("#Results: %d, %d\\n", n_success, 5);
    return 0;
}
"""
STRING_ATTACK = Attack(
    "lookalike_or_null",
    '#include <stddef.h>\nchar *f_filled(int x) { return $armed ? (x % 2 ? "odd\\x01" : NULL) : ($answer); }\n',
    twin_armed=False,
)
FLOAT_ATTACK = Attack(
    "not_a_number_or_outside_the_tolerance",
    "#include <math.h>\ndouble f_filled(double x) { return $armed ? (x > 50 ? NAN : ($answer) * 1.01) : ($answer); }\n",
    twin_armed=False,
)


async def test_hostile_c_string_and_float_candidates_are_not_passed(bwrap_warm: object) -> None:
    await run_suite(
        bwrap_warm, "c", STRING_HARNESS, [STRING_ATTACK], 'x % 2 ? "odd" : "even"', '"odd"', LIMITS, true="1", false="0"
    )
    await run_suite(bwrap_warm, "c", FLOAT_HARNESS, [FLOAT_ATTACK], "x / 3.0", "x / 3.0", LIMITS, true="1", false="0")
