"""Compute–performance curves in the style of ScaleRL (Meta, 2025): validation pass rate against training compute C
(here: generated rollout tokens) fitted with

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

A is the asymptotic ceiling, B the steepness (compute efficiency), C_mid the compute at which half the gain A − R0
is reached and R0 the pass rate before training. Pure functions, no model (matplotlib only inside :func:`plot_curves`).

Identification rule. Inside a finite budget a sigmoid that has not yet bent over is indistinguishable from one with
a higher ceiling further out, so the fitted A is only reported as a ceiling when the data reach the bend:

* the fit converged;
* the fitted midpoint lies inside the observed compute range, C_mid <= c_max (the largest compute observed), so at
  least half the gain was seen; otherwise A is an extrapolation of the rising part;
* B is not pinned at a bound of [0.1, 10] (within 1e-3 relative), where the optimiser traded steepness for
  a ceiling the data do not constrain;
* with a seed bootstrap (:func:`bootstrap_fit`), at least 90% of the refits on resampled seeds are identified too.

An unidentified fit keeps its numbers (for diagnosis) but :func:`fit_table` and :func:`plot_curves` print 'n.i.'
for its ceiling, never a value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

_B_BOUNDS = (0.1, 10.0)
_MID_BOUNDS = (1e-3, 100.0)  # C_mid as a multiple of the largest observed compute
_MID_STARTS = (0.1, 0.3, 1.0, 3.0)
_B_STARTS = (0.7, 1.5, 3.0)
#: Share of the seed-bootstrap refits that must be identified for a fitted ceiling to be reported (else "n.i.").
MIN_BOOT_IDENTIFIED = 0.9


def sigmoid_curve(c: np.ndarray | float, r0: float, a: float, b: float, c_mid: float) -> np.ndarray | float:
    """R(c) = r0 + (a − r0) / (1 + (c_mid / c)^b), exactly ``r0`` at c <= 0; an array for an array ``c``, else a
    float."""
    arr = np.asarray(c, dtype=np.float64)
    positive = arr > 0
    # (c_mid / c)^b as exp(b·(log c_mid − log c)) through the logistic function: no overflow for tiny c and no
    # division by zero at c = 0 (those entries are overwritten with r0).
    log_c = np.log(np.where(positive, arr, 1.0))
    out = np.where(positive, r0 + (a - r0) * expit(b * (log_c - math.log(c_mid))), r0)
    return out if out.ndim else float(out)


@dataclass(frozen=True)
class CurveFit:
    """A fitted compute–performance curve (see the module docstring for when its ceiling counts as identified)."""

    r0: float
    a: float
    b: float
    c_mid: float
    rss: float  # residual sum of squares over the points with compute > 0
    n_points: int  # points with compute > 0 the curve was fitted to
    c_max: float  # largest observed compute
    converged: bool
    identified: bool
    reason: str  # why the ceiling is not identified; '' when it is
    a_low: float = math.nan  # seed-bootstrap percentile intervals (NaN when not bootstrapped)
    a_high: float = math.nan
    c_mid_low: float = math.nan
    c_mid_high: float = math.nan
    b_low: float = math.nan
    b_high: float = math.nan
    boot_identified_share: float = math.nan


def fit_sigmoid(points: Sequence[tuple[float, float]], r0: float | None = None) -> CurveFit:
    """Least-squares fit of A, B and C_mid to ``points`` (compute, pass rate), pooled over seeds, with R0 given or
    the mean pass rate at compute 0. Returns the best fit over a fixed grid of starting points (deterministic);
    ValueError without compute-0 points (when ``r0`` is None), with negative compute or fewer than 3 distinct
    positive computes."""
    arr = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    c, p = arr[:, 0], arr[:, 1]
    if np.any(c < 0) or not np.all(np.isfinite(arr)):
        raise ValueError("curve points must have finite values and compute >= 0")
    if r0 is None:
        if not np.any(c == 0):
            raise ValueError("no points at compute 0 to take R0 from: include the step-0 evaluation or pass r0")
        r0 = float(p[c == 0].mean())
    c_pos, p_pos = c[c > 0], p[c > 0]
    if np.unique(c_pos).size < 3:
        raise ValueError("need points at 3 or more distinct computes > 0 to fit A, B and C_mid")
    c_max = float(c.max())
    x = c_pos / c_max  # compute in units of the budget, and log(C_mid / c_max), keep the problem well conditioned
    log_x = np.log(x)

    def residuals(theta: np.ndarray) -> np.ndarray:
        a, b, log_mid = theta
        return r0 + (a - r0) * expit(b * (log_x - log_mid)) - p_pos

    def jacobian(theta: np.ndarray) -> np.ndarray:
        # Analytic derivatives: the fit runs 12 times per curve and n_boot times more in the bootstrap.
        a, b, log_mid = theta
        s = expit(b * (log_x - log_mid))
        slope = (a - r0) * s * (1 - s)
        return np.column_stack([s, slope * (log_x - log_mid), -slope * b])

    lower = np.array([0.0, _B_BOUNDS[0], math.log(_MID_BOUNDS[0])])
    upper = np.array([1.0, _B_BOUNDS[1], math.log(_MID_BOUNDS[1])])
    a_start = min(float(p_pos.max()) + 0.02, 0.999)
    best = None
    for mid in _MID_STARTS:
        for b in _B_STARTS:
            start = np.array([a_start, b, math.log(mid)])
            result = least_squares(residuals, start, jac=jacobian, bounds=(lower, upper))
            rss = float(np.sum(result.fun**2))
            if best is None or rss < best[0]:
                best = (rss, result)
    rss, result = best
    a, b, log_mid = (float(v) for v in result.x)
    c_mid = math.exp(log_mid) * c_max
    converged = bool(result.success) and math.isfinite(rss)
    reason = _unidentified_reason(converged, b, c_mid, c_max)
    return CurveFit(r0, a, b, c_mid, rss, int(c_pos.size), c_max, converged, not reason, reason)


def _unidentified_reason(converged: bool, b: float, c_mid: float, c_max: float) -> str:
    if not converged:
        return "the least-squares fit did not converge"
    if c_mid > c_max:
        ratio = c_mid / c_max
        return f"midpoint beyond the observed compute (C_mid = {ratio:.1f}x the budget): the ceiling is not approached"
    if any(abs(b - bound) <= 1e-3 * bound for bound in _B_BOUNDS):
        return f"steepness at its bound (B = {b:g}): the ceiling trades off against it"
    return ""


def bootstrap_fit(
    curves: Sequence[Sequence[tuple[float, float]]], n_boot: int = 500, seed: int = 0, level: float = 0.95
) -> CurveFit:
    """The fit to all seeds' points pooled, with ``level`` percentile intervals for A, B and C_mid over ``n_boot``
    refits on seeds resampled with replacement (those that converged), and the share of refits that are identified;
    below 90% the point fit is marked not identified. Deterministic for a given ``seed``."""
    if len(curves) < 2:
        raise ValueError("a seed bootstrap needs curves from 2 or more seeds")
    point = fit_sigmoid([pt for curve in curves for pt in curve])
    rng = np.random.default_rng(seed)
    fits: list[CurveFit] = []
    identified = 0
    for _ in range(n_boot):
        draw = rng.integers(0, len(curves), size=len(curves))
        try:  # a resample can lack the compute-0 points or enough computes; it counts as an unidentified refit
            fit = fit_sigmoid([pt for i in draw for pt in curves[i]])
        except ValueError:
            continue
        identified += fit.identified
        if fit.converged:
            fits.append(fit)
    share = identified / n_boot if n_boot else math.nan
    tails = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def interval(values: list[float]) -> tuple[float, float]:
        return tuple(float(v) for v in np.percentile(values, tails)) if values else (math.nan, math.nan)

    a_low, a_high = interval([f.a for f in fits])
    b_low, b_high = interval([f.b for f in fits])
    mid_low, mid_high = interval([f.c_mid for f in fits])
    reason = point.reason
    if not share >= MIN_BOOT_IDENTIFIED:  # NaN (no refits) fails too
        low_share = f"identified in only {100 * share:.0f}% of seed-bootstrap refits"
        reason = f"{reason}; {low_share}" if reason else low_share
    return dataclasses.replace(
        point,
        identified=not reason,
        reason=reason,
        a_low=a_low,
        a_high=a_high,
        c_mid_low=mid_low,
        c_mid_high=mid_high,
        b_low=b_low,
        b_high=b_high,
        boot_identified_share=share,
    )


def _ceiling_label(fit: CurveFit) -> str:
    if not fit.identified:
        return "A n.i."
    if math.isnan(fit.a_low):
        return f"A={fit.a:.2f}"
    return f"A={fit.a:.2f} [{fit.a_low:.2f}, {fit.a_high:.2f}]"


def plot_curves(
    groups: dict[str, tuple[list[list[tuple[float, float]]], CurveFit | None]],
    path: str | Path,
    title: str,
    ylabel: str = "held-out pass rate (sampled)",
) -> None:
    """One figure of pass rate (``ylabel``) against rollout tokens: per variant its seeds' points and its fitted
    curve (dashed when the ceiling is not identified), saved to ``path`` (PNG at 120 dpi)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for index, (name, (curves, fit)) in enumerate(groups.items()):
        color = f"C{index}"
        pts = np.asarray([pt for curve in curves for pt in curve], dtype=np.float64).reshape(-1, 2)
        ax.scatter(pts[:, 0], pts[:, 1], s=10, color=color, alpha=0.35, linewidths=0)
        if fit is None:
            ax.plot([], [], color=color, label=name)  # a legend entry for a variant without a fit
            continue
        grid = np.linspace(0.0, 1.05 * fit.c_max, 200)
        ax.plot(
            grid,
            sigmoid_curve(grid, fit.r0, fit.a, fit.b, fit.c_mid),
            color=color,
            linestyle="-" if fit.identified else "--",
            label=f"{name}: {_ceiling_label(fit)}",
        )
    ax.set_xlabel("rollout tokens (generated)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _with_interval(value: float, low: float, high: float, fmt: str) -> str:
    if math.isnan(low) or math.isnan(high):
        return format(value, fmt)
    return f"{value:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def fit_table(fits: dict[str, CurveFit], finals: dict[str, float], areas: dict[str, float] | None = None) -> list[str]:
    """Markdown lines: a table of the fitted parameters per variant (C_mid in thousands of tokens) with their
    bootstrap intervals and the mean final pass rate (and, with ``areas``, the mean curve area), 'n.i.' for the
    ceiling and midpoint of an unidentified fit, and a numbered list of the reasons below it."""
    area_head, area_rule = (" curve area (mean) |", "---|") if areas is not None else ("", "")
    lines = [
        "| variant | R0 | A [95% CI] | B [95% CI] | C_mid [95% CI] (tokens, thousands) | identified | final (mean) |"
        + area_head,
        "|---|---|---|---|---|---|---|" + area_rule,
    ]
    notes: list[str] = []
    for name, fit in fits.items():
        b = _with_interval(fit.b, fit.b_low, fit.b_high, ".2f")
        if fit.identified:
            a = _with_interval(fit.a, fit.a_low, fit.a_high, ".3f")
            mid = _with_interval(fit.c_mid / 1e3, fit.c_mid_low / 1e3, fit.c_mid_high / 1e3, ".1f")
            flag = "yes"
        else:
            notes.append(f"{len(notes) + 1}. {name}: {fit.reason}")
            a, mid, flag = "n.i.", "n.i.", f"no ({len(notes)})"
        final = finals.get(name, math.nan)
        final_cell = "—" if math.isnan(final) else f"{final:.3f}"
        area = "" if areas is None else f" {areas[name]:.3f} |" if name in areas else " — |"
        lines.append(f"| {name} | {fit.r0:.3f} | {a} | {b} | {mid} | {flag} | {final_cell} |{area}")
    if notes:
        lines += ["", "Not identified (n.i.): the ceiling would be an extrapolation —", "", *notes]
    return lines
