"""Paired differences between two variants' compute–performance curves (issue #47): before any claim that one
variant learns faster (efficiency) or further (ceiling) than another. Pure functions over curves, no model.

The seeds of a contrast a − b are paired (every run of a seed starts from the same policy and sees the same data), so
they are resampled jointly: each of :data:`PAIR_BOOTSTRAP` resamples draws seed indices with replacement and takes
*both* variants' curves of those seeds. In each resample:

* both sigmoids are refitted (:func:`.curves.fit_sigmoid`, ScaleRL's R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)),
  giving the difference of the ceilings A and of the midpoints C_mid; a resample where either fit is not identified
  (or cannot be fitted) counts in the unidentified share;
* fit-free: the mean paired difference of the normalised curve area up to the budget (:func:`.stats.curve_area`) and
  of the curve values at each point of a common grid (linear between evaluation points).

Intervals are percentiles over the resamples (for the fits: those where both fits converged). A ceiling or midpoint
difference counts only where both point fits are identified and at most 10% of the resamples are not (the rule of
:func:`.curves.bootstrap_fit`), and then only where its interval excludes 0. Deterministic: the RNG seed is
:data:`PAIR_SEED`.

Like :mod:`.report` it trains nothing and changes no record, so :mod:`.provenance` leaves it out of the source hash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .curves import MIN_BOOT_IDENTIFIED, CurveFit, fit_sigmoid
from .inference import METRICS, curves_by_seed, fittable
from .plan import AblationPlan
from .stats import curve_area

#: Joint seed resamples per contrast.
PAIR_BOOTSTRAP = 200
#: The resamples' RNG seed (the same draws for every contrast with the same number of seeds).
PAIR_SEED = 0
#: The largest share of unidentified resamples at which a fitted difference is still read (as for one variant).
MAX_UNIDENTIFIED_SHARE = 1 - MIN_BOOT_IDENTIFIED

Curve = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap percentile interval (NaN where there is none)."""

    value: float
    low: float = math.nan
    high: float = math.nan

    @property
    def excludes_zero(self) -> bool:
        """The interval lies wholly above or below 0 (False without an interval)."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class CurvePairDifference:
    """The paired curve differences a − b of one contrast (module docstring)."""

    a: str
    b: str
    n: int  # paired seeds
    ceiling: Estimate  # A_a − A_b; NaN when the curves cannot be fitted
    midpoint: Estimate  # C_mid_a − C_mid_b in tokens; NaN when the curves cannot be fitted
    unidentified_share: float  # resamples where either fit is not identified or cannot be fitted; NaN without fits
    fit_reason: str  # why the fitted differences are not read; '' when they are
    area: Estimate  # normalised curve area a − b
    points: tuple[tuple[float, Estimate], ...]  # (tokens, value a − b) on the grid

    @property
    def name(self) -> str:
        """``a − b``."""
        return f"{self.a} − {self.b}"

    @property
    def identified(self) -> bool:
        """Both point fits identified and at most :data:`MAX_UNIDENTIFIED_SHARE` of the resamples not."""
        return not self.fit_reason


def interpolate(curve: Curve, tokens: float) -> float:
    """The curve's value at ``tokens``: linear between its evaluation points, its first / last value before / after
    them."""
    points = sorted(curve)
    return float(np.interp(tokens, [t for t, _ in points], [p for _, p in points]))


def _fit(seed_curves: Sequence[Curve]) -> CurveFit | None:
    try:
        return fit_sigmoid([pt for curve in seed_curves for pt in curve])
    except ValueError:  # a resample can lack enough distinct computes
        return None


def _interval(values: Sequence[float], point: float, level: float) -> Estimate:
    if not values:
        return Estimate(point)
    low, high = np.percentile(values, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return Estimate(point, float(low), float(high))


def paired_curve_difference(
    a: str,
    b: str,
    curves_a: Sequence[Curve],
    curves_b: Sequence[Curve],
    budget: float,
    grid: Sequence[float] = (),
    fit: bool = True,
    n_boot: int = PAIR_BOOTSTRAP,
    seed: int = PAIR_SEED,
    level: float = 0.95,
) -> CurvePairDifference:
    """The paired curve differences of variant ``a`` − variant ``b``, ``curves_a[i]`` and ``curves_b[i]`` from the
    same seed (module
    docstring): the fitted ceiling and midpoint differences (``fit``: the curves have enough points to be fitted),
    the curve-area difference up to ``budget`` and the differences at each ``grid`` point, each with its ``level``
    percentile interval over ``n_boot`` joint seed resamples (RNG ``seed``). ValueError unless both variants have
    the same number (2 or more) of curves."""
    n = len(curves_a)
    if n != len(curves_b) or n < 2:
        raise ValueError(f"need paired curves of 2 or more seeds, got {len(curves_a)} and {len(curves_b)}")
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    pairs = list(zip(curves_a, curves_b, strict=True))
    area_d = np.array([curve_area(list(ca), budget) - curve_area(list(cb), budget) for ca, cb in pairs])
    point_d = np.array([[interpolate(ca, g) - interpolate(cb, g) for g in grid] for ca, cb in pairs]).reshape(n, -1)
    area = _interval(area_d[draws].mean(axis=1).tolist(), float(area_d.mean()), level)
    resampled = point_d[draws].mean(axis=1)  # (resample, grid point)
    points = tuple(
        (float(g), _interval(resampled[:, j].tolist(), float(point_d[:, j].mean()), level)) for j, g in enumerate(grid)
    )
    nan = Estimate(math.nan)
    if not fit:
        reason = "too few evaluation points or seeds to fit a curve"
        return CurvePairDifference(a, b, n, nan, nan, math.nan, reason, area, points)
    fit_a, fit_b = _fit(curves_a), _fit(curves_b)
    ceilings, midpoints, unidentified = [], [], 0
    for i in draws:
        ra, rb = _fit([curves_a[j] for j in i]), _fit([curves_b[j] for j in i])
        unidentified += not (ra is not None and rb is not None and ra.identified and rb.identified)
        if ra is not None and rb is not None and ra.converged and rb.converged:
            ceilings.append(ra.a - rb.a)
            midpoints.append(ra.c_mid - rb.c_mid)
    share = unidentified / n_boot if n_boot else math.nan
    if fit_a is None or fit_b is None:
        return CurvePairDifference(a, b, n, nan, nan, share, "the curves cannot be fitted", area, points)
    reasons = [f"{side}'s fit: {f.reason}" for side, f in ((a, fit_a), (b, fit_b)) if not f.identified]
    if not share <= MAX_UNIDENTIFIED_SHARE:  # NaN (no resamples) fails too
        reasons.append(f"{100 * share:.0f}% of the resamples not identified")
    ceiling = _interval(ceilings, fit_a.a - fit_b.a, level)
    midpoint = _interval(midpoints, fit_a.c_mid - fit_b.c_mid, level)
    return CurvePairDifference(a, b, n, ceiling, midpoint, share, "; ".join(reasons), area, points)


def comparison_grid(seed_curves: Sequence[Curve], budget: float, every: float) -> list[float]:
    """The points at which two variants' curves are compared without a fit: the evaluation checkpoints ``every``,
    2·``every``, … up to ``budget``, and ``budget``, each kept only where every curve has an evaluation for which it
    is the nearest checkpoint, within ``every``/2 (a curve evaluated only at its start and end is compared at the end
    alone, not along a line between them)."""
    checkpoints = [float(every * k) for k in range(1, int(budget // every) + 1)]
    if not checkpoints or checkpoints[-1] < budget:
        checkpoints.append(float(budget))

    def matched(curve: Curve) -> set[float]:
        """The checkpoints nearest to the curve's evaluations past the start, those within ``every``/2."""
        out = set()
        for t, _ in curve:
            nearest = min(checkpoints, key=lambda g: abs(t - g))
            if t > 0 and abs(t - nearest) <= every / 2:
                out.add(nearest)
        return out

    kept = set(checkpoints)
    for curve in seed_curves:
        kept &= matched(curve)
    return sorted(kept)


def contrasts(plan: AblationPlan) -> list[list[str]]:
    """The contrasts whose curves are compared: the primary, then both families' (each once)."""
    out: list[list[str]] = []
    for pair in ([plan.primary] if plan.primary else []) + plan.contrasts + plan.option_contrasts:
        if list(pair) not in out:
            out.append(list(pair))
    return out


def pair_differences(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[CurvePairDifference]:
    """:func:`paired_curve_difference` of every contrast of the plan (:func:`contrasts`) with 2 or more seeds whose
    curves of the primary metric both variants keep."""
    out = []
    for a, b in contrasts(plan):
        ca = curves_by_seed(by_name.get(a, {}), plan.primary_metric)
        cb = curves_by_seed(by_name.get(b, {}), plan.primary_metric)
        seeds = sorted(set(ca) & set(cb))
        if len(seeds) < 2:
            continue
        curves_a, curves_b = [ca[s] for s in seeds], [cb[s] for s in seeds]
        grid = comparison_grid(curves_a + curves_b, plan.rollout_tokens, plan.eval_every_tokens)
        fit = fittable(curves_a) and fittable(curves_b)
        out.append(
            paired_curve_difference(a, b, curves_a, curves_b, plan.rollout_tokens, grid, fit, n_boot=PAIR_BOOTSTRAP)
        )
    return out


def _cell(estimate: Estimate, spec: str, scale: float = 1.0) -> str:
    if math.isnan(estimate.value):
        return "—"
    value = format(estimate.value / scale, spec)
    if math.isnan(estimate.low):
        return value
    return f"{value} [{estimate.low / scale:{spec}}, {estimate.high / scale:{spec}}]"


def reading(d: CurvePairDifference) -> str:
    """What the fitted differences of ``d`` support: a ceiling or efficiency claim only where the fits are identified
    and the interval excludes 0."""
    if not d.identified:
        return f"no efficiency or ceiling claim: the fits are not identified ({d.fit_reason})"
    if not d.ceiling.excludes_zero and not d.midpoint.excludes_zero:
        return "no efficiency or ceiling claim: both intervals contain 0"
    ceiling = (
        f"ceiling {'higher' if d.ceiling.low > 0 else 'lower'} for {d.a}"
        if d.ceiling.excludes_zero
        else "no ceiling claim (interval contains 0)"
    )
    efficiency = (
        f"{d.a if d.midpoint.high < 0 else d.b} reaches its midpoint with fewer tokens"
        if d.midpoint.excludes_zero
        else "no efficiency claim (interval contains 0)"
    )
    return f"{ceiling}; {efficiency}"


def curve_pairs_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[str]:
    """The report's paired curve differences, one row per contrast (the primary, then both families'), then the
    fit-free differences at each comparison point. Empty when no contrast has 2 seeds with curves."""
    diffs = pair_differences(plan, by_name)
    if not diffs:
        return []
    metric = METRICS[plan.primary_metric]
    lines = [
        "",
        "## Paired curve differences (seeds resampled jointly)",
        "",
        f"For each contrast a − b on the primary metric's curves ({metric.description.removeprefix('final ')}): "
        f"{PAIR_BOOTSTRAP} resamples of the paired seeds with replacement, the same seeds for both variants (RNG "
        f"seed {PAIR_SEED}). In each, both sigmoids are refitted: ΔA (ceiling) and ΔC_mid (midpoint, thousands of "
        "tokens; negative: a reaches half its gain with fewer tokens), with 95% percentile intervals over the "
        "resamples where both fits converged, and the share of resamples where either fit is not identified. "
        "Fit-free, the same resamples: Δ curve area (normalised, up to the budget) and Δ at each comparison point "
        "below. No efficiency or ceiling claim is made where the interval contains 0 or the fits are not identified "
        f"(either point fit 'n.i.', or more than {MAX_UNIDENTIFIED_SHARE:.0%} of the resamples); there ΔA and ΔC_mid "
        "print 'n.i.'.",
        "",
        "| contrast | n | ΔA [95% CI] | ΔC_mid [95% CI] (tokens, thousands) | resamples n.i. | Δ curve area [95% CI] "
        "| reading |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in diffs:
        ceiling, midpoint = (
            (_cell(d.ceiling, "+.3f"), _cell(d.midpoint, "+.1f", 1e3)) if d.identified else ("n.i.", "n.i.")
        )
        share = "—" if math.isnan(d.unidentified_share) else f"{d.unidentified_share:.0%}"
        lines.append(
            f"| {d.name} | {d.n} | {ceiling} | {midpoint} | {share} | {_cell(d.area, '+.3f')} | {reading(d)} |"
        )
    grid = sorted({g for d in diffs for g, _ in d.points})
    if grid:
        lines += [
            "",
            "Δ at each comparison point (generated tokens: a checkpoint where every run of the pair was evaluated "
            "within half a spacing; values linear between evaluation points), mean over seeds [95% interval over the "
            "same resamples]:",
            "",
            "| contrast | " + " | ".join(f"{g:,.0f}" for g in grid) + " |",
            "|---|" + "---|" * len(grid),
        ]
        for d in diffs:
            at = dict(d.points)
            lines.append(f"| {d.name} | " + " | ".join(_cell(at[g], "+.3f") if g in at else "—" for g in grid) + " |")
    return lines
