"""Hand-made ablation run records for the report's tests (no model): the fields every record has, and the evaluation
fields records keep since #47 (warm-start figures, greedy curve, per-problem counts, pass@k, strata, entropy)."""

from __future__ import annotations

from typing import Any

from trl_loo_gspo.experiment.ablation.plan import AblationPlan


def old_record(name: str, seed: int, sampled: float, greedy: float, **extra: Any) -> dict[str, Any]:
    """A record as the runner wrote it before #47: the final sampled pass rate and greedy pass@1, a two-point curve."""
    return {
        "name": name,
        "seed": seed,
        "baseline": name == "grpo",
        "final_pass_rate": sampled,
        "best_pass_rate": sampled,
        "final_pass_at_1": greedy,
        "auc": sampled / 2,
        "curve": [[0, 0.2], [1000, sampled]],
        "generated_tokens": 1000,
        "effective_tokens": 500,
        **extra,
    }


def new_record(
    name: str,
    seed: int,
    sampled: float,
    greedy: float,
    start: tuple[float, float] = (0.25, 0.75),
    **extra: Any,
) -> dict[str, Any]:
    """A record with the #47 fields: ``start`` is the warm start's (sampled, greedy) pass rate."""
    return old_record(
        name,
        seed,
        sampled,
        greedy,
        start_pass_rate=start[0],
        start_pass_at_1=start[1],
        greedy_curve=[[0, start[1]], [500, (start[1] + greedy) / 2], [1000, greedy]],
        greedy_auc=greedy / 2,
        **extra,
    )


def plan(**overrides: Any) -> AblationPlan:
    """A checked plan over grpo (the baseline), full, alt and opt, 3 seeds, a 1000-token budget."""
    settings: dict[str, Any] = dict(
        output_dir="unused",
        seeds=[0, 1, 2],
        rollout_tokens=1000,
        eval_every_tokens=500,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": name, "config": {}} for name in ("full", "alt", "opt")],
    )
    settings.update(overrides)
    result = AblationPlan(**settings)
    result.validate()
    return result
