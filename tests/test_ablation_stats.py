"""Paired differences, confidence intervals, verdicts and curve areas against hand-computed values."""

import math

import pytest

from trl_loo_gspo.experiment.ablation.stats import curve_area, paired_difference, t_quantile_975, verdict


def test_paired_difference_matches_a_hand_computation():
    baseline = {0: 0.40, 1: 0.50, 2: 0.45}
    variant = {0: 0.46, 1: 0.52, 2: 0.53, 9: 0.99}  # seed 9 has no pair: ignored
    d = paired_difference(baseline, variant)
    # differences 0.06, 0.02, 0.08: mean 0.05333, sd 0.030551, t(2) = 4.302653, half = 4.302653·0.030551/√3
    assert d.n == 3 and d.differences == pytest.approx((0.06, 0.02, 0.08))
    assert d.mean == pytest.approx(0.16 / 3)
    half = (
        4.302653 * math.sqrt(((0.06 - 0.16 / 3) ** 2 + (0.02 - 0.16 / 3) ** 2 + (0.08 - 0.16 / 3) ** 2) / 2) / 3**0.5
    )
    assert d.low == pytest.approx(0.16 / 3 - half) and d.high == pytest.approx(0.16 / 3 + half)
    assert half == pytest.approx(0.075892, abs=1e-5)


def test_verdicts():
    assert verdict(paired_difference({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.3, 1: 0.41, 2: 0.5})) == "better"
    assert verdict(paired_difference({0: 0.3, 1: 0.41, 2: 0.5}, {0: 0.1, 1: 0.2, 2: 0.3})) == "worse"
    mixed = paired_difference({0: 0.3, 1: 0.3, 2: 0.3}, {0: 0.4, 1: 0.2, 2: 0.35})
    assert verdict(mixed) == "no detectable difference at this budget and n seeds"
    single = paired_difference({0: 0.1}, {0: 0.9})
    assert single.n == 1 and math.isnan(single.low) and verdict(single).startswith("no detectable")
    assert paired_difference({}, {1: 0.5}).n == 0


def test_t_quantiles():
    assert t_quantile_975(1) == pytest.approx(12.706205)
    assert t_quantile_975(4) == pytest.approx(2.776445)
    assert t_quantile_975(100) == pytest.approx(1.959964)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_curve_area():
    assert curve_area([(0, 0.5), (100, 0.5)], 100) == pytest.approx(0.5)
    assert curve_area([(0, 0.0), (100, 1.0)], 100) == pytest.approx(0.5)  # a linear rise
    assert curve_area([(0, 0.2), (50, 0.6)], 100) == pytest.approx((50 * 0.4 + 50 * 0.6) / 100)  # carried to the end
    # cut at the budget: the value there interpolated (0.2 + 0.8 * 100/150), not the post-budget point's
    assert curve_area([(0, 0.2), (150, 1.0)], 100) == pytest.approx((0.2 + 0.2 + 0.8 * 100 / 150) / 2)
    assert curve_area([(0, 0.2), (100, 0.4), (104, 1.0)], 100) == pytest.approx(0.3)  # overshoot gains nothing
    with pytest.raises(ValueError):
        curve_area([(0, 1.0)], 0)


def test_minimum_detectable_effect_and_seeds_needed_by_hand():
    from trl_loo_gspo.experiment.ablation.stats import differences_sd, minimum_detectable_effect, seeds_needed

    # n = 5: (t_{0.975,4} + t_{0.80,4}) · sd / √5 = (2.776445 + 0.940965) · 0.02 / 2.236068
    assert minimum_detectable_effect(0.02, 5) == pytest.approx(3.71741 * 0.02 / 5**0.5, rel=1e-5)
    assert math.isnan(minimum_detectable_effect(0.02, 1))
    # large n tends to the normal formula (1.959964 + 0.841621)² (sd/δ)²: ≈ 31.4 for sd = 2δ → 32 with t quantiles
    assert seeds_needed(0.02, 0.01) == 32 and seeds_needed(0.02, -0.01) == 32
    assert seeds_needed(0.0, 0.01) == 2 and seeds_needed(0.02, 0.0) is None
    assert minimum_detectable_effect(0.02, 32) <= 0.01 < minimum_detectable_effect(0.02, 31)
    diff = paired_difference({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.2, 1: 0.2, 2: 0.5})
    assert differences_sd(diff) == pytest.approx(0.1)
