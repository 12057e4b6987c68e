"""What the judge asks the verifiers' descriptors instead of naming a verifier."""

from __future__ import annotations

from pathlib import Path

from veriloop.config import load_settings
from veriloop.judge import Judge, JudgeCandidate
from veriloop.verifiers.target import verifier_target


async def test_a_stored_task_is_proved_when_its_language_is_only_a_provers(tmp_path: Path) -> None:
    """Dafny has a prover and no sandbox runner: its task is verified; Python and Rust tasks are run."""
    judge = Judge(load_settings(paths={"home": tmp_path}), security=False)
    by_language = {
        language: judge._formal(JudgeCandidate(language=language, code="x", task_id="t", suite="s"))
        for language in ("dafny", "python", "rust", "cobol")
    }
    assert by_language == {"dafny": True, "python": False, "rust": False, "cobol": False}
    assert judge._formal(JudgeCandidate(language="python", code="x", spec="x", verifier="nagini"))
    await judge.aclose()


def test_solve_poses_a_dafny_program_as_hints_and_the_others_in_place() -> None:
    assert {name: verifier_target(name).solve_mode for name in ("dafny", "nagini", "verus")} == {
        "dafny": "hints",
        "nagini": "inference",
        "verus": "inference",
    }
