"""What a run record keeps of its validation evaluations (pure functions over ``ValidationCallback.history`` and
``.details``; no model): the greedy and the sampled curve, the warm start's figures (the evaluation at 0 tokens),
per-problem results at the start and the end, unbiased pass@k, pass rates by stratum and the policy's entropy.

The warm start's figures are the no-training reference of a study (docs/experiments.md, "What a run records"); the
per-problem results are what any later metric is computed from without retraining (pass@k for another k, a
bootstrap over problems).
"""

from __future__ import annotations

import math
from typing import Any

from .stats import curve_area, mean_pass_at_k

#: The k of the unbiased pass@k a record keeps (each where the evaluation drew at least k answers per problem).
PASS_KS = (1, 4, 16)


def evaluation_record(
    history: list[dict[str, float]], details: list[dict[str, Any]], labels: list[Any] | None, budget: float
) -> dict[str, Any]:
    """The record's evaluation fields from a run's evaluations (``history`` and ``details`` parallel; the last one
    is the final point, with every sample), ``labels`` the problems' strata (or ``None``), ``budget`` the run's
    token budget (for the curve areas).

    ``curve`` holds the points that drew sampled answers (the sampled pass rate), ``greedy_curve`` every point.
    ``start_*``, ``per_problem["start"]`` and the ``"start"`` entries are ``None`` when no point is at 0 tokens."""
    if not history or len(history) != len(details):
        raise ValueError(f"need one detail per evaluation, got {len(history)} evaluations, {len(details)} details")
    curve = [(h["rollout_tokens"], h["eval/pass_rate"]) for h, d in zip(history, details, strict=True) if d["samples"]]
    greedy_curve = [(h["rollout_tokens"], h["eval/pass_at_1"]) for h in history]
    start = 0 if history[0]["rollout_tokens"] == 0 else None
    ends = {"start": start, "final": len(history) - 1}

    def at(index: int | None, fn) -> Any:
        return None if index is None else fn(history[index], details[index])

    def problems(h: dict, d: dict) -> dict[str, Any]:
        return {"greedy": d["greedy"], "successes": d["successes"]}

    final_rate = history[-1]["eval/pass_rate"]
    return {
        "final_pass_rate": final_rate,
        "best_pass_rate": max((p for _, p in curve), default=math.nan),
        "final_pass_at_1": history[-1]["eval/pass_at_1"],
        "start_pass_rate": at(start, lambda h, d: h["eval/pass_rate"] if d["samples"] else None),
        "start_pass_at_1": at(start, lambda h, d: h["eval/pass_at_1"]),
        "auc": curve_area(curve, budget) if curve else math.nan,
        "greedy_auc": curve_area(greedy_curve, budget),
        "curve": curve,
        "greedy_curve": greedy_curve,
        "per_problem": {
            "samples": details[-1]["samples"],
            "strata": labels,
            **{end: at(i, problems) for end, i in ends.items()},
        },
        "pass_at_k": {end: at(i, lambda h, d: pass_at_ks(d)) for end, i in ends.items()},
        "by_stratum": {end: at(i, lambda h, d: by_stratum(d, labels)) for end, i in ends.items()},
        "eval_entropy": {end: at(i, lambda h, d: h.get("eval/entropy")) for end, i in ends.items()},
    }


def pass_at_ks(detail: dict[str, Any]) -> dict[str, float] | None:
    """Unbiased pass@k (:data:`PASS_KS`, each k ≤ the answers drawn per problem) from one evaluation's per-problem
    success counts; ``None`` when it drew no sampled answers."""
    n, counts = detail["samples"], detail["successes"]
    if not n or not counts:
        return None
    return {str(k): mean_pass_at_k(counts, n, k) for k in PASS_KS if k <= n}


def by_stratum(detail: dict[str, Any], labels: list[Any] | None) -> dict[str, dict[str, float | None]] | None:
    """Greedy pass@1 and sampled pass rate per stratum label (labels in sorted order, as strings); ``None`` without
    labels."""
    if labels is None:
        return None
    if len(labels) != len(detail["greedy"]):
        raise ValueError(f"{len(labels)} labels for {len(detail['greedy'])} problems")
    groups: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    n, successes = detail["samples"], detail["successes"]
    return {
        str(label): {
            "problems": len(rows),
            "greedy": sum(detail["greedy"][i] for i in rows) / len(rows),
            "sampled": sum(successes[i] for i in rows) / (n * len(rows)) if n and successes else None,
        }
        for label, rows in sorted(groups.items())
    }
