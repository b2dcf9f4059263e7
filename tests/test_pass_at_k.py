"""The unbiased pass@k estimator (issue 47's secondary metric): golden values in float64, its limits, its errors."""

from __future__ import annotations

import itertools
import math

import pytest

from trl_loo_gspo.experiment.ablation.stats import mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (16, 0, 1, 0.0),
        (16, 16, 16, 1.0),
        (16, 4, 1, 0.25),  # pass@1 is the sampled pass rate c / n
        (16, 1, 4, 0.25),  # one right answer among 16: in a draw of 4 with chance 4/16
        (16, 2, 4, 1 - (14 * 13 * 12 * 11) / (16 * 15 * 14 * 13)),  # 1 - C(14,4)/C(16,4) = 0.45
        (16, 13, 4, 1.0),  # fewer than k wrong answers: every draw of 4 holds a right one
        (2000, 7, 16, 1 - math.comb(1993, 16) / math.comb(2000, 16)),
    ],
)
def test_golden_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_it_is_the_chance_over_every_draw_without_replacement():
    n, c = 7, 3
    answers = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        draws = list(itertools.combinations(answers, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws), rel=1e-12)


def test_the_mean_over_problems_and_bad_input():
    assert mean_pass_at_k([0, 16, 4], 16, 1) == pytest.approx((0 + 1 + 0.25) / 3)
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 16, 1)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(TypeError):
        pass_at_k(4.0, 1, 1)
