"""Exact sign-flip tests, the MDE with its chi-square interval and Holm over both tests, against hand counts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trl_loo_gspo.experiment.ablation import exact
from trl_loo_gspo.experiment.ablation.exact import (
    ContrastTest,
    holm_family,
    mde,
    mde_interval,
    sign_flip_p,
    smallest_sign_flip_p,
)
from trl_loo_gspo.experiment.ablation.multiplicity import paired_p_value
from trl_loo_gspo.experiment.ablation.stats import minimum_detectable_effect, paired_difference


def test_all_positive_distinct_differences_reach_the_floor():
    # 8 positive differences: only all-plus and all-minus reach |sum| = 36, so p = 2/256.
    assert sign_flip_p([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(2 / 256, rel=1e-15)
    assert smallest_sign_flip_p(8) == 2 / 256
    # 20 pairs is the enumeration limit and still exact: 2 of 2^20.
    assert sign_flip_p(np.linspace(0.01, 0.2, 20)) == pytest.approx(2 / 2**20, rel=1e-15)


def test_small_cases_counted_by_hand():
    # [1, 2, 4]: the 8 sums are ±7, ±5, ±3, ±1; only ±7 reach |7|: p = 2/8.
    assert sign_flip_p([1, 2, 4]) == 0.25
    # [1, 2, -3]: sums +1+2-3=0, +1+2+3=6, +1-2-3=-4, +1-2+3=2, -1+2-3=-2, -1+2+3=4, -1-2-3=-6, -1-2+3=0;
    # observed 0, every |sum| >= 0: p = 8/8.
    assert sign_flip_p([1, 2, -3]) == 1.0
    # [1, -1, 2]: sums 4, 0, 2, -2, 2, -2, 0, -4 (signs of 1, -1, 2 in binary order); observed 2; |sum| >= 2 for
    # 4, 2, -2, 2, -2, -4: p = 6/8 — ties count.
    assert sign_flip_p([1, -1, 2]) == 0.75


def test_floating_point_ties_count():
    # ±0.1 ±0.2 ±0.3 gives 0.6, 0, 0.2, -0.4, 0.4, -0.2, 0, -0.6; adding 0.7: 1.3, 0.7, 0.9, 0.3, 1.1, 0.5, 0.7, 0.1.
    # Observed (+,+,-,+) = 0.7 in floating point; |sum| >= 0.7 for 1.3, 0.7, 0.9, 1.1, 0.7: p = 5/8, although
    # 0.1 + 0.2 - 0.3 + 0.7 and -0.1 - 0.2 + 0.3 + 0.7 round differently.
    assert sign_flip_p([0.1, 0.2, -0.3, 0.7]) == 0.625


def test_zeros_flip_to_themselves():
    # [0, 1, 2]: the zero doubles every sum of [1, 2] (±3, ±1): 4 of 8 reach 3, as 2 of 4 do for [1, 2].
    assert sign_flip_p([0, 1, 2]) == 0.5 == sign_flip_p([1, 2])
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_p([0, 0, 1]) == 1.0  # every assignment has |sum| = 1
    assert math.isnan(sign_flip_p([]))


def test_limits_and_bad_input():
    with pytest.raises(ValueError, match="limited to 20 pairs"):
        sign_flip_p([0.1] * 21)
    with pytest.raises(ValueError, match="finite"):
        sign_flip_p([0.1, math.nan])
    assert smallest_sign_flip_p(1) == 1.0 and smallest_sign_flip_p(0) == 1.0


def test_negating_or_reordering_leaves_p_unchanged_and_matches_brute_force():
    rng = np.random.default_rng(3)
    d = rng.normal(0.02, 0.05, size=11)
    observed = abs(d.sum())
    brute = sum(abs(np.dot(s, d)) >= observed * (1 - 1e-9) for s in itertools.product((1, -1), repeat=d.size))
    p = sign_flip_p(d)
    assert p == brute / 2**11
    assert 0 < p < 1
    assert sign_flip_p(-d) == p
    assert sign_flip_p(d[::-1]) == p


@pytest.mark.parametrize("n", range(2, 32))
def test_mde_agrees_with_the_table_version(n):
    assert mde(0.05, n) == pytest.approx(minimum_detectable_effect(0.05, n), rel=1e-5)


def test_mde_other_settings_and_limits():
    # n = 8, alpha 0.05, power 0.8: (t_{0.975,7} = 2.364624 + t_{0.8,7} = 0.896030) · 0.1 / √8 = 0.115281.
    assert mde(0.1, 8) == pytest.approx(3.260654 * 0.1 / math.sqrt(8), rel=1e-6)
    # A large n reaches the normal quantiles z_{0.995} + z_{0.90} = 2.575829 + 1.281552.
    assert mde(1.0, 1_000_000, alpha=0.01, power=0.9) == pytest.approx(3.857381 / 1000, rel=1e-4)
    assert math.isnan(mde(0.1, 1)) and math.isnan(mde(math.nan, 8))


def test_mde_interval_is_the_chi_square_interval_of_the_sd():
    point, low, high = mde_interval(0.1, 8)
    assert point == pytest.approx(mde(0.1, 8))
    # df 7: chi2_{0.975} = 16.012764, chi2_{0.025} = 1.689869; √(7/16.012764) = 0.661174, √(7/1.689869) = 2.035272.
    assert low / point == pytest.approx(0.661174, abs=1e-6)
    assert high / point == pytest.approx(2.035272, abs=1e-6)
    assert low < point < high
    narrow = mde_interval(0.1, 8, level=0.5)
    assert low < narrow[1] < point < narrow[2] < high
    assert all(math.isnan(v) for v in mde_interval(0.1, 1)) and all(math.isnan(v) for v in mde_interval(math.nan, 5))


def test_contrast_matches_a_hand_computation_and_the_existing_t_test():
    d = [0.06, 0.02, 0.08]
    c = exact.test_contrast("v", d)
    # mean 0.053333, sd 0.030551, t = 3.023716 on 2 df; for df 2, P(|T| >= t) = 1 − t/√(t² + 2) = 0.094178;
    # half-width 4.302653 · 0.030551 / √3 = 0.075892; all three positive and distinct: sign-flip p = 2/8.
    assert c.name == "v" and c.n == 3 and c.mean == pytest.approx(0.16 / 3)
    assert c.t_p == pytest.approx(0.094178, abs=1e-6)
    assert c.t_p == pytest.approx(paired_p_value(paired_difference({0: 0, 1: 0, 2: 0}, dict(enumerate(d)))))
    assert c.low == pytest.approx(0.16 / 3 - 0.075892, abs=1e-6)
    assert c.high == pytest.approx(0.16 / 3 + 0.075892, abs=1e-6)
    assert c.sign_flip_p == 0.25


def test_contrast_degenerate_cases():
    single = exact.test_contrast("one", [0.3])
    assert single.mean == 0.3 and all(math.isnan(v) for v in (single.low, single.high, single.t_p, single.sign_flip_p))
    assert math.isnan(exact.test_contrast("none", []).mean)
    constant = exact.test_contrast("c", [0.1, 0.1, 0.1])
    assert constant.t_p == 0.0 and constant.low == constant.high == pytest.approx(0.1) and constant.sign_flip_p == 0.25
    assert exact.test_contrast("z", [0.0, 0.0]).t_p == 1.0


def test_holm_family_on_a_hand_example():
    tests = [
        ContrastTest("a", 8, 0.05, 0.01, 0.09, t_p=0.01, sign_flip_p=2 / 256),
        ContrastTest("b", 8, 0.02, -0.01, 0.05, t_p=0.04, sign_flip_p=0.25),
        ContrastTest("c", 1, 0.03, math.nan, math.nan, t_p=0.03, sign_flip_p=math.nan),
    ]
    rows = holm_family(tests)
    # t family (m = 3), ascending 0.01, 0.03, 0.04: 3·0.01 = 0.03, max(0.03, 2·0.03) = 0.06, max(0.06, 1·0.04) = 0.06.
    assert [r["t_holm"] for r in rows] == pytest.approx([0.03, 0.06, 0.06])
    assert [r["t_rejected"] for r in rows] == [True, False, False]
    # Sign-flip family: the NaN is left out, m = 2: 2·0.0078125 = 0.015625, max(0.015625, 0.25) = 0.25.
    assert rows[0]["sign_flip_holm"] == pytest.approx(0.015625) and rows[1]["sign_flip_holm"] == pytest.approx(0.25)
    assert math.isnan(rows[2]["sign_flip_holm"])
    assert [r["sign_flip_rejected"] for r in rows] == [True, False, False]
    assert [r["name"] for r in rows] == ["a", "b", "c"]
    # At alpha 0.01 nothing is rejected: the smallest adjusted values, 0.03 and 0.015625, both exceed it.
    assert not any(r["t_rejected"] or r["sign_flip_rejected"] for r in holm_family(tests, alpha=0.01))
