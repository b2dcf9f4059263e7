"""Exact tests for paired ablation contrasts and the minimum detectable effect with its own uncertainty. Pure
functions, no model.

With the handful of seeds an RL ablation affords, the paired t test leans on normality that nobody can check at
n = 8. The sign-flip (randomisation) test needs only that, under the null of no effect, each seed's difference is as
likely to have come out negative as positive: its p-value is the share of the 2^n sign assignments whose |sum| is at
least the observed one, enumerated exactly. Its floor, 2 / 2^n, also says whether a multiplicity-corrected threshold
can be reached at all with n seeds (8 seeds: 0.0078, so a Holm threshold of 0.05 / 10 = 0.005 cannot be met).

The minimum detectable effect is proportional to the standard deviation of the differences, which is itself an
estimate from n − 1 degrees of freedom; :func:`mde_interval` carries the chi-square interval of that standard
deviation through to the MDE, so that "we could have detected 0.02" is reported as the range it really is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from .multiplicity import holm

_MAX_EXACT_PAIRS = 20
_CHUNK = 1 << 15  # sign assignments per block: keeps the (block, n) sign matrix at a few MiB for n = 20


def sign_flip_p(differences: Sequence[float]) -> float:
    """Exact two-sided paired sign-flip p-value: the fraction of the 2^n sign assignments to ``differences`` whose
    |sum| is at least the observed |sum|. NaN for no differences, 1.0 when they are all zero; ValueError for more
    than 20 pairs (the enumeration doubles with every pair) or non-finite differences."""
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n == 0:
        return math.nan
    if n > _MAX_EXACT_PAIRS:
        raise ValueError(f"exact sign-flip enumeration is limited to {_MAX_EXACT_PAIRS} pairs, got {n}")
    if not np.all(np.isfinite(d)):
        raise ValueError("sign-flip test needs finite differences")
    if not np.any(d):
        return 1.0
    observed = abs(float(d.sum()))
    # Ties must count (they are the reason a discrete p-value is exact), but sums of the same terms in another order
    # can differ in the last bits; the tolerance is relative to sum |d|, the scale of the rounding error of any sum.
    threshold = observed - 1e-12 * float(np.abs(d).sum())
    # |sum| is unchanged by flipping every sign, so the first sign is held at + and half the assignments enumerated.
    rest, first = d[1:], d[0]
    total = 1 << (n - 1)
    bits = np.arange(n - 1, dtype=np.int64)
    count = 0
    for start in range(0, total, _CHUNK):
        index = np.arange(start, min(start + _CHUNK, total), dtype=np.int64)
        signs = 1.0 - 2.0 * ((index[:, None] >> bits) & 1)  # bit j of the index is the sign of difference j + 1
        sums = first + signs @ rest
        count += int(np.count_nonzero(np.abs(sums) >= threshold))
    return count / total


def smallest_sign_flip_p(n: int) -> float:
    """The smallest two-sided p-value an exact sign-flip test over ``n`` pairs can give, 2 / 2^n (capped at 1): a
    corrected threshold below it cannot be reached with ``n`` seeds, whatever the data."""
    if n < 0:
        raise ValueError("n must be >= 0")
    return min(1.0, 2.0 / 2.0**n)


def mde(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true paired difference a two-sided level-``alpha`` paired t test over ``n`` pairs detects with
    probability ``power``, for differences of standard deviation ``sd``: (t_{1−α/2, n−1} + t_{power, n−1}) · sd / √n.
    NaN for n < 2 or NaN ``sd``."""
    if n < 2 or math.isnan(sd):
        return math.nan
    df = n - 1
    return float((sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df)) * sd / math.sqrt(n))


def mde_interval(
    sd: float, n: int, alpha: float = 0.05, power: float = 0.8, level: float = 0.95
) -> tuple[float, float, float]:
    """``(mde, low, high)``: the MDE at the observed ``sd`` and at the ends of the ``level`` chi-square confidence
    interval of the true standard deviation, sd·√((n−1)/χ²_{1−(1−level)/2, n−1}) to sd·√((n−1)/χ²_{(1−level)/2, n−1});
    the MDE is proportional to sd, so the interval carries over unchanged. NaNs for n < 2 or NaN ``sd``."""
    if n < 2 or math.isnan(sd):
        return math.nan, math.nan, math.nan
    df = n - 1
    point = mde(sd, n, alpha, power)
    low = point * math.sqrt(df / sps.chi2.ppf(1 - (1 - level) / 2, df))
    high = point * math.sqrt(df / sps.chi2.ppf((1 - level) / 2, df))
    return point, float(low), float(high)


@dataclass(frozen=True)
class ContrastTest:
    """One paired contrast (variant minus baseline over seeds) under both tests."""

    name: str
    n: int
    mean: float
    low: float  # 95% t confidence interval of the mean difference; NaN with fewer than 2 pairs
    high: float
    t_p: float  # two-sided paired t test
    sign_flip_p: float  # exact two-sided sign-flip test


def test_contrast(name: str, differences: Sequence[float]) -> ContrastTest:
    """The paired t interval and p-value and the exact sign-flip p-value of ``differences``. With fewer than 2 pairs
    every field but ``mean`` is NaN (``mean`` too with none); a zero-variance set of differences gets t_p 1 when they
    are all 0 and 0 otherwise (the t statistic is 0/0 or infinite), and a zero-width interval."""
    d = [float(x) for x in differences]
    n = len(d)
    mean = sum(d) / n if n else math.nan
    if n < 2:
        return ContrastTest(name, n, mean, math.nan, math.nan, math.nan, math.nan)
    # Equal differences have sd 0 exactly; np.std would leave rounding residue and a spurious, tiny t p-value.
    sd = 0.0 if max(d) == min(d) else float(np.std(d, ddof=1))
    se = sd / math.sqrt(n)
    half = float(sps.t.ppf(0.975, n - 1)) * se
    if se == 0:
        t_p = 1.0 if mean == 0 else 0.0
    else:
        t_p = float(2 * sps.t.sf(abs(mean / se), n - 1))
    return ContrastTest(name, n, mean, mean - half, mean + half, t_p, sign_flip_p(d))


# pytest would otherwise collect the function above as a test when a test module imports it by name.
test_contrast.__test__ = False  # type: ignore[attr-defined]


def holm_family(tests: Sequence[ContrastTest], alpha: float = 0.05) -> list[dict]:
    """Holm's step-down correction over the family ``tests``, applied separately to the t and the sign-flip p-values.
    Returns, per test in order, ``{"name", "t_holm", "sign_flip_holm", "t_rejected", "sign_flip_rejected"}``: the
    adjusted p-values (NaN entries stay NaN and do not count in their family) and whether each is <= ``alpha``."""
    t_adjusted = holm([c.t_p for c in tests])
    flip_adjusted = holm([c.sign_flip_p for c in tests])
    return [
        {
            "name": c.name,
            "t_holm": t_a,
            "sign_flip_holm": f_a,
            "t_rejected": bool(t_a <= alpha),  # NaN compares False: an untestable contrast is never rejected
            "sign_flip_rejected": bool(f_a <= alpha),
        }
        for c, t_a, f_a in zip(tests, t_adjusted, flip_adjusted, strict=True)
    ]
