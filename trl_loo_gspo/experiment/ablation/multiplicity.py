"""Several contrasts at once (method §5.2): paired t-test p-values, Holm's step-down correction, and simultaneous
(Bonferroni) intervals. Pure functions, no model.

Student's t distribution is computed here through the regularised incomplete beta function (the standard continued
fraction, Lentz's method) because the package does not depend on scipy for one distribution function; it is checked
against the table of :mod:`.stats` in the tests.
"""

from __future__ import annotations

import math

from .stats import PairedDifference, differences_sd


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), converged to ~1e-15."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("need at least 1 degree of freedom")
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile (0.5 < q < 1) of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if not 0.5 < q < 1.0:
        raise ValueError("q must be in (0.5, 1)")
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > 2 * (1 - q):
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_two_sided_p(mid, df) > 2 * (1 - q) else (low, mid)
    return (low + high) / 2


def paired_p_value(difference: PairedDifference) -> float:
    """Two-sided p-value of the paired t test of ``difference`` (NaN with fewer than 2 pairs; 0 or 1 when the
    differences do not vary)."""
    sd = differences_sd(difference)
    if difference.n < 2 or math.isnan(sd):
        return math.nan
    if sd == 0:
        return 1.0 if difference.mean == 0 else 0.0
    return t_two_sided_p(difference.mean / (sd / math.sqrt(difference.n)), difference.n - 1)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control over the list; NaN entries stay NaN and do not
    count in the family)."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m, adjusted, running = len(ranked), [math.nan] * len(p_values), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def simultaneous_interval(difference: PairedDifference, family: int, level: float = 0.95) -> tuple[float, float]:
    """A Bonferroni interval for one of ``family`` contrasts: each at level ``1 − (1 − level) / family``, so that all
    of them cover together with probability at least ``level``."""
    sd = differences_sd(difference)
    if difference.n < 2 or math.isnan(sd):
        return math.nan, math.nan
    half = t_quantile(1 - (1 - level) / (2 * family), difference.n - 1) * sd / math.sqrt(difference.n)
    return difference.mean - half, difference.mean + half
