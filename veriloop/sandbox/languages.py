"""Per-language toolchains: file names, compile and run commands, and jobs for the three kinds of tests.

(a) a Python function plus assert-style tests (HumanEval / MBPP), (b) stdin/stdout cases for every language,
(c) a per-language harness (a test program with the candidate pasted in, TransCoder style) for translation tasks.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from veriloop.errors import ConfigError
from veriloop.sandbox import build_only, split
from veriloop.sandbox.base import Toolchain
from veriloop.sandbox.inside import harness_py
from veriloop.sandbox.job import Checks, Job, Limits, Phase, StdioCase, Step

Argv = Callable[[Toolchain, str, Limits], list[str]]


def _tool(toolchain: Toolchain, name: str) -> str:
    path = toolchain.path(name)
    if path is None:
        raise ConfigError(f"{name} is not available in this sandbox")
    return path


@dataclass(frozen=True)
class Language:
    """How to build and run one language; `tools` must all be present for it to be available."""

    name: str
    extension: str
    tools: tuple[str, ...]
    run: Argv
    compile: Argv | None = None
    python: bool = False
    env: tuple[tuple[str, str], ...] = ()

    def source_name(self, code: str) -> str:
        if self.name == "java":
            match = re.search(r"public\s+(?:final\s+|abstract\s+)*class\s+([A-Za-z_]\w*)", code)
            return f"{match.group(1) if match else 'Main'}.java"
        return f"main.{self.extension}"


def _java_flags(limits: Limits) -> list[str]:
    return ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-XX:MaxRAM={limits.memory_mb}m", "-Xss16m"]


GO_ENV = (
    ("GOCACHE", "/tmp/go-cache"),
    ("GOPATH", "/tmp/go"),
    ("CGO_ENABLED", "0"),
    ("GO111MODULE", "off"),
    ("GOTOOLCHAIN", "local"),
    ("GOFLAGS", "-buildvcs=false"),
)

LANGUAGES: dict[str, Language] = {
    "python": Language("python", "py", ("python",), run=lambda t, f, _: [_tool(t, "python"), f], python=True),
    "c": Language(
        "c",
        "c",
        ("gcc",),
        compile=lambda t, f, _: [_tool(t, "gcc"), "-O2", "-std=gnu17", "-o", "main", f, "-lm"],
        run=lambda t, f, _: ["./main"],
    ),
    "cpp": Language(
        "cpp",
        "cpp",
        ("g++",),
        compile=lambda t, f, _: [_tool(t, "g++"), "-O2", "-std=gnu++17", "-o", "main", f],
        run=lambda t, f, _: ["./main"],
    ),
    "java": Language(
        "java",
        "java",
        ("javac", "java"),
        compile=lambda t, f, lim: [
            _tool(t, "javac"),
            *[f"-J{flag}" for flag in _java_flags(lim)],
            "-encoding",
            "UTF-8",
            "-d",
            ".",
            f,
        ],
        run=lambda t, f, lim: [_tool(t, "java"), *_java_flags(lim), "-cp", ".", Path(f).stem],
    ),
    "javascript": Language(
        "javascript",
        "js",
        ("node",),
        compile=lambda t, f, _: [_tool(t, "node"), "--check", f],
        run=lambda t, f, _: [_tool(t, "node"), f],
    ),
    "rust": Language(
        "rust",
        "rs",
        ("rustc",),
        compile=lambda t, f, _: [_tool(t, "rustc"), "--edition", "2021", "-C", "opt-level=1", "-o", "main", f],
        run=lambda t, f, _: ["./main"],
    ),
    "go": Language(
        "go",
        "go",
        ("go",),
        compile=lambda t, f, _: [_tool(t, "go"), "build", "-o", "main", f],
        run=lambda t, f, _: ["./main"],
        env=(
            ("GOCACHE", "/tmp/go-cache"),
            ("GOPATH", "/tmp/go"),
            ("CGO_ENABLED", "0"),
            ("GO111MODULE", "off"),
            ("GOTOOLCHAIN", "local"),
            ("GOFLAGS", "-buildvcs=false"),
        ),
    ),
}

ALIASES = {"py": "python", "c++": "cpp", "js": "javascript", "node": "javascript", "rs": "rust", "golang": "go"}


def language(name: str) -> Language:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LANGUAGES:
        raise ConfigError(f"unknown language {name!r}; choose one of: {', '.join(LANGUAGES)}")
    return LANGUAGES[key]


def available(name: str, toolchain: Toolchain) -> bool:
    return toolchain.has(*language(name).tools)


def _require(lang: Language, toolchain: Toolchain) -> None:
    missing = [tool for tool in lang.tools if not toolchain.has(tool)]
    if missing:
        raise ConfigError(f"language {lang.name} is unavailable here: {', '.join(missing)} not found")


def _base(lang: Language, toolchain: Toolchain, code: str, limits: Limits) -> tuple[str, list[Step], dict[str, str]]:
    _require(lang, toolchain)
    source = lang.source_name(code)
    steps = []
    if lang.compile is not None:
        steps.append(Step(name="compile", kind="compile", argv=lang.compile(toolchain, source, limits)))
    return source, steps, dict(lang.env)


def program_job(
    name: str, toolchain: Toolchain, code: str, *, stdin: str | None = None, limits: Limits | None = None
) -> Job:
    """Compile (where the language compiles) and run a program once."""
    lang, limits = language(name), limits or Limits()
    source, steps, env = _base(lang, toolchain, code, limits)
    steps.append(Step(name="run", argv=lang.run(toolchain, source, limits), stdin=stdin, python=lang.python))
    return Job(files={source: code}, steps=steps, env=env, limits=limits, language=lang.name)


def stdio_job(
    name: str, toolchain: Toolchain, code: str, cases: Sequence[StdioCase], *, limits: Limits | None = None
) -> Job:
    """(b) Compile once, then one run per case with its stdin; stdout is compared with the expected text. No case is
    a ConfigError: a job with nothing to compare would pass any program."""
    if not cases:
        raise ConfigError("no stdin/stdout cases: there is no test to pass")
    lang, limits = language(name), limits or Limits()
    source, steps, env = _base(lang, toolchain, code, limits)
    run = lang.run(toolchain, source, limits)
    for case in cases:
        steps.append(Step(name=case.name, argv=run, stdin=case.stdin, python=lang.python))
    return Job(
        files={source: code},
        steps=steps,
        env=env,
        limits=limits,
        language=lang.name,
        checks=Checks(kind="stdio", cases=list(cases)),
    )


def python_tests_job(
    toolchain: Toolchain,
    code: str,
    tests: str,
    *,
    entry_point: str | None = None,
    limits: Limits | None = None,
    helpers: str | None = None,
) -> Job:
    """(a) A Python solution plus assert-style tests (HumanEval `check(candidate)` or MBPP asserts).

    `helpers` is the task's own code (its prompt): all of it but the entry point runs in the judge, and every name
    it binds (functions, classes, constants, imports) is the task's, so the tests call the task's `poly`
    (HumanEval/32) and read its constants, not the candidate's. Tests that run no test, or that define a `check`
    never called with the function to test (and no `entry_point`), are a ConfigError: zero tests are no verdict.
    """
    limits = limits or Limits()
    try:
        expected = harness_py.count_tests(tests, entry_point)
    except SyntaxError as exc:
        raise ConfigError(f"the tests do not parse: {exc}") from None
    except harness_py.TestFileError as exc:
        raise ConfigError(f"the tests cannot judge a program: {exc}") from None
    stdin = tests
    if helpers is not None:
        try:
            harness_py.helper_names(helpers, entry_point)
        except SyntaxError as exc:
            raise ConfigError(f"the task's helper code does not parse: {exc}") from None
        stdin = json.dumps({"tests": tests, "helpers": helpers})
    entry_point = tests_entry_point(tests, entry_point)  # the judge excludes it from the task's code
    step = _judge_step(toolchain, "asserts", stdin, entry_point, helpers=helpers is not None)
    return Job(
        files={"main.py": JUDGE_MAIN, harness_py.SOLUTION: code},
        steps=[step],
        limits=limits,
        language="python",
        checks=Checks(kind="python_asserts", expected_tests=expected),
    )


def prompt_helpers(prompt: str, entry_point: str | None) -> str | None:
    """The task's prompt as helper code for the judge, when it is code that defines the entry point (HumanEval);
    None for prose prompts (MBPP, APPS), which have no helpers to protect. A code prefix that stops after the entry
    point's signature (`def f(x):`, for the model to continue) is completed with `pass`, so its names are protected
    too."""
    if not entry_point:
        return None
    for code in (prompt, prompt.rstrip() + "\n    pass\n" if prompt.rstrip().endswith(":") else None):
        if code is None:
            continue
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            continue
        defines_entry = any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point for node in tree.body
        )
        return code if defines_entry else None
    return None


def prompt_entry_point(prompt: str, tests: str) -> str | None:
    """The function a code prompt leaves to the candidate, for a request that names none (MBPP-style asserts after a
    HumanEval-style prompt): the prompt's one stub (a body of only a docstring, `pass` or `...`), else the one
    function it defines that the tests call; None when that is not clear."""
    tree = None
    for text in (prompt, prompt.rstrip() + "\n    pass\n"):  # a prefix cut after the signature parses completed
        try:
            tree = ast.parse(text)
            break
        except (SyntaxError, ValueError):
            continue
    if tree is None:
        return None
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    stubs = [node.name for node in functions if all(_stub_line(line) for line in node.body)]
    if len(stubs) == 1:
        return stubs[0]
    try:
        used = {node.id for node in ast.walk(ast.parse(tests)) if isinstance(node, ast.Name)}
    except (SyntaxError, ValueError):
        return None
    called = [node.name for node in functions if node.name in used]
    return called[0] if len(called) == 1 else None


def _stub_line(node: ast.stmt) -> bool:
    return isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def tests_entry_point(tests: str, entry_point: str | None = None) -> str | None:
    """The function the tests judge: `entry_point`, else the one a HumanEval file passes to `check` (`check(f)`);
    None for MBPP-style asserts or tests that do not parse."""
    if entry_point:
        return entry_point
    try:
        return harness_py.plan(tests, None).entry
    except (SyntaxError, ValueError):
        return None


# The judge module sits beside the runner (preloaded by warm zygotes); main.py only calls it. The tests travel on the
# judge's stdin, never in a file: the candidate's process shares the work dir.
JUDGE_MAIN = "import sys\nimport harness_py\n\nsys.exit(harness_py.main(sys.argv))\n"


def _judge_step(toolchain: Toolchain, mode: str, tests: str, entry_point: str | None, *, helpers: bool = False) -> Step:
    argv = [_tool(toolchain, "python"), "main.py", mode, entry_point or "", *(["helpers"] if helpers else [])]
    return Step(name="tests", argv=argv, python=True, judge=True, stdin=tests)


JAVAFX_PAIR = """package javafx.util;

/** Stand-in for JavaFX's Pair (TransCoder's Java test programs import it; JavaFX is not installed). */
public class Pair<K, V> implements java.io.Serializable {
    private final K key;
    private final V value;

    public Pair(K key, V value) {
        this.key = key;
        this.value = value;
    }

    public K getKey() { return key; }

    public V getValue() { return value; }

    @Override
    public String toString() { return key + "=" + value; }

    @Override
    public int hashCode() { return java.util.Objects.hashCode(key) * 13 + java.util.Objects.hashCode(value); }

    @Override
    public boolean equals(Object other) {
        if (this == other) return true;
        if (!(other instanceof Pair)) return false;
        Pair<?, ?> pair = (Pair<?, ?>) other;
        return java.util.Objects.equals(key, pair.key) && java.util.Objects.equals(value, pair.value);
    }
}
"""
"""javac finds this source beside the program (the class path is the work dir) and compiles it on demand."""


def stand_ins(lang: Language, program: str) -> dict[str, str]:
    """Library classes a test program imports that the toolchain lacks (only javafx.util.Pair so far)."""
    if lang.name == "java" and "javafx.util.Pair" in program:
        return {"javafx/util/Pair.java": JAVAFX_PAIR}
    return {}


PLACEHOLDERS = ("//TOFILL", "#TOFILL", "// TOFILL", "# TOFILL", "{{candidate}}")


def harness_job(
    name: str,
    toolchain: Toolchain,
    code: str,
    harness: str,
    *,
    limits: Limits | None = None,
    trust_program_output: bool = False,
) -> Job:
    """(c) A test program for the language with the candidate pasted in at its placeholder line.

    The program reports `VERILOOP-TEST <name> PASS|FAIL [message]` lines, or TransCoder's `#Results: X, Y`. Where
    the candidate could print those itself, it is not trusted with them: a Python test program runs in the judge
    with the candidate's functions behind proxies (harness_py); one in another language with a reference `f_gold`
    that returns a value is split into a candidate side that only records values and a trusted side that compares
    them (split/). Any other test program is refused (ConfigError) unless `trust_program_output` is set: then it
    runs as one program and its output, which the candidate can forge, is the verdict (see docs/sandbox.md).
    """
    lang, limits = language(name), limits or Limits()
    if lang.name == "python":
        _require(lang, toolchain)
        return Job(
            files={"main.py": JUDGE_MAIN, harness_py.SOLUTION: code},
            steps=[_judge_step(toolchain, "program", harness, None)],
            limits=limits,
            language=lang.name,
            checks=Checks(kind="harness"),
        )
    why = split.refusal(lang.name, harness)
    if why is None:
        return _split_job(lang, toolchain, code, harness, limits)
    if not trust_program_output and not build_only.is_build_only(lang.name, harness):
        raise ConfigError(
            f"this {lang.name} test program cannot be judged without trusting its output, which the candidate can "
            f"forge: {why}. Give it a reference `f_gold` that returns a value before its TOFILL line, or pass "
            "trust_program_output=True to accept a verdict the candidate could print itself"
        )
    program = None
    for marker in PLACEHOLDERS:
        if marker in harness:
            lines = harness.splitlines()
            index = next(i for i, line in enumerate(lines) if marker in line)
            program = "\n".join([*lines[:index], code, *lines[index + 1 :]]) + "\n"
            break
    if program is None:
        program = f"{code}\n\n{harness}\n"
    source, steps, env = _base(lang, toolchain, program, limits)
    steps.append(Step(name="harness", argv=lang.run(toolchain, source, limits), python=lang.python))
    return Job(
        files={source: program, **stand_ins(lang, program)},
        steps=steps,
        env=env,
        limits=limits,
        language=lang.name,
        checks=Checks(kind="harness"),
    )


def _split_job(lang: Language, toolchain: Toolchain, code: str, harness: str, limits: Limits) -> Job:
    """The candidate side builds and records its values; then, in a fresh work dir, the trusted side compares them."""
    candidate, trusted = split.split(lang.name, code, harness)
    source, steps, env = _base(lang, toolchain, candidate, limits)
    run = lang.run(toolchain, source, limits)
    steps.append(Step(name="candidate", argv=run, stop_on_failure=True))
    trusted_source, trusted_steps, _ = _base(lang, toolchain, trusted, limits)
    trusted_steps.append(Step(name="harness", argv=lang.run(toolchain, trusted_source, limits), stdin_from="candidate"))
    return Job(
        files={source: candidate, **stand_ins(lang, candidate)},
        steps=steps,
        env=env,
        limits=limits,
        language=lang.name,
        checks=Checks(kind="harness"),
        trusted=Phase(files={trusted_source: trusted, **stand_ins(lang, trusted)}, steps=trusted_steps),
    )
