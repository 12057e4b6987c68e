"""Shared pieces of the adversarial suites: an attack is a template for a hostile, wrong candidate and its honest twin.

`$answer` is the candidate's answer (wrong in the hostile one, right in the twin) and `$armed` says whether the
destructive part of the attack runs (always in the hostile one; in the twin only where the attack leaves a correct
program correct, e.g. printing fake verdict lines).
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from veriloop.records import ExecResult, ExecStatus


@dataclass(frozen=True)
class Attack:
    name: str
    code: str
    twin_armed: bool = True  # the honest twin runs the attack too (it must still pass)
    slow: bool = False  # waits for a time limit
    twin: str | None = None  # the honest twin's own template, where the attack cannot be switched off in place

    def hostile(self, wrong: str, true: str = "True") -> str:
        return Template(self.code).substitute(answer=wrong, armed=true)

    def honest(self, right: str, true: str = "True", false: str = "False") -> str:
        code = self.twin if self.twin is not None else self.code
        return Template(code).substitute(answer=right, armed=true if self.twin_armed else false)


def assert_not_passed(result: ExecResult) -> None:
    assert result.status is not ExecStatus.PASSED, result
    assert not result.tests or not all(test.passed for test in result.tests), result


def assert_passed(result: ExecResult) -> None:
    assert result.status is ExecStatus.PASSED, result
    assert result.tests and all(test.passed for test in result.tests), result
