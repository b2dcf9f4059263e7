"""Statistics for equal-budget ablations (method §5.2): paired differences over seeds, confidence intervals, verdicts,
and the area under the pass-rate-vs-rollout-tokens curve. Pure functions, no model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Two-sided 95% quantiles of Student's t, t_{0.975, df}, for df = 1..30 (standard table values); the normal
# quantile 1.959964 beyond. Written out rather than adding scipy as a dependency for one number.
_T975 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip


# One-sided 80% quantiles t_{0.80, df} (power 0.8), df = 1..30 (standard table values); the normal 0.841621 beyond.
_T80 = (
    1.376382, 1.060660, 0.978472, 0.940965, 0.919544, 0.905703, 0.896030, 0.888890, 0.883404, 0.879058,
    0.875530, 0.872609, 0.870152, 0.868055, 0.866245, 0.864667, 0.863279, 0.862049, 0.860951, 0.859964,
    0.859074, 0.858266, 0.857530, 0.856855, 0.856236, 0.855665, 0.855137, 0.854647, 0.854192, 0.853767,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """t_{0.975} for ``df`` degrees of freedom (two-sided 95%)."""
    if df < 1:
        raise ValueError("need at least 1 degree of freedom (2 paired seeds)")
    return _T975[df - 1] if df <= len(_T975) else 1.959964


@dataclass(frozen=True)
class PairedDifference:
    """Variant minus baseline, paired by seed."""

    mean: float
    low: float  # 95% confidence interval (t over the paired differences); NaN with fewer than 2 pairs
    high: float
    n: int
    differences: tuple[float, ...]


def paired_difference(baseline: dict[int, float], variant: dict[int, float]) -> PairedDifference:
    """Mean of ``variant[seed] − baseline[seed]`` over the seeds both have, with a 95% t confidence interval."""
    seeds = sorted(set(baseline) & set(variant))
    diffs = tuple(variant[s] - baseline[s] for s in seeds)
    n = len(diffs)
    if n == 0:
        return PairedDifference(math.nan, math.nan, math.nan, 0, diffs)
    mean = sum(diffs) / n
    if n < 2:
        return PairedDifference(mean, math.nan, math.nan, n, diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return PairedDifference(mean, mean - half, mean + half, n, diffs)


def differences_sd(difference: PairedDifference) -> float:
    """Sample standard deviation of the paired differences (NaN with fewer than 2)."""
    d, n = difference.differences, difference.n
    if n < 2:
        return math.nan
    return math.sqrt(sum((x - difference.mean) ** 2 for x in d) / (n - 1))


def minimum_detectable_effect(sd: float, n: int) -> float:
    """The smallest true paired difference a two-sided 5% paired t test over ``n`` seeds detects with 80% power,
    for differences with standard deviation ``sd``: (t_{0.975, n−1} + t_{0.80, n−1}) · sd / √n (normal-theory
    approximation with the t quantiles)."""
    if n < 2 or math.isnan(sd):
        return math.nan
    t80 = _T80[n - 2] if n - 1 <= len(_T80) else 0.841621
    return (t_quantile_975(n - 1) + t80) * sd / math.sqrt(n)


def seeds_needed(sd: float, effect: float, limit: int = 10_000) -> int | None:
    """The number of paired seeds at which ``effect`` becomes the minimum detectable effect (5%, power 80%), for
    differences with standard deviation ``sd``; ``None`` when it is above ``limit`` or undefined."""
    if math.isnan(sd) or math.isnan(effect) or effect == 0:
        return None
    if sd == 0:
        return 2
    for n in range(2, limit + 1):
        if minimum_detectable_effect(sd, n) <= abs(effect):
            return n
    return None


def verdict(difference: PairedDifference) -> str:
    """``"better"`` if the whole 95% interval is above 0, ``"worse"`` if below, else no detectable difference."""
    if difference.n >= 2 and difference.low > 0:
        return "better"
    if difference.n >= 2 and difference.high < 0:
        return "worse"
    return "no detectable difference at this budget and n seeds"


def curve_area(points: list[tuple[float, float]], budget: float) -> float:
    """Normalised area under a pass-rate-vs-tokens curve on [0, budget] (trapezoids). Points beyond the budget are
    cut: the curve's value at the budget is interpolated linearly between the last point before it and the first
    point after it (carried from the last point when none follows); a run that overshoots the budget gains nothing
    from its tokens past it. A constant pass rate p gives p."""
    if budget <= 0:
        raise ValueError("budget must be > 0")
    ordered = sorted((max(t, 0.0), p) for t, p in points)
    if not ordered:
        return math.nan
    pts = [(t, p) for t, p in ordered if t <= budget]
    after = next(((t, p) for t, p in ordered if t > budget), None)
    if not pts:  # every evaluation after the budget: the first one's value from 0
        pts = [(0.0, after[1])]
    if pts[0][0] > 0:
        pts.insert(0, (0.0, pts[0][1]))
    if pts[-1][0] < budget:
        (t0, p0) = pts[-1]
        at_budget = p0 if after is None else p0 + (after[1] - p0) * (budget - t0) / (after[0] - t0)
        pts.append((budget, at_budget))
    area = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False))
    return area / budget


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k for one problem from ``c`` right answers out of ``n`` samples (method §5.2;
    docs/experiments.md, "pass@k"): 1 − C(n−c, k) / C(n, k), the chance that k of the n answers drawn without
    replacement hold a right one (Chen et al. 2021). Exact integer binomials (``math.comb``), so no overflow or
    cancellation for any n; written here because neither TRL nor datasets ships it."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError("n, c and k are integers")
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(counts: list[int], n: int, k: int) -> float:
    """pass@k over a split: the mean of :func:`pass_at_k` over its problems' success counts (each out of ``n``)."""
    if not counts:
        raise ValueError("no problems")
    return sum(pass_at_k(n, c, k) for c in counts) / len(counts)
