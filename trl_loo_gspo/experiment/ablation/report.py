"""The report of an equal-budget ablation (method §5.2), from its run records alone: ``results.csv``,
``process_metrics.csv``, ``report.md``, ``pass_rate_vs_tokens.png`` and ``compute_curves.png``.

This module only reads records (it trains nothing and changes no record), so it is left out of the source hash of
:mod:`.provenance`: a report can be improved and rewritten from committed records without retraining them.

The report, on the plan's declared ``primary_metric`` (:data:`.inference.METRICS`): each variant against the baseline
(paired by seed), below the warm start's value (no training) where the records keep it; the plan's ``primary``
contrast tested alone (paired t and exact sign-flip p, the minimum detectable effect with its uncertainty); the
``contrasts`` and the ``option_contrasts`` each as one family with Holm's correction on both tests and the MDE at the
corrected level; the declared secondary metrics with the same statistics (:mod:`.secondaries`); compute–performance
curves fitted per variant (:mod:`.curves`, ScaleRL's sigmoid) and the paired curve differences of each contrast
(:mod:`.curve_pairs`); the variants at the plan's ``common_rate``; the sweep; what each variant did with the budget;
where the clip bites; the caveats.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from pathlib import Path

from .curve_pairs import curve_pairs_section
from .inference import (
    METRICS,
    areas,
    common_rate_section,
    curves_by_seed,
    curves_section,
    family_section,
    family_titles,
    finals,
    primary_section,
    warm_start,
)
from .multiplicity import holm, paired_p_value, simultaneous_interval
from .plan import AblationPlan
from .secondaries import WARM_START, secondaries_section
from .stats import differences_sd, minimum_detectable_effect, paired_difference, seeds_needed, verdict
from .sweep import sweep_section

#: Per-step process-feedback safeguards kept in each run record (method §6), and written to process_metrics.csv.
PROCESS_KEYS = (
    "process/corr_final/step",
    "process/positive_in_failed",
    "process/signal_mean",
    "process/pass_rate",
    "process/frac_flagged",
    "process/divergence",
)


CSV_COLUMNS = (
    "name",
    "seed",
    "final_pass_rate",
    "best_pass_rate",
    "final_pass_at_1",
    "auc",
    "generated_tokens",
    "effective_tokens",
    "steps",
    "seconds",
    "clip_fraction",
    "entropy",
    "kl",
    "filtered_fraction",
    "anomalies",
    # (records made since #47: the warm start's figures, the greedy curve's area, where the clip bit)
    "start_pass_at_1",
    "start_pass_rate",
    "greedy_auc",
    "offpolicy_clip_fraction",
    "gradient_answers",
)


#: Every file :func:`write_outputs` can write, in the order it writes them, and when it does (always when empty): the
#: runner names them from here before the report phase and names those written after it.
REPORT_FILES = {
    "results.csv": "",
    "process_metrics.csv": "if a run used process feedback",
    "report.md": "",
    "compute_curves.png": "if curves can be fitted",
    "pass_rate_vs_tokens.png": "",
}


def announced_files() -> list[str]:
    """:data:`REPORT_FILES` as the report phase announces them: ``compute_curves.png if curves can be fitted``."""
    return [name + (f" {when}" if when else "") for name, when in REPORT_FILES.items()]


def write_outputs(
    plan: AblationPlan,
    records: list[dict],
    sweep_records: list[dict] | None = None,
    common_records: list[dict] | None = None,
) -> list[Path]:
    """Write ``results.csv``, ``process_metrics.csv`` (runs with process feedback), ``report.md`` (with the sweep's
    account when there was one, and the runs at the common rate), ``pass_rate_vs_tokens.png`` and, where curves
    can be fitted, ``compute_curves.png`` (:data:`REPORT_FILES`); return the paths written, in that order."""
    results, process, markdown, curves, plot_path = (Path(plan.output_dir) / name for name in REPORT_FILES)
    out = results.parent
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with open(results, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    written.append(results)
    logged = [(r["name"], r["seed"], e) for r in records for e in r.get("process_log") or []]
    if logged:
        with open(process, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "seed", "step", *PROCESS_KEYS])
            for name, seed, entry in logged:
                writer.writerow([name, seed, entry.get("step"), *(entry.get(k, "") for k in PROCESS_KEYS)])
        written.append(process)
    figure = curves.with_name(f".{curves.stem}.{os.getpid()}.png")  # written only where curves can be fitted
    try:
        text = report(plan, records, sweep_records or [], common_records, figure=figure)
        markdown.write_text(text)
        written.append(markdown)
        if figure.exists():
            figure.replace(curves)
            written.append(curves)
    finally:
        figure.unlink(missing_ok=True)
    plot(records, plot_path, plan.primary_metric)
    written.append(plot_path)
    return written


def _by_name(records: list[dict]) -> dict[str, dict[int, dict]]:
    by_name: dict[str, dict[int, dict]] = {}
    for r in records:
        by_name.setdefault(r["name"], {})[r["seed"]] = r
    return by_name


def report(
    plan: AblationPlan,
    records: list[dict],
    sweep_records: list[dict] | None = None,
    common_records: list[dict] | None = None,
    figure: Path | None = None,
) -> str:
    """The Markdown report: each variant vs the baseline (paired by seed) under the warm start's value, the primary
    contrast, the two families of contrasts, the secondary metrics, compute curves (their figure written to
    ``figure`` when given) and paired curve differences, the common rate, the sweep, diagnostics, the clip, caveats."""
    base_name = plan.baseline.get("name", "baseline")
    by_name = _by_name(records)
    baseline = by_name.get(base_name, {})
    round_tokens = plain_round_tokens(plan, baseline)
    metric = METRICS[plan.primary_metric]
    declared = "" if plan.primary_metric == "sampled" else " (declared in the plan: `primary_metric: greedy`)"
    lines = [
        f"# Ablation report: {plan.task}, {plan.rollout_tokens:,} rollout tokens per run, seeds {plan.seeds}",
        "",
        f"Baseline: `{base_name}` ({'stock TRL GRPO' if plan.stock_baseline else 'LooGspoTrainer'}). "
        f"Primary metric{declared}: {metric.description} on the held-out "
        "validation split; differences are paired by seed with a 95% t interval over seeds.",
        "",
        f"| variant | n | {metric.label} | Δ vs baseline | 95% CI | Δ AUC | verdict | MDE | seeds for Δ "
        "| gen. tokens | overshoot | eff. tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    start = warm_start(by_name, metric.start)
    if start:
        lines.append(f"| {WARM_START} | {len(start)} | {sum(start.values()) / len(start):.3f} | — | — | — | — | — | — "
                     "| 0 | — | — |")  # fmt: skip
    for name, runs in by_name.items():
        final = finals(runs, plan.primary_metric)
        mean_final = sum(final.values()) / len(final) if final else math.nan
        gen = sum(r["generated_tokens"] for r in runs.values()) / len(runs)
        over = f"{gen / plan.rollout_tokens - 1:+.1%}"  # generated tokens past the equal budget
        if round_tokens:
            worst = max(r["generated_tokens"] - plan.rollout_tokens for r in runs.values()) / round_tokens
            over += f", max {worst:.2f} round"
        eff_values = [r["effective_tokens"] for r in runs.values() if r.get("effective_tokens") is not None]
        eff = f"{sum(eff_values) / len(eff_values):,.0f}" if eff_values else "—"
        if name == base_name:
            lines.append(
                f"| {name} (baseline) | {len(runs)} | {mean_final:.3f} | — | — | — | — | — | — | {gen:,.0f} | {over} "
                f"| {eff} |"
            )
            continue
        n, cells = _paired_cells(plan, runs, baseline)
        lines.append(f"| {name} | {n} | {mean_final:.3f} | {cells} | {gen:,.0f} | {over} | {eff} |")
    lines += [
        "",
        "MDE: the smallest paired difference this many seeds detects with 80% power at the 5% level, given the "
        "spread of the observed differences; seeds for Δ: how many seeds would make the observed Δ detectable; "
        "overshoot: generated tokens past the budget (mean over seeds; a run stops at the end of the step that "
        "reaches the budget, and the learning-curve area is cut at the budget)"
        + (
            f", and the largest over seeds in plain generation rounds (one round of the baseline: {round_tokens:,.0f} "
            f"generated tokens on average). {_within_one_round(plan, by_name, round_tokens)}"
            if round_tokens
            else "."
        ),
    ]
    if start:
        lines += [
            "",
            f"{WARM_START}: the policy every run starts from, evaluated before its first step (mean over the "
            f"{len(start)} seeds; the same for every variant of a seed).",
        ]
    lines += primary_section(plan, by_name)
    families = family_titles(plan)
    for pairs, title in families:
        # (the component family alone keeps the heading it had before the option family existed)
        lines += contrast_section(plan, by_name, pairs, title if len(families) > 1 or not plan.contrasts else None)
    for pairs, title in families:
        lines += family_section(plan, by_name, pairs, title)
    lines += secondaries_section(plan, by_name)
    lines += curves_section(plan, by_name, figure)
    lines += curve_pairs_section(plan, by_name)
    lines += common_rate_section(plan, _by_name(common_records or []))
    lines += sweep_section(plan, sweep_records or [])
    lines += diagnostics_section(by_name)
    lines += clip_section(by_name)
    lines += [
        "",
        "Caveats (method §5.2): every run had the same budget of *generated* tokens, which does not mean the same "
        "number of effective updates (filtering, clipping and zero-advantage groups change how many tokens move the "
        "policy: see the effective-token column); a gain that does not survive the equal-budget comparison, or comes "
        "only from more generation, reward hacking or evaluation-set filtering, does not count. With few seeds the "
        "interval is wide: 'no detectable difference' is not evidence of no difference.",
    ]
    lines += process_section(records)
    return "\n".join(lines) + "\n"


def plain_round_tokens(plan: AblationPlan, baseline: dict[int, dict]) -> float | None:
    """Generated tokens of one generation round of the baseline (mean over its seeds): the unit "one plain step"
    of the equal-budget rule; ``None`` without baseline runs."""
    per_round = []
    for r in baseline.values():
        spg = r.get("steps_per_generation") or plan.common.get("steps_per_generation") or 1
        if r.get("steps"):
            per_round.append(r["generated_tokens"] / (r["steps"] / spg))
    return sum(per_round) / len(per_round) if per_round else None


def _within_one_round(plan: AblationPlan, by_name: dict[str, dict[int, dict]], round_tokens: float) -> str:
    over = sorted(
        name
        for name, runs in by_name.items()
        if max(r["generated_tokens"] for r in runs.values()) - plan.rollout_tokens > round_tokens
    )
    if over:
        return f"Past the budget by more than one plain round: {', '.join(over)}."
    return "Every run of every variant stopped within one plain round of the budget."


def _paired_cells(plan: AblationPlan, a: dict[int, dict], b: dict[int, dict]) -> tuple[int, str]:
    """``(n, cells)``: the paired figures of ``a − b`` over the seeds both have, as table cells — Δ of the plan's
    primary metric, 95% CI, Δ AUC (of its curve), verdict, minimum detectable effect, seeds that would make Δ
    detectable."""
    metric, budget = plan.primary_metric, plan.rollout_tokens
    diff = paired_difference(finals(b, metric), finals(a, metric))
    auc = paired_difference(areas(b, metric, budget), areas(a, metric, budget))
    ci = f"[{diff.low:+.3f}, {diff.high:+.3f}]" if diff.n >= 2 else "n < 2"
    sd = differences_sd(diff)
    mde = minimum_detectable_effect(sd, diff.n)
    needed = seeds_needed(sd, diff.mean)
    mde_cell = "—" if math.isnan(mde) else f"{mde:.3f}"
    return diff.n, f"{diff.mean:+.3f} | {ci} | {auc.mean:+.3f} | {verdict(diff)} | {mde_cell} | {needed or '—'}"


def contrast_section(
    plan: AblationPlan,
    by_name: dict[str, dict[int, dict]],
    pairs: list[list[str]] | None = None,
    title: str | None = None,
) -> list[str]:
    """One family of contrasts (``pairs``, default the plan's ``contrasts``: e.g. a component added to GSPO, or
    removed from the full combination), paired; then the same contrasts corrected for their number (Holm's p-values,
    Bonferroni simultaneous intervals). ``title``: the family's name in the heading (none: "Contrasts")."""
    pairs = plan.contrasts if pairs is None else pairs
    if not pairs:
        return []
    metric = plan.primary_metric
    lines = [
        "",
        f"## {title or 'Contrasts'} between variants (a − b, paired by seed)",
        "",
        f"| contrast | n | Δ {METRICS[metric].label} | 95% CI | Δ AUC | verdict | MDE | seeds for Δ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    diffs = []
    for a, b in pairs:
        n, cells = _paired_cells(plan, by_name.get(a, {}), by_name.get(b, {}))
        lines.append(f"| {a} − {b} | {n} | {cells} |")
        diffs.append(paired_difference(finals(by_name.get(b, {}), metric), finals(by_name.get(a, {}), metric)))
    family = len(diffs)
    p_values = [paired_p_value(d) for d in diffs]
    lines += [
        "",
        f"Corrected for {family} contrasts (the raw intervals above hold one at a time): Holm's step-down p-values "
        f"(family-wise error 5%) and Bonferroni intervals that hold for all {family} together.",
        "",
        "| contrast | p (paired t) | Holm p | simultaneous 95% CI | verdict after correction |",
        "|---|---|---|---|---|",
    ]
    for (a, b), diff, p, adjusted in zip(pairs, diffs, p_values, holm(p_values), strict=True):
        low, high = simultaneous_interval(diff, family)
        ci = "n < 2" if math.isnan(low) else f"[{low:+.3f}, {high:+.3f}]"
        verdict_cell = "—" if math.isnan(adjusted) else ("detected" if adjusted < 0.05 else "not detected")
        lines.append(f"| {a} − {b} | {_p(p)} | {_p(adjusted)} | {ci} | {verdict_cell} |")
    return lines


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


#: Per-variant diagnostics of the report (record key, column title, format), means over seeds (method §5.2's list).
DIAGNOSTICS = (
    ("valid_groups", "groups with signal", ".3f"),
    ("filtered_fraction", "filtered", ".3f"),
    ("clip_fraction", "clip fraction", ".4f"),
    ("clip_fraction_tokens", "clipped tokens", ".4f"),
    ("offpolicy_clip_fraction", "clipped off-policy", ".3f"),
    ("gradient_answers", "grad. answers", ",.0f"),
    ("epsilon_low_final", "final ε_low", ".2g"),
    ("group_size_mean", "K mean", ".2f"),
    ("group_size_sd", "K sd", ".2f"),
    ("truncation", "truncated", ".3f"),
    ("entropy", "entropy", ".3f"),
    ("steps", "steps", ".0f"),
    ("generated_tokens", "gen. tokens", ",.0f"),
    ("effective_tokens", "eff. tokens", ",.0f"),
    ("seconds", "wall s", ".0f"),
)


def diagnostics_section(by_name: dict[str, dict[int, dict]]) -> list[str]:
    """What each variant did with its budget, means over its seeds ("—" where a run did not log the value)."""

    def mean(runs: dict[int, dict], key: str, spec: str) -> str:
        values = [r[key] for r in runs.values() if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
        return format(sum(values) / len(values), spec) if values else "—"

    lines = [
        "",
        "## What each variant did with the budget (means over seeds)",
        "",
        "Training-time means over the logged steps: groups with signal (`groups/frac_with_signal`), filtered "
        "(`sampling/frac_filtered`, dynamic sampling only), clip fraction (answers on a clipped branch — with our "
        "token-level loss, answers with a clipped token; token-level for TRL's losses), clipped tokens (the "
        "token-weighted fraction, every loss), K mean / sd (answers per prompt; the sd is 0 unless K varies), "
        "truncated (`completions/clipped_ratio`), entropy (nats/token); clipped off-policy (answers with a "
        "non-zero advantage on a clipped branch, of those trained on after the first step of their round), grad. "
        "answers (answers that carried a gradient: Â ≠ 0 and not clipped) and final ε_low (our loss only); then the "
        "run's optimizer steps, generated and effective tokens (tokens of answers with a non-zero advantage, "
        "clipped or not) and wall time.",
        "",
        "| variant | " + " | ".join(title for _, title, _ in DIAGNOSTICS) + " |",
        "|---|" + "---|" * len(DIAGNOSTICS),
    ]
    for name, runs in by_name.items():
        lines.append(f"| {name} | " + " | ".join(mean(runs, key, spec) for key, _, spec in DIAGNOSTICS) + " |")
    return lines


def clip_section(by_name: dict[str, dict[int, dict]]) -> list[str]:
    """Where each variant's clip bit, by the step's position in its generation round (runs of our loss only: the
    records' ``clip_stats``): the clipped fraction of answers with Â ≠ 0 and the p90 of |log s_i|, means over seeds;
    then the variants none of whose runs kept them. Empty when no run kept them."""
    rows: list[str] = []
    unrecorded = [name for name, runs in by_name.items() if not any(r.get("clip_stats") for r in runs.values())]
    for name, runs in by_name.items():
        stats = [r["clip_stats"] for r in runs.values() if r.get("clip_stats")]
        positions = sorted({p for st in stats for p in st["by_position"]}, key=int)
        for position in positions:
            figures = [st["by_position"][position] for st in stats if position in st["by_position"]]

            def mean(key: str, spec: str, figures=figures) -> str:
                values = [f[key] for f in figures if isinstance(f.get(key), (int, float))]
                return format(sum(values) / len(values), spec) if values else "—"

            rows.append(
                f"| {name} | {position} | {mean('clipped_fraction', '.3f')} | {mean('upper_fraction', '.3f')} | "
                f"{mean('lower_fraction', '.3f')} | {mean('abs_log_ratio_p50', '.2e')} | "
                f"{mean('abs_log_ratio_p90', '.2e')} | {mean('gradient_answers', ',.0f')} |"
            )
    if not rows:
        return []
    return [
        "",
        "## Where the clip bites (our loss; means over seeds)",
        "",
        "By the optimizer step's position in its generation round (0: the round's first step, where s_i = 1 up to "
        "numerical noise): clipped (answers with Â ≠ 0 on a clipped branch), upper / lower (of the answers with "
        "Â > 0 / Â < 0), |log s_i| median and p90 (the run's histogram, within a factor 1.12), answers that carried "
        "a gradient.",
        "",
        "| variant | position | clipped | upper | lower | \\|log s\\| p50 | \\|log s\\| p90 | grad. answers |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ] + (
        [
            "",
            "Not recorded per answer (TRL computes the loss and keeps no per-answer decisions): "
            f"{', '.join(unrecorded)}; their token-weighted clipped fraction is the diagnostics' 'clipped tokens'.",
        ]
        if unrecorded
        else []
    )


def process_section(records: list[dict]) -> list[str]:
    """The method §6 safeguards per variant (runs with process feedback only): how the span signal relates to the
    final verification, and what the hack detectors flagged. Empty when no run logged process metrics."""
    by_name: dict[str, list[dict]] = {}
    for r in records:
        if r.get("process_log"):
            by_name.setdefault(r["name"], []).extend(r["process_log"])
    if not by_name:
        return []

    def mean(entries: list[dict], key: str) -> str:
        values = [e[key] for e in entries if isinstance(e.get(key), (int, float)) and not math.isnan(e[key])]
        return f"{sum(values) / len(values):.3f}" if values else "—"

    lines = [
        "",
        "## Process signal vs final verification (method §6)",
        "",
        "Means over every logged training step of every seed. corr: point-biserial correlation between an answer's "
        "mean step signal and its final verification; positive in failed: fraction of the spans of finally failing "
        "answers that got a positive process advantage; flagged: fraction of spans flagged by the hack detectors "
        "(unrelated or trivial steps); divergence: fraction of steps where the process signal rose while the final "
        "pass rate fell over the window. Per-step values: process_metrics.csv.",
        "",
        "| variant | steps | corr(step signal, final) | positive in failed | signal mean | train pass rate | flagged "
        "| divergence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entries in by_name.items():
        lines.append(
            f"| {name} | {len(entries)} | {mean(entries, 'process/corr_final/step')} | "
            f"{mean(entries, 'process/positive_in_failed')} | {mean(entries, 'process/signal_mean')} | "
            f"{mean(entries, 'process/pass_rate')} | {mean(entries, 'process/frac_flagged')} | "
            f"{mean(entries, 'process/divergence')} |"
        )
    return lines


def plot(records: list[dict], path: Path, metric: str = "sampled") -> None:
    """Validation pass rate vs rollout tokens per variant (mean and min–max over seeds), saved to ``path``: the
    curve of ``metric`` (:data:`.inference.METRICS`; runs whose record lacks it are left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name: dict[str, list[list[tuple[float, float]]]] = {}
    for name, runs in _by_name(records).items():
        for curve in curves_by_seed(runs, metric).values():
            by_name.setdefault(name, []).append(curve)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for index, (name, curves) in enumerate(by_name.items()):
        grid = sorted({t for curve in curves for t, _ in curve})
        values = [[_interpolate(curve, t) for t in grid] for curve in curves]
        mean = [sum(col) / len(col) for col in zip(*values, strict=True)]
        low = [min(col) for col in zip(*values, strict=True)]
        high = [max(col) for col in zip(*values, strict=True)]
        ax.plot(grid, mean, color=f"C{index}", label=f"{name} (n={len(curves)})")
        ax.fill_between(grid, low, high, color=f"C{index}", alpha=0.15)
    ax.set_xlabel("rollout tokens (generated)")
    ax.set_ylabel("validation pass rate (sampled)" if metric == "sampled" else f"validation {METRICS[metric].label}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Equal-budget ablation: mean and min–max over seeds")
    fig.tight_layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig.savefig(path, dpi=120)
    plt.close(fig)


def _interpolate(curve: list[tuple[float, float]], t: float) -> float:
    points = sorted(curve)
    if t <= points[0][0]:
        return points[0][1]
    for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
        if t0 <= t <= t1:
            return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
    return points[-1][1]
