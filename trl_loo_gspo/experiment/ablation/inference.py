"""The inference sections of an ablation report (method §5.2), from run records alone: the pre-registered primary
contrast tested alone, the component contrasts and the option contrasts each as one Holm family (paired t and exact
sign-flip side by side, the minimum detectable effect at the corrected level with its uncertainty),
compute–performance curves fitted per variant (:mod:`.curves`), and the variants at the plan's ``common_rate``.

Every section reads the plan's declared ``primary_metric`` (:data:`METRICS`: which record fields hold its final value,
its curve and its warm-start value; :func:`finals`, :func:`curves`, :func:`warm_start`).

Like :mod:`.report` it trains nothing and changes no record, so :mod:`.provenance` leaves it out of the source hash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from . import exact
from .curves import CurveFit, bootstrap_fit, fit_table, plot_curves
from .plan import AblationPlan
from .stats import curve_area

#: Seed-bootstrap refits per variant for the curve intervals (deterministic: seed 0).
CURVE_BOOTSTRAP = 200
#: Fewest evaluation points past the start for a curve fit (three parameters).
MIN_CURVE_POINTS = 3
ALPHA = 0.05


@dataclass(frozen=True)
class Metric:
    """Where a run record keeps one pass-rate metric, and the name the report's tables give it."""

    final: str  # the final value
    curve: str  # [[generated tokens, value], ...] at every evaluation point
    area: str  # the curve's normalised area up to the run's budget (records made before #47 lack greedy_auc)
    start: str  # the warm start's value (evaluation at 0 tokens; records made before #47 lack it)
    label: str  # in table headings: "Δ {label}"
    description: str  # in prose


#: The plan's ``primary_metric`` values: "sampled" (the pass rate of answers sampled at the training temperature, the
#: report's metric before #47, with its wording) and "greedy" (greedy pass@1, which a lower entropy cannot raise).
METRICS = {
    "sampled": Metric(
        "final_pass_rate", "curve", "auc", "start_pass_rate", "final pass rate", "final sampled pass rate"
    ),
    "greedy": Metric(
        "final_pass_at_1", "greedy_curve", "greedy_auc", "start_pass_at_1", "greedy pass@1", "final greedy pass@1"
    ),
}


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finals(runs: dict[int, dict], metric: str = "sampled") -> dict[int, float]:
    """The final value of ``metric`` (:data:`METRICS`) by seed; seeds whose record lacks it are left out."""
    key = METRICS[metric].final
    return {s: float(r[key]) for s, r in runs.items() if _number(r.get(key))}


def curves_by_seed(runs: dict[int, dict], metric: str = "sampled") -> dict[int, list[tuple[float, float]]]:
    """The curve of ``metric`` (:data:`METRICS`), (generated tokens, value) per evaluation point, by seed; seeds
    whose record lacks it are left out."""
    key = METRICS[metric].curve
    return {s: [(float(t), float(p)) for t, p in r[key]] for s, r in runs.items() if r.get(key)}


def areas(runs: dict[int, dict], metric: str, budget: float) -> dict[int, float]:
    """The normalised area under the curve of ``metric`` by seed: the record's (the runner's, cut at the run's
    budget), else the area of the record's curve cut at ``budget``; seeds with neither are left out."""
    key, seed_curves = METRICS[metric].area, curves_by_seed(runs, metric)
    values = {s: float(r[key]) for s, r in runs.items() if _number(r.get(key))}
    return {**{s: curve_area(c, budget) for s, c in seed_curves.items() if s not in values}, **values}


def warm_start(by_name: dict[str, dict[int, dict]], key: str) -> dict[int, float]:
    """The warm start's value of the record field ``key`` (e.g. ``start_pass_at_1``) by seed: every run of a seed
    starts from the same policy and is evaluated before its first step, so the first record of each seed that has
    the field gives it. Empty when no record has it (records made before #47)."""
    values: dict[int, float] = {}
    for runs in by_name.values():
        for seed, r in runs.items():
            if seed not in values and _number(r.get(key)):
                values[seed] = float(r[key])
    return values


def paired(a: dict[int, dict], b: dict[int, dict], metric: str = "sampled") -> list[float]:
    """``a − b`` final values of ``metric`` over the seeds both have, in seed order."""
    fa, fb = finals(a, metric), finals(b, metric)
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
    diffs = paired(by_name.get(a, {}), by_name.get(b, {}), plan.primary_metric)
    test = exact.test_contrast(f"{a} − {b}", diffs)
    if test.n < 2:
        return ["", "## Primary contrast", "", f"{a} − {b}: fewer than 2 paired seeds."]
    detected = {True: "detected", False: "not detected"}
    ci = f"[{test.low:+.3f}, {test.high:+.3f}]"
    return [
        "",
        "## Primary contrast (pre-registered, tested alone at the 5% level)",
        "",
        f"| contrast | n | Δ {METRICS[plan.primary_metric].label} | 95% CI | p (paired t) | p (exact sign-flip) "
        "| t test | sign-flip test | MDE [95% interval] |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {a} − {b} | {test.n} | {test.mean:+.3f} | {ci} | {_p(test.t_p)} | {_p(test.sign_flip_p)} | "
        f"{detected[test.t_p < ALPHA]} | {detected[test.sign_flip_p < ALPHA]} | {_mde_cell(diffs, ALPHA)} |",
        "",
        "MDE: the smallest true difference this test detects with 80% power at the 5% level given the observed spread "
        "of the paired differences; its interval carries the uncertainty of that spread (chi-square interval of the "
        f"sd). The exact sign-flip test over {test.n} pairs cannot give p below "
        f"{exact.smallest_sign_flip_p(test.n):.4f}.",
    ]


def family_titles(plan: AblationPlan) -> list[tuple[list[list[str]], str]]:
    """``(pairs, title)`` of each family of contrasts the plan declares, in order: its ``contrasts`` ("Component
    contrasts"), then its ``option_contrasts`` ("Option contrasts"); numbered "Family 1 — …" and "Family 2 — …" when
    both are declared (each is Holm-corrected within itself)."""
    families = [(pairs, title) for pairs, title in ((plan.contrasts, "Component contrasts"),
                                                    (plan.option_contrasts, "Option contrasts")) if pairs]  # fmt: skip
    if len(families) < 2:
        return families
    return [(pairs, f"Family {i} — {title[0].lower()}{title[1:]}") for i, (pairs, title) in enumerate(families, 1)]


def family_section(
    plan: AblationPlan,
    by_name: dict[str, dict[int, dict]],
    pairs: list[list[str]] | None = None,
    title: str = "Component contrasts",
) -> list[str]:
    """One family of contrasts (``pairs``, default the plan's ``contrasts``) under ``title``: raw figures, then
    Holm's correction within the family on the paired t and on the exact sign-flip p-values, and the MDE at the
    corrected level (Bonferroni's α/m, the level Holm's first step uses)."""
    pairs = plan.contrasts if pairs is None else pairs
    if not pairs:
        return []
    tests, diffs = [], []
    for a, b in pairs:
        d = paired(by_name.get(a, {}), by_name.get(b, {}), plan.primary_metric)
        diffs.append(d)
        tests.append(exact.test_contrast(f"{a} − {b}", d) if d else None)
    usable = [t for t in tests if t is not None and t.n >= 2]
    family = len(usable)
    if not family:
        return ["", f"## {title}", "", "No contrast has 2 paired seeds yet: no test."]
    adjusted = {row["name"]: row for row in exact.holm_family(usable, ALPHA)} if usable else {}
    level = ALPHA / max(family, 1)
    smallest = min((exact.smallest_sign_flip_p(t.n) for t in usable), default=math.nan)
    lines = [
        "",
        f"## {title} as one family of {family} (Holm-corrected)",
        "",
        f"| contrast | n | Δ {METRICS[plan.primary_metric].label} | raw 95% CI | p (paired t) | Holm p (t) "
        f"| p (exact sign-flip) | Holm p (sign-flip) | after correction | MDE at α/{family} [95% interval] |",
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


def fittable(seed_curves: list[list[tuple[float, float]]]) -> bool:
    """Whether a variant's curves can be fitted: 2 or more seeds, each with its start point (0 tokens), and
    :data:`MIN_CURVE_POINTS` or more distinct evaluation points past the start."""
    points = {t for curve in seed_curves for t, _ in curve if t > 0}
    has_start = all(any(t == 0 for t, _ in curve) for curve in seed_curves)
    return len(points) >= MIN_CURVE_POINTS and len(seed_curves) >= 2 and has_start


def curve_fits(by_name: dict[str, dict[int, dict]], metric: str = "sampled") -> dict[str, CurveFit | None]:
    """The seed-bootstrapped sigmoid of each variant's ``metric`` curves (``None`` with too few evaluation points or
    seeds)."""
    fits: dict[str, CurveFit | None] = {}
    for name, runs in by_name.items():
        seed_curves = list(curves_by_seed(runs, metric).values())
        fits[name] = bootstrap_fit(seed_curves, n_boot=CURVE_BOOTSTRAP, seed=0) if fittable(seed_curves) else None
    return fits


def curves_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]], figure: Path | None = None) -> list[str]:
    """ScaleRL's compute–performance fit per variant, pooled over seeds, with seed-bootstrap intervals; writes the
    figure when ``figure`` is given."""
    metric = plan.primary_metric
    fits = curve_fits(by_name, metric)
    fitted = {name: fit for name, fit in fits.items() if fit is not None}
    if figure is not None and fitted:
        groups = {name: (list(curves_by_seed(by_name[name], metric).values()), fits[name]) for name in by_name}
        what = "pass rate" if metric == "sampled" else METRICS[metric].label
        plot_curves(
            groups,
            figure,
            f"{plan.eval_split.capitalize()} {what} vs generated tokens, sigmoid fit per variant",
            ylabel=f"held-out {what}" + (" (sampled)" if metric == "sampled" else ""),
        )
    if not fitted:
        return []
    mean_final = {name: _mean(finals(runs, metric)) for name, runs in by_name.items() if finals(runs, metric)}
    mean_area = {
        name: _mean(areas(runs, metric, plan.rollout_tokens))
        for name, runs in by_name.items()
        if areas(runs, metric, plan.rollout_tokens)
    }
    skipped = sorted(set(fits) - set(fitted))
    lines = [
        "",
        "## Compute–performance curves (ScaleRL's sigmoid)",
        "",
        ("" if metric == "sampled" else f"Curves of the primary metric, {METRICS[metric].description}. ")
        + "R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) (ScaleRL, Meta 2025) fitted to every evaluation point of every "
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


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values)


def common_rate_section(plan: AblationPlan, common: dict[str, dict[int, dict]]) -> list[str]:
    """Every variant at the plan's pre-declared ``common_rate``: each against the baseline, and the contrasts."""
    if plan.common_rate is None or not common:
        return []
    base = plan.baseline.get("name", "baseline")
    metric = plan.primary_metric
    lines = [
        "",
        f"## Every variant at one common learning rate ({plan.common_rate:g}, declared before the sweep)",
        "",
        "The same seeds and budget; the baseline and each swept variant at this rate instead of its own choice (a "
        "run whose choice was this rate is the study's own run; ablations train at their root's rate in the study "
        "already). Raw paired figures: a check on how much the answer depends on the sweep.",
        "",
        f"| variant | n | {METRICS[metric].label} | Δ vs baseline | 95% CI | p (paired t) | p (exact sign-flip) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in common.items():
        values = finals(runs, metric)
        mean = f"{_mean(values):.3f}" if values else "—"
        if name == base:
            lines.append(f"| {name} (baseline) | {len(values)} | {mean} | — | — | — | — |")
            continue
        lines.append(f"| {name} | {len(values)} | {mean} | {_contrast_cells(common, name, base, metric)} |")
    lines += [
        "",
        f"| contrast | n | Δ {METRICS[metric].label} | 95% CI | p (paired t) | p (exact sign-flip) |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in ([plan.primary] if plan.primary else []) + plan.contrasts + plan.option_contrasts:
        if a not in common or b not in common:
            continue
        lines.append(f"| {a} − {b} | {len(paired(common.get(a, {}), common.get(b, {}), metric))} | "
                     f"{_contrast_cells(common, a, b, metric)} |")  # fmt: skip
    return lines


def _contrast_cells(by_name: dict[str, dict[int, dict]], a: str, b: str, metric: str = "sampled") -> str:
    d = paired(by_name.get(a, {}), by_name.get(b, {}), metric)
    if len(d) < 2:
        return "— | — | — | —"
    t = exact.test_contrast(f"{a} − {b}", d)
    return f"{t.mean:+.3f} | [{t.low:+.3f}, {t.high:+.3f}] | {_p(t.t_p)} | {_p(t.sign_flip_p)}"
