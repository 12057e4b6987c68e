"""The task-file schema: one row of a JSONL, JSON or Parquet file (or a `datasets` row) is one task.

Published as JSON Schema by `veriloop suites schema`; README's "Your own tasks" shows one example per
kind. A task is checked in one of four ways: Python `tests` (asserts, or HumanEval's `check(candidate)`),
stdin/stdout `cases`, a test program (`tests` for any other language, with a `TOFILL` line where the
candidate goes), or a formal `verifier` (dafny, nagini, verus, or any other registered one) against its `spec`.
"""

from __future__ import annotations

import ast
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from veriloop.records import Task
from veriloop.tasks.stdio import STDIO_NOTE, stdio_tests
from veriloop.verifiers.target import VerifierChoice


class IOCase(BaseModel):
    """One stdin/stdout test: the program's output must equal `stdout` (trailing whitespace ignored)."""

    model_config = ConfigDict(extra="forbid")

    stdin: str = Field("", description="Text fed to the program's standard input.")
    stdout: str = Field(description="Expected standard output.")
    public: bool = Field(False, description="Shown to the agent as feedback (the rest are held out).")


class TaskSpec(BaseModel):
    """One task of a task file."""

    model_config = ConfigDict(extra="forbid", title="veriloop task", str_strip_whitespace=False)

    id: str = Field(min_length=1, max_length=200, description="Unique within the file.")
    prompt: str = Field(min_length=1, description="What the model sees: a description, a signature, a program.")
    language: str = Field("python", min_length=1, description="Language the answer is written in.")
    entry_point: str | None = Field(None, description="Function under test (HumanEval's `check(candidate)`).")
    tests: str | None = Field(
        None,
        description="Python: asserts or a `check(candidate)` function. Other languages: a test program with a "
        "reference `f_gold` before the TOFILL line where the candidate's `f_filled` goes, printing "
        "`VERILOOP-TEST <name> PASS|FAIL` or `#Results: n, m` (f_filled's values are compared with f_gold's "
        "outside the candidate's process; a program without a value-returning f_gold is refused: docs/sandbox.md).",
    )
    public_tests: str | None = Field(None, description="The part of the tests the agent may see as feedback.")
    cases: list[IOCase] | None = Field(None, description="stdin/stdout tests (Python programs).")
    spec: str | None = Field(None, description="Verifier tasks: the specification the answer must keep.")
    reference: str | None = Field(None, description="A known-good answer, if there is one.")
    verifier: VerifierChoice = Field(
        None,
        description="Who judges: the tests (default when there are tests) or a registered formal verifier "
        "(dafny, nagini, verus).",
    )
    mode: Literal["hints", "translate", "inference"] | None = Field(
        None, description="Verifier tasks: fill in proof hints, translate `source`, or complete the prompt."
    )
    source: str | None = Field(None, description="Translation tasks: the program to translate.")
    source_language: str | None = Field(None, description="Translation tasks: the language of `source`.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else; kept with the task.")

    @model_validator(mode="after")
    def _checkable(self) -> TaskSpec:
        if self.tests is not None and self.cases is not None:
            raise ValueError("give tests or cases, not both")
        if self.cases is not None and not self.cases:
            raise ValueError("cases is empty")
        if self.cases is not None and self.language != "python":
            raise ValueError("stdin/stdout cases run Python programs; for other languages give a test program")
        formal = self.verifier not in (None, "tests")
        if not formal and not (self.tests or self.cases):
            raise ValueError("a task needs tests, cases, or a formal verifier (dafny, nagini, verus) and a spec")
        if self.mode == "translate" and not self.source:
            raise ValueError("a translation task (mode translate) needs its source")
        if self.language == "python":
            for name in ("tests", "public_tests"):
                text = getattr(self, name)
                if text:
                    try:
                        ast.parse(text)
                    except SyntaxError as exc:
                        raise ValueError(f"{name} is not valid Python (line {exc.lineno}: {exc.msg})") from None
        return self


def json_schema() -> dict[str, Any]:
    """The schema of one row, for `veriloop suites schema`."""
    return TaskSpec.model_json_schema()


def to_task(spec: TaskSpec, suite: str, task_id: str) -> Task:
    """The Task record of a validated row (stdin/stdout cases become asserts the Python harness runs)."""
    tests, public, prompt = spec.tests or "", spec.public_tests, spec.prompt
    metadata = dict(spec.metadata)
    if spec.cases is not None:
        shown = [case for case in spec.cases if case.public]
        tests = stdio_tests([(case.stdin, case.stdout) for case in spec.cases])
        public = stdio_tests([(case.stdin, case.stdout) for case in shown]) if shown else None
        prompt = f"{prompt.rstrip()}\n\n{STDIO_NOTE}"
        metadata["stdio_cases"] = len(spec.cases)
    for key in ("verifier", "mode", "source", "source_language"):
        value = getattr(spec, key)
        if value is not None:
            metadata[key] = value
    return Task(
        id=task_id,
        suite=suite,
        prompt=prompt,
        language=spec.language,
        entry_point=spec.entry_point,
        tests=tests,
        public_tests=public,
        spec=spec.spec,
        reference=spec.reference,
        metadata=metadata,
    )
