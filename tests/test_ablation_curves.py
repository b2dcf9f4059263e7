"""ScaleRL-style sigmoid fits of pass rate against rollout tokens: recovery of known parameters, the identification
rule, the seed bootstrap, the plot and the table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trl_loo_gspo.experiment.ablation.curves import (
    CurveFit,
    bootstrap_fit,
    fit_sigmoid,
    fit_table,
    plot_curves,
    sigmoid_curve,
)

TRUE = {"r0": 0.3, "a": 0.7, "b": 1.5, "c_mid": 40_000.0}
GRID = np.linspace(0.0, 200_000.0, 9)  # 0, 25k, ..., 200k: the midpoint (40k) is well inside


def _noisy_seeds(n_seeds: int = 8, noise: float = 0.01, seed: int = 0) -> list[list[tuple[float, float]]]:
    rng = np.random.default_rng(seed)
    clean = sigmoid_curve(GRID, **TRUE)
    noisy = [(clean + rng.normal(0.0, noise, GRID.size)).tolist() for _ in range(n_seeds)]
    return [list(zip(GRID.tolist(), values, strict=True)) for values in noisy]


def _linear_seeds(n_seeds: int = 4) -> list[list[tuple[float, float]]]:
    # Still rising in a straight line at the end of the budget: 0.2 → 0.3 over 200k tokens, no bend in sight.
    return [[(float(c), 0.2 + 0.1 * c / 200_000 + 0.002 * (s - 1.5)) for c in GRID] for s in range(n_seeds)]


def test_sigmoid_curve_values():
    assert sigmoid_curve(0.0, **TRUE) == 0.3
    assert sigmoid_curve(-5.0, **TRUE) == 0.3
    # At the midpoint half the gain: 0.3 + 0.4/2; at 2·c_mid: 0.3 + 0.4/(1 + 2^-1.5) = 0.3 + 0.4/1.353553 = 0.595518.
    assert sigmoid_curve(40_000.0, **TRUE) == pytest.approx(0.5, abs=1e-15)
    assert sigmoid_curve(80_000.0, **TRUE) == pytest.approx(0.595518, abs=1e-6)
    with np.errstate(all="raise"):  # no division-by-zero or overflow at c = 0 or tiny c
        values = sigmoid_curve(np.array([0.0, 1e-300, 1e12]), **TRUE)
    assert isinstance(values, np.ndarray) and values[0] == 0.3
    assert values[1] == pytest.approx(0.3) and values[2] == pytest.approx(0.7)


def test_noise_free_data_is_recovered_exactly():
    points = [(float(c), float(sigmoid_curve(c, **TRUE))) for c in GRID]
    fit = fit_sigmoid(points)
    assert fit.r0 == 0.3 and fit.n_points == 8 and fit.c_max == 200_000.0
    assert fit.a == pytest.approx(0.7, abs=1e-6)
    assert fit.b == pytest.approx(1.5, rel=1e-6)
    assert fit.c_mid == pytest.approx(40_000.0, rel=1e-6)
    assert fit.rss < 1e-20 and fit.converged and fit.identified and fit.reason == ""
    assert math.isnan(fit.a_low) and math.isnan(fit.boot_identified_share)


def test_noisy_seeds_are_recovered_within_tolerance():
    curves = _noisy_seeds()
    fit = fit_sigmoid([pt for curve in curves for pt in curve])
    assert fit.n_points == 64 and fit.identified
    assert fit.a == pytest.approx(0.7, abs=0.02)
    assert fit.c_mid == pytest.approx(40_000.0, rel=0.15)
    assert fit.r0 == pytest.approx(0.3, abs=0.01)  # the mean of the 8 noisy step-0 points


def test_a_curve_still_rising_is_not_identified():
    fit = fit_sigmoid([pt for curve in _linear_seeds() for pt in curve])
    assert fit.converged and not fit.identified
    assert fit.c_mid > fit.c_max
    assert fit.reason.startswith("midpoint beyond the observed compute (C_mid = ")
    assert "x the budget): the ceiling is not approached" in fit.reason


def test_given_r0_and_input_errors():
    points = [(float(c), float(sigmoid_curve(c, **TRUE))) for c in GRID[1:]]  # no step-0 evaluation
    with pytest.raises(ValueError, match="no points at compute 0"):
        fit_sigmoid(points)
    assert fit_sigmoid(points, r0=0.3).a == pytest.approx(0.7, abs=1e-6)
    with pytest.raises(ValueError, match="3 or more distinct"):
        fit_sigmoid([(0.0, 0.3), (1.0, 0.4), (1.0, 0.41), (2.0, 0.5)])
    with pytest.raises(ValueError, match="compute >= 0"):
        fit_sigmoid([(-1.0, 0.3), (0.0, 0.3), (1.0, 0.4), (2.0, 0.5), (3.0, 0.6)])


def test_bootstrap_is_deterministic_and_covers_the_true_ceiling():
    curves = _noisy_seeds()
    first = bootstrap_fit(curves, n_boot=40, seed=7)
    assert first == bootstrap_fit(curves, n_boot=40, seed=7)
    assert first != bootstrap_fit(curves, n_boot=40, seed=8)
    pooled = fit_sigmoid([pt for curve in curves for pt in curve])
    assert (first.a, first.b, first.c_mid) == (pooled.a, pooled.b, pooled.c_mid)  # the point fit pools all seeds
    assert first.a_low <= 0.7 <= first.a_high
    assert first.a_low < first.a < first.a_high and first.a_high - first.a_low < 0.05
    assert first.c_mid_low < first.c_mid < first.c_mid_high and first.b_low < first.b < first.b_high
    assert first.boot_identified_share == 1.0 and first.identified


def test_bootstrap_share_marks_an_extrapolated_ceiling():
    fit = bootstrap_fit(_linear_seeds(), n_boot=10, seed=0)
    assert not fit.identified and fit.boot_identified_share == 0.0
    assert fit.reason.startswith("midpoint beyond")
    assert fit.reason.endswith("identified in only 0% of seed-bootstrap refits")
    with pytest.raises(ValueError, match="2 or more seeds"):
        bootstrap_fit(_linear_seeds(1))


def test_plot_writes_a_png(tmp_path):
    curves = _noisy_seeds(n_seeds=3)
    linear = _linear_seeds(2)
    path = tmp_path / "curves.png"
    plot_curves(
        {
            "baseline": (curves, fit_sigmoid([pt for c in curves for pt in c])),
            "rising": (linear, fit_sigmoid([pt for c in linear for pt in c])),
            "unfitted": (curves[:1], None),
        },
        path,
        "test",
    )
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _fit(a: float, identified: bool, **extra: float) -> CurveFit:
    reason = "" if identified else "midpoint beyond the observed compute (C_mid = 6.1x the budget): the ceiling..."
    return CurveFit(0.2, a, 1.08, 1_218_208.0, 1e-6, 8, 200_000.0, True, identified, reason, **extra)


def test_fit_table_never_reports_an_unidentified_ceiling():
    fits = {
        "gspo": _fit(0.7123, True, a_low=0.7011, a_high=0.7234, c_mid_low=35_000.0, c_mid_high=45_000.0),
        "loo": _fit(0.9876, False),
    }
    lines = fit_table(fits, {"gspo": 0.69, "loo": 0.3})
    text = "\n".join(lines)
    assert lines[0].startswith("| variant | R0 | A [95% CI] | B [95% CI] | C_mid [95% CI] (tokens, thousands) |")
    assert "| gspo | 0.200 | 0.712 [0.701, 0.723] | 1.08 | 1218.2 [35.0, 45.0] | yes | 0.690 |" in lines
    assert "| loo | 0.200 | n.i. | 1.08 | n.i. | no (1) | 0.300 |" in lines
    assert "0.988" not in text and "0.9876" not in text and "1218.2" not in lines[3]
    assert lines[-1] == f"1. loo: {fits['loo'].reason}"
    # Only identified fits: no footnotes; a variant without a final shows a dash.
    assert fit_table({"gspo": _fit(0.7, True)}, {})[-1] == "| gspo | 0.200 | 0.700 | 1.08 | 1218.2 | yes | — |"
