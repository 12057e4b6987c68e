"""Shared pieces of the adversarial suites: an attack is a template for a hostile, wrong candidate and its honest twin.

`$answer` is the candidate's answer (wrong in the hostile one, right in the twin) and `$armed` says whether the
destructive part of the attack runs (always in the hostile one; in the twin only where the attack leaves a correct
program correct, e.g. printing fake verdict lines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template

import pytest

from veriloop.records import ExecResult, ExecStatus
from veriloop.sandbox import Limits
from veriloop.sandbox import languages as langs


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


async def run_suite(
    sandbox: object,
    language: str,
    harness: str,
    attacks: Sequence[Attack],
    right: str,
    wrong: str,
    limits: Limits,
    *,
    true: str = "true",
    false: str = "false",
) -> None:
    """Every attack's hostile candidate and honest twin in one batch (the warm pool runs them side by side); the
    test names each attack that passed while wrong or failed while right."""
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    if not langs.available(language, toolchain):
        pytest.skip(f"the {language} toolchain is not installed here (scripts/setup-sandbox.sh installs it)")
    jobs = []
    for attack in attacks:
        jobs.append(langs.harness_job(language, toolchain, attack.hostile(wrong, true), harness, limits=limits))
        jobs.append(langs.harness_job(language, toolchain, attack.honest(right, true, false), harness, limits=limits))
    results = await asyncio.gather(*[sandbox.run(job) for job in jobs])  # type: ignore[attr-defined]
    wrongly = []
    for index, attack in enumerate(attacks):
        bad, good = results[2 * index], results[2 * index + 1]
        if bad.status is ExecStatus.PASSED or (bad.tests and all(test.passed for test in bad.tests)):
            wrongly.append(f"{attack.name}: the hostile candidate passed: {bad}")
        if good.status is not ExecStatus.PASSED or not good.tests or not all(test.passed for test in good.tests):
            wrongly.append(f"{attack.name}: the honest twin did not pass: {good}")
    assert not wrongly, "\n".join(wrongly)
