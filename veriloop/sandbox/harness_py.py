"""Python test harness, copied into the job as main.py: solution + assert-style tests, one outcome per assert.

Standard library only (it runs inside the sandbox). HumanEval style (`def check(candidate): assert ...` plus an
entry point) and MBPP style (top-level asserts) both work: every `assert` statement is one test, other
statements are set-up run in order. Each test's outcome is appended to RESULTS as one JSON line as soon as it is
known (one write, no rewrite of the file), so a later timeout keeps them; a last `{"complete": true}` line ends it.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import sys
import traceback
from typing import Any

RESULTS = ".veriloop-results.json"
SOLUTION = "solution.py"
TESTS = "tests.py"


def find_check(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args:
            return node
    return None


def check_call_target(tree: ast.Module) -> str | None:
    """`check(name)` at top level names the entry point."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Name) and call.func.id == "check" and call.args:
                arg = call.args[0]
                if isinstance(arg, ast.Name):
                    return arg.id
    return None


def is_check_call(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
    )


def plan(tests: str, entry_point: str | None) -> tuple[list[ast.stmt], list[ast.stmt], str | None, str | None]:
    """(top-level set-up, test body, check's parameter name, entry point) for a test file."""
    tree = ast.parse(tests, TESTS)
    check = find_check(tree)
    entry = entry_point or check_call_target(tree)
    if check is not None and entry:
        setup = [node for node in tree.body if not is_check_call(node)]
        return setup, list(check.body), check.args.args[0].arg, entry
    return [], list(tree.body), None, None


def count_tests(tests: str, entry_point: str | None = None) -> int:
    """How many tests the harness will report for this test file (the host checks the count)."""
    _, body, _, _ = plan(tests, entry_point)
    return sum(isinstance(node, ast.Assert) for node in body)


def _status(word: str) -> None:
    with contextlib.suppress(OSError):
        os.write(3, f"{word}\n".encode())


class Results:
    """The results file, opened once and appended to line by line."""

    def __init__(self) -> None:
        self.fd = os.open(RESULTS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def add(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode()
        try:
            os.write(self.fd, data)
        except OSError:  # the solution closed or replaced the descriptor: reopen and go on
            self.fd = os.open(RESULTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            os.write(self.fd, data)


def main(argv: list[str]) -> int:
    entry_point = argv[1] if len(argv) > 1 and argv[1] else None
    with open(SOLUTION) as handle:
        solution = handle.read()
    with open(TESTS) as handle:
        tests = handle.read()
    try:
        compiled = compile(solution, SOLUTION, "exec")
    except SyntaxError:
        traceback.print_exc(limit=0)
        _status("syntax_error")
        return 1
    namespace: dict[str, Any] = {"__name__": "__solution__", "__builtins__": __builtins__}
    results = Results()
    exec(compiled, namespace)  # an exception here is the program's runtime error
    setup, body, parameter, entry = plan(tests, entry_point)
    lines = tests.splitlines()
    for node in setup:
        exec(compile(ast.Module([node], []), TESTS, "exec"), namespace)
    if parameter is not None and entry is not None:
        if entry not in namespace:
            raise NameError(f"the solution does not define {entry!r}")
        namespace[parameter] = namespace[entry]
    outcomes: list[dict[str, Any]] = []
    for node in body:
        code = compile(ast.Module([node], []), TESTS, "exec")
        if not isinstance(node, ast.Assert):
            exec(code, namespace)
            continue
        source = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)]).strip()
        name = f"test_{len(outcomes) + 1}:line{node.lineno}"
        try:
            exec(code, namespace)
            outcomes.append({"name": name, "passed": True, "message": ""})
        except AssertionError as exc:
            detail = f": {exc}" if str(exc) else ""
            outcomes.append({"name": name, "passed": False, "message": f"AssertionError{detail} in {source}"})
        except Exception as exc:  # a crashing test is a failed test, with its traceback
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
            outcomes.append({"name": name, "passed": False, "message": f"{source}\n{trace}"})
        results.add(outcomes[-1])
    results.add({"complete": True})
    failed = [outcome for outcome in outcomes if not outcome["passed"]]
    for outcome in failed:
        sys.stderr.write(f"FAILED {outcome['name']}: {outcome['message']}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
