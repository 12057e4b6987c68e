"""Node scores and frontier resampling against values worked out by hand from AlphaVerus's `evaluate_node`."""

from __future__ import annotations

import math
import random

import pytest

from veriloop.records import Diagnostic, VerifyResult, VerifyStatus
from veriloop.search.score import alphaverus_score, fraction_passed, resample, softmax, weights


def failed(verified: int, errors: int, diagnostics: list[Diagnostic]) -> VerifyResult:
    return VerifyResult(status=VerifyStatus.FAILED, verified=verified, errors=errors, diagnostics=diagnostics)


def test_partial_score_is_share_verified_minus_penalties() -> None:
    diagnostics = [
        Diagnostic(severity="error", message="a postcondition might not hold"),
        Diagnostic(severity="note", message="related location"),
        Diagnostic(severity="note", message="related location"),
    ]
    # 3/4 - (0.1*1 + 0.04*2)/4 = 0.75 - 0.045
    assert alphaverus_score(failed(3, 1, diagnostics)) == pytest.approx(0.705)


def test_the_final_aborting_block_of_verus_is_not_counted() -> None:
    diagnostics = [
        Diagnostic(severity="error", message="postcondition not satisfied"),
        Diagnostic(severity="error", message="invariant not satisfied at end of loop body"),
        Diagnostic(severity="note", message="recommendation not met"),
        Diagnostic(severity="error", message="aborting due to 2 previous errors"),
    ]
    # 2/4 - (0.1*2 + 0.04*1)/4 = 0.5 - 0.06
    assert alphaverus_score(failed(2, 2, diagnostics)) == pytest.approx(0.44)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (VerifyResult(status=VerifyStatus.VERIFIED, verified=2), 1.0),
        (VerifyResult(status=VerifyStatus.REJECTED, verified=2, reason="assume"), -1.0),
        (VerifyResult(status=VerifyStatus.SYNTAX_ERROR, errors=1), -1.0),
        (VerifyResult(status=VerifyStatus.TIMEOUT), -1.0),
        (failed(0, 0, []), -1.0),
        (failed(21, 1, []), -1.0),
        (failed(0, 1, [Diagnostic(message="e")]), -0.1),
    ],
)
def test_discards_and_solved(result: VerifyResult, expected: float) -> None:
    assert alphaverus_score(result) == pytest.approx(expected)


def test_tests_score_is_the_fraction_passed() -> None:
    assert fraction_passed(failed(3, 5, [])) == pytest.approx(3 / 8)
    assert fraction_passed(VerifyResult(status=VerifyStatus.VERIFIED, verified=8)) == 1.0
    assert fraction_passed(VerifyResult(status=VerifyStatus.SYNTAX_ERROR)) == -1.0


def test_softmax_at_node_temperature() -> None:
    # a difference of 0.1 in score is a factor e in weight at T = 0.1
    p = softmax([0.5, 0.4], 0.1)
    assert p[0] / p[1] == pytest.approx(math.e)
    assert p[0] == pytest.approx(1 / (1 + math.exp(-1)))


def test_weights_per_search() -> None:
    scores = [0.1, 0.9, 0.5, 0.3, 0.7]
    assert weights(scores, "rebase") == scores
    assert weights(scores, "uniform") == [1.0] * 5
    assert weights(scores, "top_k", top_k=2) == [-1000.0, 1000.0, -1000.0, -1000.0, 1000.0]
    assert softmax(weights(scores, "top_k", top_k=2)) == pytest.approx([0, 0.5, 0, 0, 0.5])


def test_resample_draws_from_survivors_with_softmax_weights() -> None:
    scores = [-1.0, 0.5, 0.4, -0.1]
    picks = resample(scores, 6, random.Random(7))
    expected = sorted(random.Random(7).choices([1, 2], weights=softmax([0.5, 0.4]), k=6))
    assert picks == expected
    assert set(picks) <= {1, 2} and picks == sorted(picks)


def test_resample_frequencies_follow_the_softmax() -> None:
    picks = resample([0.5, 0.4], 20000, random.Random(0))
    share = picks.count(0) / len(picks)
    assert share == pytest.approx(1 / (1 + math.exp(-1)), abs=0.01)


def test_resample_with_no_survivor_is_empty() -> None:
    assert resample([-1.0, -0.2], 4, random.Random(0)) == []
