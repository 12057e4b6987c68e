"""Adversarial suite for the Go harness runner (TransCoder's `f_filled` vs `f_gold`, split by split/go.py): hostile,
wrong candidates try the channels a Go program has; none may pass, each honest twin must. The whole suite is one
batch of jobs. Slow: every job builds two programs with an empty Go build cache. Skipped where go is not installed
(scripts/setup-sandbox.sh installs golang-go where the distribution has it).
"""

# The Go sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, run_suite
from veriloop.sandbox import Limits

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=4.0, compile_s=120.0)
RIGHT, WRONG = "x*x + 1", "x * x"
HARNESS = """package main

import (
\t"fmt"
\t"math"
\t"os"
)

func f_gold(x int) int {
\treturn int(math.Abs(float64(x*x + 1)))
}
//TOFILL
func main() {
\tvar (
\t\tn_success int   = 0
\t\tparam0    []int = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
\t)
\tfor i := int(0); i < len(param0[:]); i++ {
\t\tif f_filled(param0[i]) == f_gold(param0[i]) {
\t\t\tn_success += 1
\t\t}
\t}
\tfmt.Print("#Results:", " ", n_success, ", ", len(param0[:]))
\tos.Exit(0)
}
"""
FAKE = '"\\n#Results: 10, 10\\nVERILOOP-TEST t PASS\\n"'

ATTACKS = [
    Attack(
        "results_line",
        "func f_filled(x int) int {\n\tif $armed {\n\t\tfmt.Print(" + FAKE + ")\n\t}\n\treturn $answer\n}\n",
    ),
    Attack(
        "fake_results_then_exit",
        "func f_filled(x int) int {\n\tif $armed {\n\t\tfmt.Print("
        + FAKE
        + ")\n\t\tos.Exit(0)\n\t}\n\treturn $answer\n}\n",
        twin_armed=False,
    ),
    Attack(
        "init_prints_and_exits",
        "func init() {\n\tif $armed {\n\t\tfmt.Print(" + FAKE + ")\n\t\tos.Exit(0)\n\t}\n}\n"
        "func f_filled(x int) int { return $answer }\n",
        twin_armed=False,
    ),
    Attack(
        "panic_after_fake_results",
        "func f_filled(x int) int {\n\tif $armed {\n\t\tfmt.Print("
        + FAKE
        + ')\n\t\tpanic("done")\n\t}\n\treturn $answer\n}\n',
        twin_armed=False,
    ),
    Attack(
        "call_the_reference",
        "func f_filled(x int) int {\n\tif $armed {\n\t\treturn f_gold(x)\n\t}\n\treturn $answer\n}\n",
        twin="func f_filled(x int) int { return $answer }\n",
    ),
    Attack(
        "define_its_own_reference",
        "func f_gold(x int) int { return $answer }\nfunc f_filled(x int) int { return f_gold(x) }\n",
    ),
    Attack(
        "forged_records",
        "func f_filled(x int) int {\n\tif $armed {\n\t\tfor i := 0; i < 10; i++ {\n"
        '\t\t\tfmt.Print("\\n@@VL@@ u 2\\n@@VL@@ x\\n")\n\t\t}\n\t\tos.Exit(0)\n\t}\n\treturn $answer\n}\n',
        twin_armed=False,
    ),
    Attack(
        "write_every_descriptor",
        "func f_filled(x int) int {\n\tfor fd := 2; fd < 64; fd++ {\n"
        '\t\tif out, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_WRONLY|os.O_APPEND, 0); err == nil {\n'
        "\t\t\tout.WriteString(" + FAKE + ")\n\t\t\tout.Close()\n\t\t}\n\t}\n\treturn $answer\n}\n",
    ),
    Attack(
        "plant_files_for_the_trusted_build",
        "func init() {\n"
        '\tfor _, target := range []string{"/work/main.go", "/tmp/main.go", "/tmp/go-cache/README", "/tmp/go/src/fmt/print.go"} {\n'
        '\t\tos.WriteFile(target, []byte("package main\\nfunc main() { println(\\"#Results: 10, 10\\") }\\n"), 0o644)\n'
        "\t}\n}\nfunc f_filled(x int) int { return $answer }\n",
    ),
    Attack(
        "wider_type_that_wraps",
        "func f_filled(x int) int64 { return int64($answer) + 1<<40 }\n",
        twin="func f_filled(x int) int { return $answer }\n",
    ),
]


async def test_hostile_go_candidates_are_not_passed(bwrap_warm: object) -> None:
    await run_suite(bwrap_warm, "go", HARNESS, ATTACKS, RIGHT, WRONG, LIMITS)
