"""Corrections for several contrasts: t distribution, Holm's step-down p-values, simultaneous intervals."""

from __future__ import annotations

import math

import pytest

from trl_loo_gspo.experiment.ablation.multiplicity import (
    holm,
    paired_p_value,
    simultaneous_interval,
    t_quantile,
    t_two_sided_p,
)
from trl_loo_gspo.experiment.ablation.stats import _T80, _T975, paired_difference


@pytest.mark.parametrize("df", range(1, 31))
def test_the_t_distribution_matches_the_quantile_tables(df):
    assert t_two_sided_p(_T975[df - 1], df) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided_p(_T80[df - 1], df) == pytest.approx(0.40, abs=1e-6)  # one-sided 80% = two-sided 40%
    assert t_quantile(0.975, df) == pytest.approx(_T975[df - 1], abs=1e-5)


def test_the_t_distribution_at_its_limits():
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| > 1) = 1/2
    assert t_two_sided_p(1.959964, 10_000) == pytest.approx(0.05, abs=1e-4)  # the normal limit
    assert t_two_sided_p(math.inf, 3) == 0.0


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, monotone
    adjusted = holm([0.01, math.nan, 0.02])
    assert math.isnan(adjusted[1]) and adjusted[0] == pytest.approx(0.02) and adjusted[2] == pytest.approx(0.02)


def test_paired_p_value_and_simultaneous_interval():
    base = {s: 0.40 for s in range(8)}
    variant = {s: 0.40 + d for s, d in enumerate([0.05, 0.03, 0.04, 0.06, 0.02, 0.05, 0.04, 0.03])}
    diff = paired_difference(base, variant)
    t = diff.mean / (math.sqrt(sum((d - diff.mean) ** 2 for d in diff.differences) / 7) / math.sqrt(8))
    assert paired_p_value(diff) == pytest.approx(t_two_sided_p(t, 7))
    low, high = simultaneous_interval(diff, family=1)
    assert (low, high) == pytest.approx((diff.low, diff.high), abs=1e-6)  # one contrast: the ordinary interval
    wide = simultaneous_interval(diff, family=9)
    assert wide[0] < low and wide[1] > high  # nine at once: wider
    assert math.isnan(paired_p_value(paired_difference({0: 0.1}, {0: 0.2})))


def test_the_report_corrects_the_contrasts_next_to_the_raw_intervals(tmp_path):
    import yaml

    from trl_loo_gspo.experiment.ablation.plan import AblationPlan
    from trl_loo_gspo.experiment.ablation.runner import report, run_ablation

    from .test_ablation import fake_runner

    data = dict(
        output_dir=str(tmp_path / "out"),
        seeds=[0, 1, 2, 3],
        rollout_tokens=1000,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": "a", "config": {}}, {"name": "b", "config": {}}],
        contrasts=[["a", "grpo"], ["b", "grpo"]],
    )
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(data))
    plan = AblationPlan.from_yaml(tmp_path / "plan.yaml")
    text = report(plan, run_ablation(plan, fake_runner([], {"a": 0.05, "b": 0.0})))
    assert "Corrected for 2 contrasts" in text and "| contrast | p (paired t) | Holm p |" in text
    assert "| 95% CI |" in text  # the raw intervals stay
