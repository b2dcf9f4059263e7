"""A learning rate per variant, chosen on a tuning split before the study (no model here; :mod:`.runner` trains).

A plan with a ``sweep`` section::

    sweep:
      learning_rates: [5.0e-5, 1.0e-4, 2.0e-4]   # every variant (baseline included) is tried at each
      seeds: [100, 101]                          # disjoint from the study's seeds
      rollout_tokens: 200000                     # default: the plan's budget
      eval_every_tokens: 200000                  # default: the plan's (the final-rate metric needs only the end)
      metric: final_pass_rate                    # or auc; on the tuning split, mean over the sweep seeds

trains every (variant, learning rate, sweep seed) to the sweep budget and scores it on the task's *tuning* split
(neither the training nor the validation split: ``task_options.tuning_pairs`` of ``demo-addition``,
``tuning_per_terms`` of ``demo-mixed``). Each variant's
learning rate is the one with the best mean score (ties: the better mean learning-curve area, then the smaller
rate); the study's runs then train at it and are scored on the validation split. Every variant gets the same sweep
(the same rates, seeds and budget), so the tuning effort is equal, and the report states it.
"""

from __future__ import annotations

import math
from typing import Any

SWEEP_KEYS = ("learning_rates", "seeds", "rollout_tokens", "metric", "eval_every_tokens")
METRICS = ("final_pass_rate", "auc")


def sweep_problems(plan: Any, task: Any = None) -> list[str]:
    """What is wrong with the plan's ``sweep`` section (empty when it is usable); ``task``: the plan's built-in task
    (``None`` for a recipe), whose tuning split the sweep scores on."""
    sweep = plan.sweep
    allowed = ", ".join(SWEEP_KEYS)
    problems = [f"sweep: unknown key {key!r} (allowed: {allowed})" for key in sweep if key not in SWEEP_KEYS]
    rates = sweep.get("learning_rates")
    if not (isinstance(rates, list) and len(rates) >= 2 and all(_positive(r) for r in rates)):
        problems.append(f"sweep.learning_rates: a list of at least 2 positive numbers, got {rates!r}")
    elif len(set(rates)) != len(rates):
        problems.append(f"sweep.learning_rates: repeated values in {rates}")
    seeds = sweep.get("seeds")
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        problems.append(f"sweep.seeds: a non-empty list of integers, got {seeds!r}")
    elif set(seeds) & set(plan.seeds):
        problems.append(
            f"sweep.seeds {sorted(set(seeds) & set(plan.seeds))} are also study seeds: a run picked for its tuning "
            "score would then be part of the evidence; use other seeds"
        )
    tokens = sweep.get("rollout_tokens", plan.rollout_tokens)
    if not (isinstance(tokens, int) and tokens > 0):
        problems.append(f"sweep.rollout_tokens: a positive integer, got {tokens!r}")
    every = sweep.get("eval_every_tokens", plan.eval_every_tokens)
    if not (isinstance(every, int) and every > 0):
        problems.append(f"sweep.eval_every_tokens: a positive integer, got {every!r}")
    if sweep.get("metric", "final_pass_rate") not in METRICS:
        problems.append(f"sweep.metric: one of {METRICS}, got {sweep.get('metric')!r}")
    if plan.task == "recipe":
        problems.append("sweep: only for the built-in tasks (a recipe's validation split is its only held-out split)")
    elif not getattr(task, "has_tuning_split", False):
        problems.append(
            "sweep: the task holds out no tuning split; set task_options.tuning_pairs (demo-addition) or "
            "task_options.tuning_per_terms (demo-mixed) > 0"
        )
    fixed = [("common", plan.common), ("baseline", plan.baseline.get("config") or {})]
    fixed += [(f"variant {v.get('name')!r}", v.get("config") or {}) for v in plan.variants]
    if plan.common_rate is not None and not _positive(plan.common_rate):
        problems.append(f"common_rate: a positive learning rate, got {plan.common_rate!r}")
    problems += [f"{where}: sets learning_rate, which the sweep chooses" for where, c in fixed if "learning_rate" in c]
    return problems


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def sweep_budget(plan: Any) -> int:
    """Generated tokens per sweep run."""
    return int(plan.sweep.get("rollout_tokens", plan.rollout_tokens))


def eval_every(plan: Any, split: str) -> int:
    """Generated tokens between evaluations of a run scored on ``split`` (a sweep's own spacing on the tuning
    split)."""
    return (
        int(plan.sweep.get("eval_every_tokens", plan.eval_every_tokens))
        if split == "tuning"
        else plan.eval_every_tokens
    )


def sweep_runs(plan: Any) -> list[tuple[str, dict[str, Any], bool, int, float]]:
    """(name, config overrides with the learning rate, is_baseline, seed, learning rate) of every sweep run; an
    ablation with a ``base`` has none (it trains at its base's rate)."""
    ablations = plan.bases()
    return [
        (name, {**cfg, "learning_rate": lr}, base, seed, lr)
        for seed in plan.sweep["seeds"]
        for lr in plan.sweep["learning_rates"]
        for name, cfg, base in plan.entries()
        if name not in ablations
    ]


def choose(plan: Any, records: list[dict[str, Any]]) -> dict[str, float]:
    """Each variant's learning rate: the best mean tuning score over the sweep seeds (module docstring); an
    ablation with a ``base`` takes its base's."""
    metric = plan.sweep.get("metric", "final_pass_rate")
    scores = sweep_table(records)
    chosen = {}
    for name, by_lr in scores.items():
        chosen[name] = max(
            by_lr, key=lambda lr: (_mean(by_lr[lr], metric), _mean(by_lr[lr], "auc"), -lr)
        )  # fmt: skip
    for name, base in plan.bases().items():
        if base in chosen:
            chosen[name] = chosen[base]
    return chosen


def sweep_table(records: list[dict[str, Any]]) -> dict[str, dict[float, list[dict[str, Any]]]]:
    """Sweep records by variant, then learning rate."""
    table: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for r in records:
        table.setdefault(r["name"], {}).setdefault(float(r["learning_rate"]), []).append(r)
    return table


def _mean(records: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return sum(values) / len(values) if values else -math.inf


def with_learning_rates(
    runs: list[tuple[str, dict[str, Any], bool, int]], chosen: dict[str, float]
) -> list[tuple[str, dict[str, Any], bool, int]]:
    """The study's runs, each at its variant's chosen learning rate."""
    return [(name, {**cfg, "learning_rate": chosen[name]}, base, seed) for name, cfg, base, seed in runs]


def sweep_section(plan: Any, records: list[dict[str, Any]]) -> list[str]:
    """The report's account of the sweep: the tuning score of every (variant, learning rate), the choice, the
    budget every variant got."""
    if not plan.sweep or not records:
        return []
    metric = plan.sweep.get("metric", "final_pass_rate")
    rates = sorted(float(r) for r in plan.sweep["learning_rates"])
    table = sweep_table(records)
    chosen = choose(plan, records)
    seeds = plan.sweep["seeds"]
    per_variant = len(rates) * len(seeds) * sweep_budget(plan)
    lines = [
        "",
        "## Learning rate per variant (sweep on the tuning split)",
        "",
        f"Every variant was trained at each of {len(rates)} learning rates with {len(seeds)} sweep seed(s) "
        f"({', '.join(map(str, seeds))}; not study seeds) for {sweep_budget(plan):,} generated tokens each — the same "
        f"sweep budget for every variant: {per_variant:,} generated tokens — and scored by its "
        f"{metric.replace('_', ' ')} "
        "on the tuning split (problems in neither the training nor the validation split). The study ran each "
        "variant at its best rate (ties: the better curve area, then the smaller rate). Mean over the sweep seeds:",
        "",
        "| variant | " + " | ".join(f"lr {lr:g}" for lr in rates) + " | chosen |",
        "|---|" + "---|" * (len(rates) + 1),
    ]
    for name, by_lr in table.items():
        cells = [f"{_mean(by_lr[lr], metric):.3f}" if lr in by_lr else "—" for lr in rates]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {chosen[name]:g} |")
    ablations = plan.bases()
    if ablations:
        inherited = ", ".join(f"{name} ({base}'s {chosen.get(base, math.nan):g})" for name, base in ablations.items())
        lines += [
            "",
            "Single-field ablations are not swept: each trains at the rate its base chose, so that it differs from "
            f"its base in exactly the fields it names: {inherited}.",
        ]
    edge = sorted(name for name, lr in chosen.items() if lr in (rates[0], rates[-1]))
    if edge:
        lines += [
            "",
            f"At the edge of the grid: {', '.join(edge)} (a better rate may lie outside it).",
        ]
    return lines
