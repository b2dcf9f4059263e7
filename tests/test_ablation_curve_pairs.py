"""Paired curve differences (issue #47): seeds resampled jointly, both sigmoids refitted, fit-free area and per-point
differences; no efficiency or ceiling claim where an interval contains 0 or a fit is not identified (hand-made
curves, no model)."""

from __future__ import annotations

import math

import pytest

from trl_loo_gspo.experiment.ablation import curve_pairs
from trl_loo_gspo.experiment.ablation.curve_pairs import (
    Estimate,
    comparison_grid,
    curve_pairs_section,
    interpolate,
    pair_differences,
    paired_curve_difference,
    reading,
)
from trl_loo_gspo.experiment.ablation.curves import sigmoid_curve

from .ablation_records import plan

GRID = [i * 125 for i in range(9)]  # 0 … 1000 tokens, the budget


def sigmoid_seeds(c_mid: float, n_seeds: int = 5) -> list[list[tuple[float, float]]]:
    """Curves rising from 0.3 to 0.6 (B = 2), each seed shifted by its own offset (the same for every variant: the
    seeds are paired) and a small fixed wobble per point."""
    return [
        [
            (
                c,
                sigmoid_curve(c, 0.3, 0.6, 2.0, c_mid)
                + (0.01 * (seed - 2) + 0.002 * ((i * 7 + seed) % 3 - 1) if c else 0),
            )
            for i, c in enumerate(GRID)
        ]
        for seed in range(n_seeds)
    ]


def test_identical_curves_differ_by_zero_with_intervals_that_contain_it():
    curves = sigmoid_seeds(300)
    d = paired_curve_difference("a", "b", curves, curves, 1000, [500, 1000], n_boot=40)
    assert d.identified and d.unidentified_share == 0.0
    assert d.ceiling == Estimate(0.0, 0.0, 0.0) and d.midpoint == Estimate(0.0, 0.0, 0.0)
    assert d.area == Estimate(0.0, 0.0, 0.0) and [e for _, e in d.points] == [Estimate(0.0, 0.0, 0.0)] * 2
    assert not d.ceiling.excludes_zero and not d.midpoint.excludes_zero
    assert reading(d) == "no efficiency or ceiling claim: both intervals contain 0"


def test_a_later_sigmoid_gives_a_midpoint_difference_of_the_right_sign():
    early, late = sigmoid_seeds(200), sigmoid_seeds(400)
    d = paired_curve_difference("early", "late", early, late, 1000, [250, 1000], n_boot=60)
    assert d.identified
    assert d.midpoint.value == pytest.approx(-200, abs=15) and d.midpoint.high < 0  # early: fewer tokens
    assert d.ceiling.value == pytest.approx(0.0, abs=0.01)
    assert d.area.low > 0  # the early curve is higher everywhere before the end
    at = dict(d.points)
    assert at[250.0].low > 0 and at[250.0].value > at[1000.0].value
    assert "early reaches its midpoint with fewer tokens" in reading(d)
    swapped = paired_curve_difference("late", "early", late, early, 1000, [], n_boot=60)
    assert swapped.midpoint.value == pytest.approx(-d.midpoint.value, rel=1e-6) and swapped.midpoint.low > 0
    assert "early reaches its midpoint with fewer tokens" in reading(swapped)
    # deterministic: the same resamples give the same figures
    assert paired_curve_difference("early", "late", early, late, 1000, [250, 1000], n_boot=60) == d


def test_curves_still_rising_are_not_identified_and_get_no_claim():
    rising = [[(c, 0.3 + 0.0002 * c + 0.01 * seed) for c in GRID] for seed in range(4)]
    steeper = [[(c, 0.3 + 0.00025 * c + 0.01 * seed) for c in GRID] for seed in range(4)]
    d = paired_curve_difference("a", "b", steeper, rising, 1000, [1000], n_boot=30)
    assert not d.identified and "midpoint beyond the observed compute" in d.fit_reason
    assert d.unidentified_share > curve_pairs.MAX_UNIDENTIFIED_SHARE
    assert reading(d).startswith("no efficiency or ceiling claim: the fits are not identified")
    # the fit-free difference still stands: 0.00005 · c per seed, area 0.00005 · 1000 / 2
    assert d.area == Estimate(pytest.approx(0.025), pytest.approx(0.025), pytest.approx(0.025))


def test_the_fit_free_differences_by_hand():
    a = [[(0, 0.2), (500, 0.4), (1000, 0.6)], [(0, 0.2), (500, 0.5), (1000, 0.7)]]
    b = [[(0, 0.2), (500, 0.3), (1000, 0.5)], [(0, 0.2), (500, 0.3), (1000, 0.5)]]
    d = paired_curve_difference("a", "b", a, b, 1000, [250, 500], fit=False, n_boot=200)
    # areas (trapezoids / 1000): a 0.4 and 0.475, b 0.325 twice: differences 0.075 and 0.15; a resample of two
    # seeds has mean 0.075 (both seed 0: 1 in 4), 0.1125 or 0.15 (1 in 4), so the 2.5% / 97.5% percentiles are the ends
    assert d.area == Estimate(pytest.approx(0.1125), pytest.approx(0.075), pytest.approx(0.15))
    at = dict(d.points)
    assert at[250.0] == Estimate(pytest.approx(0.075), pytest.approx(0.05), pytest.approx(0.1))  # 0.3−0.25, 0.35−0.25
    assert at[500.0] == Estimate(pytest.approx(0.15), pytest.approx(0.1), pytest.approx(0.2))
    assert math.isnan(d.ceiling.value) and math.isnan(d.unidentified_share)
    assert not d.identified and "too few evaluation points" in reading(d)
    with pytest.raises(ValueError, match="paired curves of 2 or more seeds"):
        paired_curve_difference("a", "b", a, b[:1], 1000)


def test_interpolation_and_the_comparison_grid():
    curve = [(0, 0.2), (130, 0.4), (260, 0.3)]
    assert interpolate(curve, 65) == pytest.approx(0.3) and interpolate(curve, 195) == pytest.approx(0.35)
    assert interpolate(curve, 1000) == 0.3 and interpolate(curve, -5) == 0.2
    evaluated = [[(0, 0.2)] + [(c + 5, 0.3) for c in GRID[1:]]]  # each evaluation just past its checkpoint
    assert comparison_grid(evaluated, 1000, 125) == [float(c) for c in GRID[1:]]
    ends_only = [[(0, 0.2), (1004, 0.5)]]
    assert comparison_grid(evaluated + ends_only, 1000, 125) == [1000.0]  # not along a line between the ends
    # the budget itself when it is not a multiple of the spacing; 1000 is not the nearest checkpoint of any point
    assert comparison_grid([[(0, 0.2), (1103, 0.5)]], 1100, 500) == [1100.0]
    assert comparison_grid([[(0, 0.2), (510, 0.3), (1103, 0.5)]], 1100, 500) == [500.0, 1100.0]


def _records(name: str, curves: list, greedy: list) -> dict[int, dict]:
    return {
        s: {"name": name, "seed": s, "curve": c, "greedy_curve": g}
        for s, (c, g) in enumerate(zip(curves, greedy, strict=True))
    }


def test_the_section_compares_each_contrast_on_the_primary_metrics_curves(monkeypatch):
    monkeypatch.setattr(curve_pairs, "PAIR_BOOTSTRAP", 30)
    same = sigmoid_seeds(300)
    by_name = {
        "grpo": _records("grpo", same, sigmoid_seeds(400)),
        "full": _records("full", same, sigmoid_seeds(200)),
        "alt": _records("alt", same, [[(c, 0.3 + 0.0002 * c) for c in GRID]] * 5),
    }
    study = plan(eval_every_tokens=250, primary=["full", "grpo"], contrasts=[["alt", "grpo"]])
    sampled = pair_differences(study, by_name)
    assert [d.name for d in sampled] == ["full − grpo", "alt − grpo"]
    assert sampled[0].midpoint == Estimate(0.0, 0.0, 0.0)  # the sampled curves are the same
    assert [g for g, _ in sampled[0].points] == [250.0, 500.0, 750.0, 1000.0]
    greedy = plan(
        eval_every_tokens=250, primary=["full", "grpo"], contrasts=[["alt", "grpo"]], primary_metric="greedy"
    )
    text = "\n".join(curve_pairs_section(greedy, by_name))
    assert "## Paired curve differences (seeds resampled jointly)" in text and "(greedy pass@1)" in text
    assert "30 resamples of the paired seeds" in text
    assert (
        "No efficiency or ceiling claim is made where the interval contains 0 or the fits are not identified" in text
    )
    full = next(line for line in text.splitlines() if line.startswith("| full − grpo | 5 |"))
    assert "full reaches its midpoint with fewer tokens" in full
    alt = next(line for line in text.splitlines() if line.startswith("| alt − grpo | 5 |"))
    assert "| n.i. | n.i. |" in alt and "not identified" in alt
    assert "| contrast | 250 | 500 | 750 | 1,000 |" in text
    assert curve_pairs_section(plan(primary=["full", "grpo"]), {"full": by_name["full"]}) == []  # no pair
