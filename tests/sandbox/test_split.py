"""Fast checks of the split of test programs (no compiler runs): what each side holds, and which programs are refused
unless the caller trusts their output. The hostile suites (test_hostile_{c,go,rust,js,cpp,java}.py) run the sides."""

from __future__ import annotations

import pytest

from veriloop.errors import ConfigError
from veriloop.sandbox import languages as langs
from veriloop.sandbox import split
from veriloop.sandbox.base import Toolchain

TOOLCHAIN = Toolchain(
    paths={tool: f"/usr/bin/{tool}" for tool in ("gcc", "g++", "javac", "java", "node", "rustc", "go", "python")}
)
C = """#include <stdio.h>
int f_gold(int x) { return x * x + 1; }
//TOFILL
int main(void) {
    int n = 0;
    for (int i = 0; i < 3; i++) if (f_filled(i) == f_gold(i)) n++;
    printf("#Results: %d, %d\\n", n, 3); /* f_filled(9) in a comment */
}
"""
GO = """package main

import (
\t"fmt"
\t"math"
\t"os"
)

func f_gold(x float64) float64 {
\treturn math.Sqrt(x)
}
//TOFILL
func main() {
\tn := 0
\tfor i := 0; i < 3; i++ {
\t\tif f_filled(float64(i)) == f_gold(float64(i)) {
\t\t\tn++
\t\t}
\t}
\tfmt.Print("#Results: ", n, ", ", 3)
\tos.Exit(0)
}
"""
RUST = """pub unsafe fn f_gold(mut x: i32,
                     y: i32) -> u32 {
    (x + y) as u32
}
//TOFILL
fn main() {
    let mut n = 0;
    for i in 0..3 { if unsafe { f_filled(i, 1) == f_gold(i, 1) } { n += 1; } }
    println!("#Results: {}, {}", n, 3);
}
"""
JS = """function f_gold(x) { return [x, -0]; }
//TOFILL
let n = 0;
for (let i = 0; i < 3; i++) if (JSON.stringify(f_filled(i)) === JSON.stringify(f_gold(i))) n++;
console.log("#Results: " + n + ", 3");
"""
CANDIDATES = {
    "c": "int f_filled(int x) { return CANDIDATE_BODY; }",
    "go": "func f_filled(x float64) float64 { return CANDIDATE_BODY }",
    "rust": "unsafe fn f_filled(x: i32, y: i32) -> u32 { CANDIDATE_BODY }",
    "javascript": "function f_filled(x) { return CANDIDATE_BODY; }",
}
PROGRAMS = {"c": C, "go": GO, "rust": RUST, "javascript": JS}


@pytest.mark.parametrize("language", list(PROGRAMS))
def test_each_side_holds_only_its_own_code(language: str) -> None:
    candidate, trusted = split.split(language, CANDIDATES[language], PROGRAMS[language])
    candidate, trusted = (side.replace("/* f_filled(9) in a comment */", "") for side in (candidate, trusted))
    reference = PROGRAMS[language].split("//TOFILL")[0].split("\n")[-2]  # the line that ends f_gold
    assert "CANDIDATE_BODY" in candidate and "CANDIDATE_BODY" not in trusted
    assert "f_gold" not in candidate and "f_gold(" in trusted and reference in trusted
    assert "f_filled" not in trusted.replace("of f_filled", "")
    assert "#Results" in trusted and "@@VL@@" in candidate and "@@VL@@" in trusted
    assert candidate.count("f_filled(") == 2  # the definition and the one call, wrapped by the recorder


def test_c_calls_in_comments_and_literals_are_left_alone() -> None:
    candidate, trusted = split.split("c", CANDIDATES["c"], C)
    assert "/* f_filled(9) in a comment */" in candidate and "vl_rec(f_filled(i))" in candidate
    assert "typedef int vl_gold_t;" in trusted and "if (vl_take() == f_gold(i))" in trusted


def test_go_keeps_every_import_used_and_types_the_take() -> None:
    candidate, trusted = split.split("go", CANDIDATES["go"], GO)
    assert "var _ = math.Abs" in candidate and "(*new(float64))" in candidate
    assert "vlTake[float64](float64(i))" in trusted
    assert candidate.startswith("package main\nimport (\n\tvl_fmt")


def test_rust_reads_a_return_type_across_lines() -> None:
    _, trusted = split.split("rust", CANDIDATES["rust"], RUST)
    assert "vl_take::<u32>() == f_gold(i, 1)" in trusted


@pytest.mark.parametrize(
    ("language", "program", "why"),
    [
        ("c", "#include <stdio.h>\nvoid f_gold(int a[]) { a[0] = 1; }\n//TOFILL\nint main(void) {}\n", "void"),
        ("c", "struct P { int x; };\nstruct P f_gold(int x) { struct P p = {x}; return p; }\n//TOFILL\n", "struct P"),
        ("go", "package main\nfunc f_gold(a []int) {\n}\n//TOFILL\nfunc main() {}\n", "returns nothing"),
        ("go", 'package main\nimport "regexp"\nfunc f_gold() int {\n}\n//TOFILL\n', "regexp"),
        ("rust", "fn f_gold(a: &mut [i32]) {\n}\n//TOFILL\nfn main() {}\n", "returns nothing"),
        ("rust", "fn f_gold(a: &[i32]) -> Vec<i32> {\n}\n//TOFILL\n", "Vec<i32>"),
        ("javascript", "//TOFILL\nconsole.log('VERILOOP-TEST a ' + (f(1) === 2 ? 'PASS' : 'FAIL'));\n", "f_gold"),
        ("cpp", "void f_gold(int a[]) { a[0] = 1; }\n//TOFILL\nint main() {}\n", "void"),
        ("java", "class A {\nstatic void f_gold(int[] a) {}\n//TOFILL\n}\n", "void"),
    ],
)
def test_unsplittable_programs_are_refused_unless_their_output_is_trusted(
    language: str, program: str, why: str
) -> None:
    code = "int f_filled() { return 0; }"
    assert not split.splittable(language, program) and why in (split.refusal(language, program) or "")
    with pytest.raises(ConfigError, match="trust_program_output=True") as refused:
        langs.harness_job(language, TOOLCHAIN, code, program)
    assert why in str(refused.value)
    trusting = langs.harness_job(language, TOOLCHAIN, code, program, trust_program_output=True)
    assert trusting.trusted is None and any(code in text for text in trusting.files.values())


def test_python_test_programs_need_no_split() -> None:
    job = langs.harness_job("python", TOOLCHAIN, "def f(x):\n    return x\n", "#TOFILL\nprint('#Results: 1, 1')\n")
    assert any(step.judge for step in job.steps)


@pytest.mark.parametrize("language", list(PROGRAMS))
def test_split_jobs_run_the_trusted_side_in_their_own_phase(language: str) -> None:
    job = langs.harness_job(language, TOOLCHAIN, CANDIDATES[language], PROGRAMS[language])
    assert job.trusted is not None and job.trusted.steps[-1].stdin_from == "candidate"
    trusted_text = "".join(job.trusted.files.values())
    assert "CANDIDATE_BODY" not in trusted_text and "CANDIDATE_BODY" in "".join(job.files.values())


@pytest.mark.parametrize("language", ["c", "cpp", "java", "rust", "go"])
def test_only_the_unchanged_build_only_program_runs_without_a_reference(language: str) -> None:
    """`solve --to` without tests: the build-and-run program may run unsplit (its one claim is that the candidate
    built and ran); the same program with anything added is refused like any other program without `f_gold`."""
    from veriloop.sandbox.build_only import build_only_program

    program = build_only_program(language)
    job = langs.harness_job(language, TOOLCHAIN, "int twice(int x) { return 2 * x; }", program)
    assert job.language == language
    with pytest.raises(ConfigError, match="trust_program_output=True"):
        langs.harness_job(language, TOOLCHAIN, "", program.replace("builds_and_runs", "all_tests"))
