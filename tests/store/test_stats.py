"""The estimators against known values: pass@k (Chen et al. 2021), exact McNemar, Wilson and bootstrap intervals."""

from __future__ import annotations

from math import comb, prod

import pytest

from veriloop.store import stats


def chen_reference(n: int, c: int, k: int) -> float:
    """The paper's numerically stable form: 1 - prod(1 - k / i) for i in n-c+1..n."""
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (10, 3, 2, 1 - 21 / 45),  # 1 - C(7,2)/C(10,2)
        (10, 0, 5, 0.0),
        (5, 5, 3, 1.0),
        (5, 4, 2, 1.0),  # only one failure: any two samples include a pass
        (4, 1, 2, 0.5),
        (200, 13, 10, 1 - comb(187, 10) / comb(200, 10)),
    ],
)
def test_pass_at_k_known_values(n: int, c: int, k: int, expected: float) -> None:
    assert stats.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert stats.pass_at_k(n, c, k) == pytest.approx(chen_reference(n, c, k), abs=1e-12)


def test_pass_at_1_is_the_plain_fraction_and_bad_arguments_are_refused() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            assert stats.pass_at_k(n, c, 1) == pytest.approx(c / n)
    for n, c, k in ((3, 1, 4), (3, 4, 1), (3, 1, 0), (0, 0, 1)):
        with pytest.raises(ValueError, match="pass@k needs"):
            stats.pass_at_k(n, c, k)


def test_exact_mcnemar_against_hand_computed_binomials() -> None:
    assert stats.binomial_tail(3, 10) == pytest.approx(176 / 1024)  # 1 + 10 + 45 + 120
    assert stats.mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)  # 0.021484375
    assert stats.mcnemar_exact(9, 1) == stats.mcnemar_exact(1, 9)
    assert stats.mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert stats.mcnemar_exact(5, 5) == 1.0  # capped: the doubled tail would exceed 1
    assert stats.mcnemar_exact(0, 0) == 1.0  # no discordant task: no evidence either way
    assert stats.mcnemar_exact(2, 12) == pytest.approx(2 * (1 + 14 + 91) / 2**14)  # 0.01293945...
    with pytest.raises(ValueError):
        stats.mcnemar_exact(-1, 2)


def test_bootstrap_interval_is_seeded_brackets_the_mean_and_collapses_on_constant_data() -> None:
    values = [1.0] * 7 + [0.0] * 13
    low, high = stats.bootstrap_interval(values)
    assert (low, high) == stats.bootstrap_interval(values)  # the same data, the same interval
    assert low < stats.mean(values) < high
    assert 0.1 < low < 0.35 < high < 0.65  # binomial 7/20: normal approx [0.14, 0.56]
    assert stats.bootstrap_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert stats.bootstrap_interval([0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError):
        stats.bootstrap_interval([])


def test_paired_bootstrap_keeps_pairs_together() -> None:
    same = [1.0, 0.0, 1.0, 1.0, 0.0]
    assert stats.paired_bootstrap_interval(same, same) == (0.0, 0.0)
    a = [1.0] * 10 + [0.0] * 10
    b = [0.0] * 10 + [0.0] * 10
    low, high = stats.paired_bootstrap_interval(a, b)
    assert 0.25 < low < 0.5 < high < 0.75
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired_bootstrap_interval([1.0], [1.0, 0.0])


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (0, 5, 0.0, 0.43448),  # the all-failed run that used to print [0.0%, 0.0%]
        (5, 5, 0.56552, 1.0),
        (1, 5, 0.03622, 0.62447),
        (7, 20, 0.18119, 0.56714),
        (0, 1, 0.0, 0.79346),
        (50, 100, 0.40383, 0.59617),
    ],
)
def test_wilson_interval_against_known_values(successes: int, trials: int, low: float, high: float) -> None:
    found = stats.wilson_interval(successes, trials)
    assert found == pytest.approx((low, high), abs=5e-5)
    assert found[0] < found[1]  # never a point, even at 0/n and n/n
    assert found[0] <= successes / trials <= found[1]


def test_wilson_interval_is_exact_at_the_ends_symmetric_and_refuses_bad_counts() -> None:
    for trials in (1, 2, 5, 30, 164):
        assert stats.wilson_interval(0, trials)[0] == 0.0 and stats.wilson_interval(trials, trials)[1] == 1.0
        for successes in range(trials + 1):
            low, high = stats.wilson_interval(successes, trials)
            mirror_low, mirror_high = stats.wilson_interval(trials - successes, trials)
            assert 0.0 <= low < high <= 1.0
            assert (low, high) == pytest.approx((1 - mirror_high, 1 - mirror_low), abs=1e-12)
    assert stats.wilson_interval(3, 10, level=0.99)[1] > stats.wilson_interval(3, 10)[1]  # wider at 99%
    for successes, trials in ((0, 0), (6, 5), (-1, 5)):
        with pytest.raises(ValueError, match="Wilson interval needs"):
            stats.wilson_interval(successes, trials)


def test_mean_interval_names_its_method_wilson_for_outcomes_bootstrap_otherwise() -> None:
    low, high, method = stats.mean_interval([0.0] * 5)
    assert method == "wilson" and low == 0.0 and high == pytest.approx(0.43448, abs=5e-5)
    assert stats.mean_interval([1.0, 0.0, 1.0])[2] == "wilson"
    low, high, method = stats.mean_interval([0.25, 0.5, 1.0, 0.0])
    assert method == "bootstrap" and (low, high) == stats.bootstrap_interval([0.25, 0.5, 1.0, 0.0])
    assert stats.INTERVAL_NAMES["wilson"] == "Wilson" and stats.INTERVAL_NAMES["paired_bootstrap"] == "paired bootstrap"
