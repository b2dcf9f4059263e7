"""Run an ablation plan (:mod:`.plan`) and report it: train every (variant, seed) to the rollout-token budget,
evaluating on the validation split along the way; keep one record per run (``runs/<variant>/seed<k>.json``, finished
runs are skipped, so a killed ablation continues where it stopped); then write ``results.csv``, ``report.md`` (paired
differences vs the baseline with 95% intervals and a verdict per variant) and ``pass_rate_vs_tokens.png``.
"""

from __future__ import annotations

import copy
import csv
import functools
import json
import math
import os
import time
import warnings
from pathlib import Path

from .multiplicity import holm, paired_p_value, simultaneous_interval
from .plan import AblationPlan, demo_args, demo_task, recipe_args, run_path
from .provenance import StaleRecordsError, run_provenance, stale_reason
from .stats import curve_area, differences_sd, minimum_detectable_effect, paired_difference, seeds_needed, verdict
from .sweep import choose, sweep_budget, sweep_runs, sweep_section, with_learning_rates


def run_one(
    plan: AblationPlan,
    name: str,
    overrides: dict,
    is_baseline: bool,
    seed: int,
    progress=None,
    split: str = "validation",
) -> dict:
    """Train one (variant, seed) to the token budget; evaluate along the way on ``split`` (``"validation"``, or
    ``"tuning"`` for a learning-rate sweep run: :mod:`.sweep`, the sweep's budget); return the record."""
    build = _build_recipe_run if plan.task == "recipe" else _build_demo_run
    trainer, validation_cb, verifier, extra = build(plan, name, overrides, is_baseline, seed, split)
    budget = sweep_budget(plan) if split == "tuning" else plan.rollout_tokens
    return _train_to_budget(
        budget, trainer, validation_cb, verifier, name, overrides, is_baseline, seed, progress, extra
    )


def _build_demo_run(plan: AblationPlan, name: str, overrides: dict, is_baseline: bool, seed: int, split: str):
    """A built-in demo task: its warm-started policy (cached), its exact verifier (with span signals for the
    multi-step task, used only when a run sets ``process_advantage_coef``), scored on ``split``."""
    from ...demo.policy import PolicySpec, load_or_build_policy
    from ...trainer.validation import ValidationCallback

    task, verifier = demo_task(plan, seed)
    spec = PolicySpec(task=task, seed=seed, **plan.policy)
    policy, tokenizer, policy_info = load_or_build_policy(spec, log=lambda _: None)
    train, validation = task.splits()
    if split == "tuning":
        validation = task.tuning_split()
    args = demo_args(plan, name, overrides, is_baseline, seed, task, tuning=split == "tuning")
    trainer = _trainer_cls()(
        model=copy.deepcopy(policy),
        reward_funcs=[verifier],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    validation_cb = ValidationCallback(
        trainer, validation, verifier, plan.eval_every_tokens, samples=plan.eval_samples, seed=seed
    )
    trainer.add_callback(validation_cb)
    extra = {"policy_key": policy_info["key"], "split": split}
    if split == "tuning":
        extra["learning_rate"] = overrides["learning_rate"]
    return trainer, validation_cb, verifier, extra


def _trainer_cls():
    from ...trainer import LooGspoTrainer

    return LooGspoTrainer


def _build_recipe_run(plan: AblationPlan, name: str, overrides: dict, is_baseline: bool, seed: int, split: str):
    """A recipe task: model, data, verifier and validation split from a ``trl-loo-gspo train`` recipe YAML."""
    from ...trainer.validation import ValidationCallback
    from ..build import build_trainer

    stock = is_baseline and plan.stock_baseline
    script_args, training_args, model_args = recipe_args(plan, name, overrides, stock, seed)
    trainer = build_trainer(script_args, training_args, model_args)
    validation_cb = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, ValidationCallback))
    return trainer, validation_cb, validation_cb.verifier, {"recipe": str(plan.recipe)}


def _train_to_budget(budget, trainer, validation_cb, verifier, name, overrides, is_baseline, seed, progress, extra):
    from transformers.trainer_callback import PrinterCallback

    from ...trainer.budget import RolloutTokenBudget

    trainer.remove_callback(PrinterCallback)
    existing = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, RolloutTokenBudget)]
    if existing:  # LooGspoTrainer has one (for rollout_token_budget): give it the plan's budget
        existing[0].budget, existing[0].progress = budget, progress
    else:
        trainer.add_callback(RolloutTokenBudget(trainer, budget, progress))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    if validation_cb.history[-1]["rollout_tokens"] != trainer.generated_tokens_total:
        validation_cb.evaluate()
    curve = [(h["rollout_tokens"], h["eval/pass_rate"]) for h in validation_cb.history]
    logs = [h for h in trainer.state.log_history if "loss" in h]

    def mean_of(key: str) -> float:
        values = [h[key] for h in logs if key in h and h[key] is not None]
        return sum(values) / len(values) if values else math.nan

    return {
        "name": name,
        "seed": seed,
        "baseline": is_baseline,
        "trainer": type(trainer).__name__,
        "final_pass_rate": curve[-1][1],
        "best_pass_rate": max(p for _, p in curve),
        "final_pass_at_1": validation_cb.history[-1]["eval/pass_at_1"],
        "auc": curve_area(curve, budget),
        "curve": curve,
        "generated_tokens": trainer.generated_tokens_total,
        "effective_tokens": getattr(trainer, "effective_tokens_total", None),
        "steps": trainer.state.global_step,
        "steps_per_generation": getattr(trainer.args, "steps_per_generation", None),
        "seconds": round(seconds, 1),
        "clip_fraction": mean_of("clip_ratio/region_answers")
        if "clip_ratio/region_answers" in (logs[0] if logs else {})
        else mean_of("clip_ratio/region_mean"),
        "entropy": mean_of("entropy"),
        "kl": mean_of("kl"),
        "filtered_fraction": mean_of("sampling/frac_filtered"),
        "truncation": mean_of("completions/clipped_ratio"),
        "valid_groups": mean_of("groups/frac_with_signal"),
        "anomalies": mean_of(f"verifiers/{getattr(verifier, 'name', 'verifier')}/unscorable"),
        "overrides": overrides,
        "process_log": [
            {"step": h.get("step"), **{k: h[k] for k in PROCESS_KEYS if k in h}}
            for h in logs
            if "process/signal_mean" in h
        ],
        **extra,
    }


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
)


def run_ablation(plan: AblationPlan, runner=run_one, reuse_stale: bool = False) -> list[dict] | None:
    """Run every missing (variant, seed), then write the CSV, the report and the plot; return the records.

    With a ``sweep`` (:mod:`.sweep`), the sweep's runs come first (scored on the tuning split), and each variant's
    study runs train at the learning rate it chose. Resumable: finished runs are read back, never redone — if their
    record was made by this code for this config (:mod:`.provenance`); a record made by other code or for another
    config raises :class:`StaleRecordsError` before anything trains, unless ``reuse_stale`` (reuse them on purpose).
    Several processes may run the same plan at once (e.g. one per core): each claims a run before training it
    (:mod:`.claims`, a file lock) and skips runs another live process holds; a process that runs out of sweep runs
    waits for the others' to finish (the choice needs them all); the process that finds every run finished writes
    the outputs, the others return ``None``.
    """
    plan.check_configs()  # every run's config, before the first one trains
    sweep_records: list[dict] = []
    runs = plan.runs()
    if plan.sweep:
        jobs = [
            (name, cfg, base, seed, run_path(plan, name, seed, lr), run_provenance(plan, name, cfg, base, seed, split))
            for name, cfg, base, seed, lr in sweep_runs(plan)
            for split in ["tuning"]
        ]
        if not reuse_stale:
            _refuse_stale(plan, [(name, seed, path, prov) for name, _, _, seed, path, prov in jobs])
        while not _execute(plan, jobs, runner, "tuning"):
            time.sleep(10)  # another process is training the last sweep runs
        sweep_records = [json.loads(job[4].read_text()) for job in jobs]
        runs = with_learning_rates(runs, choose(plan, sweep_records))
    jobs = [
        (name, cfg, base, seed, run_path(plan, name, seed), run_provenance(plan, name, cfg, base, seed))
        for name, cfg, base, seed in runs
    ]
    if not reuse_stale:
        _refuse_stale(plan, [(name, seed, path, prov) for name, _, _, seed, path, prov in jobs])
    if not _execute(plan, jobs, runner, "validation"):
        return None  # still being trained by another process: the one that finishes last writes the outputs
    records = [json.loads(job[4].read_text()) for job in jobs]
    write_outputs(plan, records, sweep_records)
    return records


def _execute(plan: AblationPlan, jobs: list, runner, split: str) -> bool:
    """Train every job (name, overrides, is_baseline, seed, record path, provenance) that has no record and that no
    other process holds; return whether every job has its record now."""
    from rich.progress import BarColumn, Progress, TextColumn

    from .claims import claim

    budget = sweep_budget(plan) if split == "tuning" else plan.rollout_tokens
    kwargs = {"split": split} if split == "tuning" else {}  # (runners written for plans without a sweep)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}")
    ) as progress:
        overall = progress.add_task("sweep runs" if split == "tuning" else "runs", total=len(jobs))
        for name, overrides, is_baseline, seed, path, provenance in jobs:
            lock = None if path.exists() else claim(path)
            if lock is None:  # finished earlier, or another process is training it
                progress.advance(overall)
                continue
            try:
                if path.exists():  # finished by another process between the check and the claim
                    continue
                label = f"{name} seed {seed}" + (f" lr {overrides['learning_rate']:g}" if kwargs else "")
                current = progress.add_task(f"{label}: rollout tokens", total=budget)
                report_tokens = functools.partial(_update, progress, current)
                record = runner(plan, name, overrides, is_baseline, seed, report_tokens, **kwargs)
                record["provenance"] = provenance
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(record, indent=2, default=str))
                tmp.replace(path)  # atomic: a killed run leaves no half-written record
                progress.remove_task(current)
            finally:
                lock.release()
            progress.advance(overall)
    return all(job[4].exists() for job in jobs)


def _refuse_stale(plan: AblationPlan, records: list[tuple[str, int, Path, dict]]) -> None:
    """Raise :class:`StaleRecordsError` listing each existing record (name, seed, path, expected provenance) that
    was not made by this code for this run."""
    stale = []
    for name, seed, path, provenance in records:
        if not path.exists():
            continue
        try:
            why = stale_reason(json.loads(path.read_text()), provenance)
        except (OSError, ValueError):
            why = "unreadable"
        if why is not None:
            where = f" (sweep, {path.parent.name})" if path.parent.parent.name == name else ""
            stale.append(f"{name} seed {seed}{where}: {why}")
    if stale:
        listed = "\n".join(f"  - {line}" for line in stale)
        raise StaleRecordsError(
            f"{len(stale)} run record(s) in {plan.output_dir} were not made by this code for this plan and are not"
            f" reused:\n{listed}\nTrain them afresh in another directory (--output-dir) or delete them; to reuse"
            " them on purpose, pass --reuse-stale (their provenance stays in each record)."
        )


def _update(progress, task_id, tokens: int) -> None:
    progress.update(task_id, completed=tokens)


def write_outputs(plan: AblationPlan, records: list[dict], sweep_records: list[dict] | None = None) -> None:
    """Write ``results.csv``, ``process_metrics.csv`` (runs with process feedback), ``report.md`` (with the sweep's
    account when there was one) and the plot."""
    out = Path(plan.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    logged = [(r["name"], r["seed"], e) for r in records for e in r.get("process_log") or []]
    if logged:
        with open(out / "process_metrics.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "seed", "step", *PROCESS_KEYS])
            for name, seed, entry in logged:
                writer.writerow([name, seed, entry.get("step"), *(entry.get(k, "") for k in PROCESS_KEYS)])
    (out / "report.md").write_text(report(plan, records, sweep_records or []))
    plot(records, out / "pass_rate_vs_tokens.png")


def report(plan: AblationPlan, records: list[dict], sweep_records: list[dict] | None = None) -> str:
    """The Markdown report: each variant vs the baseline (paired by seed), contrasts, diagnostics, caveats."""
    base_name = plan.baseline.get("name", "baseline")
    by_name: dict[str, dict[int, dict]] = {}
    for r in records:
        by_name.setdefault(r["name"], {})[r["seed"]] = r
    baseline = by_name.get(base_name, {})
    round_tokens = plain_round_tokens(plan, baseline)
    lines = [
        f"# Ablation report: {plan.task}, {plan.rollout_tokens:,} rollout tokens per run, seeds {plan.seeds}",
        "",
        f"Baseline: `{base_name}` ({'stock TRL GRPO' if plan.stock_baseline else 'LooGspoTrainer'}). "
        "Primary metric: final sampled pass rate on the held-out "
        "validation split; differences are paired by seed with a 95% t interval over seeds.",
        "",
        "| variant | n | final pass rate | Δ vs baseline | 95% CI | Δ AUC | verdict | MDE | seeds for Δ "
        "| gen. tokens | overshoot | eff. tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in by_name.items():
        final = {s: r["final_pass_rate"] for s, r in runs.items()}
        mean_final = sum(final.values()) / len(final)
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
        n, cells = _paired_cells(runs, baseline)
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
    lines += contrast_section(plan, by_name)
    lines += sweep_section(plan, sweep_records or [])
    lines += diagnostics_section(by_name)
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


def _paired_cells(a: dict[int, dict], b: dict[int, dict]) -> tuple[int, str]:
    """``(n, cells)``: the paired figures of ``a − b`` over the seeds both have, as table cells — Δ final pass rate,
    95% CI, Δ AUC, verdict, minimum detectable effect, seeds that would make Δ detectable."""
    diff = paired_difference(
        {s: r["final_pass_rate"] for s, r in b.items()}, {s: r["final_pass_rate"] for s, r in a.items()}
    )
    auc = paired_difference({s: r["auc"] for s, r in b.items()}, {s: r["auc"] for s, r in a.items()})
    ci = f"[{diff.low:+.3f}, {diff.high:+.3f}]" if diff.n >= 2 else "n < 2"
    sd = differences_sd(diff)
    mde = minimum_detectable_effect(sd, diff.n)
    needed = seeds_needed(sd, diff.mean)
    mde_cell = "—" if math.isnan(mde) else f"{mde:.3f}"
    return diff.n, f"{diff.mean:+.3f} | {ci} | {auc.mean:+.3f} | {verdict(diff)} | {mde_cell} | {needed or '—'}"


def contrast_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[str]:
    """The plan's ``contrasts`` (e.g. a component added to GSPO, or removed from the full combination), paired; then
    the same contrasts corrected for their number (Holm's p-values, Bonferroni simultaneous intervals)."""
    if not plan.contrasts:
        return []
    lines = [
        "",
        "## Contrasts between variants (a − b, paired by seed)",
        "",
        "| contrast | n | Δ final pass rate | 95% CI | Δ AUC | verdict | MDE | seeds for Δ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    diffs = []
    for a, b in plan.contrasts:
        n, cells = _paired_cells(by_name.get(a, {}), by_name.get(b, {}))
        lines.append(f"| {a} − {b} | {n} | {cells} |")
        diffs.append(paired_difference(_finals(by_name.get(b, {})), _finals(by_name.get(a, {}))))
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
    for (a, b), diff, p, adjusted in zip(plan.contrasts, diffs, p_values, holm(p_values), strict=True):
        low, high = simultaneous_interval(diff, family)
        ci = "n < 2" if math.isnan(low) else f"[{low:+.3f}, {high:+.3f}]"
        verdict_cell = "—" if math.isnan(adjusted) else ("detected" if adjusted < 0.05 else "not detected")
        lines.append(f"| {a} − {b} | {_p(p)} | {_p(adjusted)} | {ci} | {verdict_cell} |")
    return lines


def _finals(runs: dict[int, dict]) -> dict[int, float]:
    return {s: r["final_pass_rate"] for s, r in runs.items()}


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


#: Per-variant diagnostics of the report (record key, column title, format), means over seeds (method §5.2's list).
DIAGNOSTICS = (
    ("valid_groups", "groups with signal", ".3f"),
    ("filtered_fraction", "filtered", ".3f"),
    ("clip_fraction", "clip fraction", ".4f"),
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
        "(`sampling/frac_filtered`, dynamic sampling only), clip fraction (answers on a clipped branch; token-level "
        "for TRL's losses), truncated (`completions/clipped_ratio`), entropy (nats/token); then the run's optimizer "
        "steps, generated and effective tokens (tokens of answers with a non-zero advantage) and wall time.",
        "",
        "| variant | " + " | ".join(title for _, title, _ in DIAGNOSTICS) + " |",
        "|---|" + "---|" * len(DIAGNOSTICS),
    ]
    for name, runs in by_name.items():
        lines.append(f"| {name} | " + " | ".join(mean(runs, key, spec) for key, _, spec in DIAGNOSTICS) + " |")
    return lines


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


def plot(records: list[dict], path: Path) -> None:
    """Validation pass rate vs rollout tokens per variant (mean and min–max over seeds), saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name: dict[str, list[list[tuple[float, float]]]] = {}
    for r in records:
        by_name.setdefault(r["name"], []).append([tuple(p) for p in r["curve"]])
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
    ax.set_ylabel("validation pass rate (sampled)")
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
