"""bandit's report on a candidate: what a candidate can and cannot do to it (the judge's tests run it end to end)."""

from __future__ import annotations

from veriloop.judge.security import counted, scan_python

SHELL = "import subprocess\nsubprocess.run('ls ' + input(), shell=True)\n"


def test_findings_carry_bandits_ids_and_severities() -> None:
    findings = scan_python(SHELL)
    assert {f.test_id for f in findings} >= {"B404", "B602"} and all(f.line for f in findings)
    assert counted(findings, "high") == sum(f.severity == "high" for f in findings)
    assert scan_python("def add(a, b):\n    assert a\n    return a + b\n") == []  # asserts are not findings


def test_nosec_comments_do_not_hide_findings() -> None:
    silenced = "import subprocess  # nosec\nsubprocess.run('ls ' + input(), shell=True)  # nosec B602 B607\n"
    assert {f.test_id for f in scan_python(silenced)} == {f.test_id for f in scan_python(SHELL)}


def test_code_that_breaks_the_analyser_is_unscanned_not_clean() -> None:
    deep = SHELL + "x = " + "+".join(["1"] * 1500) + "\n"
    compile(deep, "candidate", "exec")  # Python runs it; bandit's visitor recurses past the limit
    assert [f.test_id for f in scan_python(deep)] == ["unscanned"]
    assert scan_python("def broken(:\n") == []  # does not parse: the verdict, not the scan, says why
