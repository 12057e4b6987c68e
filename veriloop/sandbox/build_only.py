"""The test program `solve --to LANG` uses when no `--tests` were given: it only builds and runs the translation.

Why: with no tests and nothing to compare against, the one honest check left is that the translation
compiles in the target language and its program starts. Each program below holds the `TOFILL` slot
the translation fills (as TransCoder's scripts do, with their usual headers) and a `main` that
reports one test, `builds_and_runs`; the verdict says the translation was not functionally checked.
`harness_job` runs exactly these programs as one program (nothing to split: no reference), which is
sound because the only claim is that the candidate built and ran, and printing the line proves that much.
"""

from __future__ import annotations

CHECK = "builds_and_runs"
_LINE = f"VERILOOP-TEST {CHECK} PASS"

BUILD_ONLY = {
    "python": f"#TOFILL\n\nif __name__ == '__main__':\n    print({_LINE!r})\n",
    "cpp": (
        "#include <bits/stdc++.h>\nusing namespace std;\n//TOFILL\n"
        f'int main() {{\n    cout << "{_LINE}" << endl;\n    return 0;\n}}\n'
    ),
    "c": (
        "#include <stdio.h>\n#include <math.h>\n#include <stdlib.h>\n#include <limits.h>\n#include <stdbool.h>\n"
        f'#include <string.h>\n//TOFILL\nint main(void) {{\n    printf("{_LINE}\\n");\n    return 0;\n}}\n'
    ),
    "java": (
        "import java.util.*;\nimport java.util.stream.*;\nimport java.lang.*;\npublic class Main {\n//TOFILL\n"
        f'public static void main(String args[]) {{\n    System.out.println("{_LINE}");\n}}\n}}\n'
    ),
    "go": f'package main\n\nimport "fmt"\n\n//TOFILL\nfunc main() {{\n\tfmt.Println("{_LINE}")\n}}\n',
    "rust": (f'#![allow(unused, non_snake_case)]\n//TOFILL\nfn main() {{\n    println!("{_LINE}");\n}}\n'),
}
"""Language -> a program with the translation's slot that prints `VERILOOP-TEST builds_and_runs PASS`."""


def build_only_program(language: str) -> str:
    """The build-and-run test program for `language` (every language F2STrans translates into has one)."""
    return BUILD_ONLY[language]


def is_build_only(language: str, harness: str) -> bool:
    """The harness is this module's build-and-run program for `language`, unchanged."""
    return BUILD_ONLY.get(language) == harness
