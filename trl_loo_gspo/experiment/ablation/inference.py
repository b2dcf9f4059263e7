"""The inference sections of an ablation report (method §5.2), from run records alone: the pre-registered primary
contrast tested alone, the component contrasts as one Holm family (paired t and exact sign-flip side by side, the
minimum detectable effect at the corrected level with its uncertainty), compute–performance curves fitted per
variant (:mod:`.curves`), and the variants at the plan's ``common_rate``.

Like :mod:`.report` it trains nothing and changes no record, so :mod:`.provenance` leaves it out of the source hash.
"""

from __future__ import annotations

import math
from pathlib import Path

from . import exact
from .curves import CurveFit, bootstrap_fit, fit_table, plot_curves
from .plan import AblationPlan

#: Seed-bootstrap refits per variant for the curve intervals (deterministic: seed 0).
CURVE_BOOTSTRAP = 200
#: Fewest evaluation points past the start for a curve fit (three parameters).
MIN_CURVE_POINTS = 3
ALPHA = 0.05


def finals(runs: dict[int, dict]) -> dict[int, float]:
    """Final pass rate by seed."""
    return {s: r["final_pass_rate"] for s, r in runs.items()}


def paired(a: dict[int, dict], b: dict[int, dict]) -> list[float]:
    """``a − b`` final pass rates over the seeds both have, in seed order."""
    fa, fb = finals(a), finals(b)
    return [fa[s] - fb[s] for s in sorted(set(fa) & set(fb))]


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.4f}" if value < 0.01 else f"{value:.3f}"


def _mde_cell(differences: list[float], alpha: float) -> str:
    n = len(differences)
    if n < 2:
        return "—"
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    value, low, high = exact.mde_interval(sd, n, alpha=alpha)
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def primary_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[str]:
    """The plan's ``primary`` contrast, pre-registered and tested alone at the 5% level (no correction)."""
    if not plan.primary:
        return []
    a, b = plan.primary
    diffs = paired(by_name.get(a, {}), by_name.get(b, {}))
    test = exact.test_contrast(f"{a} − {b}", diffs)
    if test.n < 2:
        return ["", "## Primary contrast", "", f"{a} − {b}: fewer than 2 paired seeds."]
    detected = {True: "detected", False: "not detected"}
    ci = f"[{test.low:+.3f}, {test.high:+.3f}]"
    return [
        "",
        "## Primary contrast (pre-registered, tested alone at the 5% level)",
        "",
        "| contrast | n | Δ final pass rate | 95% CI | p (paired t) | p (exact sign-flip) | t test | sign-flip test "
        "| MDE [95% interval] |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {a} − {b} | {test.n} | {test.mean:+.3f} | {ci} | {_p(test.t_p)} | {_p(test.sign_flip_p)} | "
        f"{detected[test.t_p < ALPHA]} | {detected[test.sign_flip_p < ALPHA]} | {_mde_cell(diffs, ALPHA)} |",
        "",
        "MDE: the smallest true difference this test detects with 80% power at the 5% level given the observed spread "
        "of the paired differences; its interval carries the uncertainty of that spread (chi-square interval of the "
        f"sd). The exact sign-flip test over {test.n} pairs cannot give p below "
        f"{exact.smallest_sign_flip_p(test.n):.4f}.",
    ]


def family_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[str]:
    """The plan's ``contrasts`` as one family: raw figures, then Holm's correction on the paired t and on the exact
    sign-flip p-values, and the MDE at the corrected level (Bonferroni's α/m, the level Holm's first step uses)."""
    if not plan.contrasts:
        return []
    tests, diffs = [], []
    for a, b in plan.contrasts:
        d = paired(by_name.get(a, {}), by_name.get(b, {}))
        diffs.append(d)
        tests.append(exact.test_contrast(f"{a} − {b}", d) if d else None)
    usable = [t for t in tests if t is not None and t.n >= 2]
    family = len(usable)
    if not family:
        return ["", "## Component contrasts", "", "No contrast has 2 paired seeds yet: no test."]
    adjusted = {row["name"]: row for row in exact.holm_family(usable, ALPHA)} if usable else {}
    level = ALPHA / max(family, 1)
    smallest = min((exact.smallest_sign_flip_p(t.n) for t in usable), default=math.nan)
    lines = [
        "",
        f"## Component contrasts as one family of {family} (Holm-corrected)",
        "",
        "| contrast | n | Δ final pass rate | raw 95% CI | p (paired t) | Holm p (t) | p (exact sign-flip) "
        f"| Holm p (sign-flip) | after correction | MDE at α/{family} [95% interval] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for test, d in zip(tests, diffs, strict=True):
        if test is None or test.n < 2:
            continue
        row = adjusted[test.name]
        both = row["t_rejected"] and row["sign_flip_rejected"]
        either = row["t_rejected"] or row["sign_flip_rejected"]
        verdict = "detected (both tests)" if both else "detected by one test only" if either else "not detected"
        lines.append(
            f"| {test.name} | {test.n} | {test.mean:+.3f} | [{test.low:+.3f}, {test.high:+.3f}] | {_p(test.t_p)} | "
            f"{_p(row['t_holm'])} | {_p(test.sign_flip_p)} | {_p(row['sign_flip_holm'])} | {verdict} | "
            f"{_mde_cell(d, level)} |"
        )
    reachable = "can" if smallest <= level else "cannot"
    lines += [
        "",
        f"Holm's first threshold is {ALPHA:g}/{family} = {level:.4f}; the exact sign-flip test at these seeds "
        f"{reachable} reach it (smallest possible p {smallest:.4f}). The MDE column is at the corrected level "
        f"α/{family} (80% power), with the interval from the uncertainty of the observed sd.",
    ]
    return lines


def curve_fits(by_name: dict[str, dict[int, dict]]) -> dict[str, CurveFit | None]:
    """The seed-bootstrapped sigmoid of each variant (``None`` with too few evaluation points or seeds)."""
    fits: dict[str, CurveFit | None] = {}
    for name, runs in by_name.items():
        curves = [[(float(t), float(p)) for t, p in r["curve"]] for r in runs.values()]
        points = {t for curve in curves for t, _ in curve if t > 0}
        has_start = all(any(t == 0 for t, _ in curve) for curve in curves)
        if len(points) < MIN_CURVE_POINTS or len(curves) < 2 or not has_start:
            fits[name] = None
            continue
        fits[name] = bootstrap_fit(curves, n_boot=CURVE_BOOTSTRAP, seed=0)
    return fits


def curves_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]], figure: Path | None = None) -> list[str]:
    """ScaleRL's compute–performance fit per variant, pooled over seeds, with seed-bootstrap intervals; writes the
    figure when ``figure`` is given."""
    fits = curve_fits(by_name)
    fitted = {name: fit for name, fit in fits.items() if fit is not None}
    if figure is not None and fitted:
        groups = {name: ([r["curve"] for r in by_name[name].values()], fits[name]) for name in by_name}
        plot_curves(
            groups, figure, f"{plan.eval_split.capitalize()} pass rate vs generated tokens, sigmoid fit per variant"
        )
    if not fitted:
        return []
    mean_final = {name: sum(finals(runs).values()) / len(runs) for name, runs in by_name.items() if runs}
    mean_area = {name: sum(r["auc"] for r in runs.values()) / len(runs) for name, runs in by_name.items() if runs}
    skipped = sorted(set(fits) - set(fitted))
    lines = [
        "",
        "## Compute–performance curves (ScaleRL's sigmoid)",
        "",
        "R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) (ScaleRL, Meta 2025) fitted to every evaluation point of every "
        "seed of a variant (C: "
        f"generated tokens; R0: the mean pass rate before training); intervals: {CURVE_BOOTSTRAP} refits on seeds "
        "resampled with replacement (percentiles). A is the ceiling, B and C_mid the efficiency. A ceiling is only "
        "reported where the data reach the bend (the fitted midpoint inside the budget, B not at a bound, and the "
        "same in at least 90% of the refits); elsewhere it is 'n.i.' (not identified): the curve is still rising and "
        "its ceiling is an extrapolation. Figure: compute_curves.png.",
        "",
        *fit_table(fitted, mean_final, mean_area),
    ]
    if skipped:
        lines += [
            "",
            f"Not fitted (fewer than {MIN_CURVE_POINTS} evaluation points or 2 seeds): {', '.join(skipped)}.",
        ]
    return lines


def common_rate_section(plan: AblationPlan, common: dict[str, dict[int, dict]]) -> list[str]:
    """Every variant at the plan's pre-declared ``common_rate``: each against the baseline, and the contrasts."""
    if plan.common_rate is None or not common:
        return []
    base = plan.baseline.get("name", "baseline")
    lines = [
        "",
        f"## Every variant at one common learning rate ({plan.common_rate:g}, declared before the sweep)",
        "",
        "The same seeds and budget; the baseline and each swept variant at this rate instead of its own choice (a "
        "run whose choice was this rate is the study's own run; ablations train at their root's rate in the study "
        "already). Raw paired figures: a check on how much the answer depends on the sweep.",
        "",
        "| variant | n | final pass rate | Δ vs baseline | 95% CI | p (paired t) | p (exact sign-flip) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in common.items():
        mean = sum(finals(runs).values()) / len(runs)
        if name == base:
            lines.append(f"| {name} (baseline) | {len(runs)} | {mean:.3f} | — | — | — | — |")
            continue
        lines.append(f"| {name} | {len(runs)} | {mean:.3f} | {_contrast_cells(common, name, base)} |")
    lines += [
        "",
        "| contrast | n | Δ final pass rate | 95% CI | p (paired t) | p (exact sign-flip) |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in ([plan.primary] if plan.primary else []) + plan.contrasts:
        if a not in common or b not in common:
            continue
        lines.append(f"| {a} − {b} | {len(paired(common.get(a, {}), common.get(b, {})))} | "
                     f"{_contrast_cells(common, a, b)} |")  # fmt: skip
    return lines


def _contrast_cells(by_name: dict[str, dict[int, dict]], a: str, b: str) -> str:
    d = paired(by_name.get(a, {}), by_name.get(b, {}))
    if len(d) < 2:
        return "— | — | — | —"
    t = exact.test_contrast(f"{a} − {b}", d)
    return f"{t.mean:+.3f} | [{t.low:+.3f}, {t.high:+.3f}] | {_p(t.t_p)} | {_p(t.sign_flip_p)}"
