"""The shipped chained-addition study (recipes/ablations/chain-study.yaml): every ablation differs from its base in
exactly the fields it names — checked on the built training configs, learning rate included —, the task it runs
on, and its statistics design (no model is trained here)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from trl_loo_gspo.experiment.ablation.plan import AblationPlan, run_args
from trl_loo_gspo.experiment.ablation.sweep import choose, with_choices

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "recipes" / "ablations" / "chain-study.yaml"
#: Fields that name the run, not the method (its output folders).
RUN_IDENTITY = {"output_dir", "logging_dir", "run_name"}


@pytest.fixture(scope="module")
def plan() -> AblationPlan:
    return AblationPlan.from_yaml(PLAN)


def built(plan: AblationPlan, name: str, learning_rate: float) -> dict:
    overrides = {**{n: c for n, c, _ in plan.entries()}[name], "learning_rate": learning_rate}
    args = run_args(plan, name, overrides, False, plan.seeds[0])
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init and f.name not in RUN_IDENTITY}


def differing(a: dict, b: dict) -> set[str]:
    return {key for key in a if a[key] != b[key]}


def test_each_ablation_differs_from_its_base_in_exactly_the_fields_it_names(plan):
    raw = {v["name"]: v for v in yaml.safe_load(PLAN.read_text())["variants"]}
    ablations = {name: v for name, v in raw.items() if "base" in v}
    assert len(ablations) == 7
    for name, variant in ablations.items():
        base = variant["base"]
        fields = differing(built(plan, name, 1e-4), built(plan, base, 1e-4))
        assert fields == set(variant["config"]), (name, base, fields)
        objective, base_objective = built(plan, name, 1e-4), built(plan, base, 1e-4)
        assert all(objective[key] != base_objective[key] for key in variant["config"])  # no no-op override


def test_the_ablations_of_full_are_the_issues_single_field_changes(plan):
    full = built(plan, "full", 1e-4)
    changes = {name: differing(built(plan, name, 1e-4), full) for name in plan.bases() if plan.bases()[name] == "full"}
    assert changes == {
        "full-mean": {"advantage_estimator"},
        "full-std": {"advantage_estimator"},
        "full-answer_mean": {"loss_aggregation"},
        "full-no_ds": {"dynamic_sampling"},
        "full-token_ratio": {"loss_type", "importance_sampling_level", "epsilon", "epsilon_high"},
        "full-varied_k": {"probe_generations", "adaptive_group_size", "min_generations", "max_generations"},
        "full-varied_k-mean": {
            "advantage_estimator", "probe_generations", "adaptive_group_size", "min_generations", "max_generations"
        },
    }  # fmt: skip
    # what the changed fields resolve to: each ablation replaces exactly one component of the objective
    objectives = {name: run_args(plan, name, cfg, False, 0).objective for name, cfg, _ in plan.entries()}
    assert (
        objectives["full"].policy_loss == "response_clip"
        and objectives["full-token_ratio"].policy_loss == "token_clip"
    )
    assert objectives["full-token_ratio"].loss_aggregation == objectives["full"].loss_aggregation == "token_total"
    assert (
        objectives["full-std"].advantage_estimator == "grpo"
        and objectives["full-mean"].advantage_estimator == "group_mean"
    )
    assert objectives["cispo"].loss_type == "cispo" and not objectives["cispo"].uses_own_loss


def test_ablations_train_at_fulls_chosen_rate_whatever_the_sweep_says_about_them(plan):
    records = [
        {"name": name, "learning_rate": lr, "final_pass_rate": score, "auc": score}
        for name in ("grpo", "gspo", "cispo", "full")
        for lr, score in ((5e-5, 0.40), (1e-4, 0.45 if name == "full" else 0.50), (2e-4, 0.47))
    ]
    chosen = choose(plan, records)
    rates = {name: cfg["learning_rate"] for name, cfg, _, _ in with_choices(plan.runs(), chosen)}
    assert rates["full"] == 2e-4 and rates["grpo"] == 1e-4
    assert all(rates[name] == 2e-4 for name in plan.bases())


def test_the_design_the_issue_asks_for(plan):
    assert plan.primary == ["full", "grpo"] and ["full", "grpo"] not in plan.contrasts
    assert len(plan.contrasts) == 6 and len(plan.seeds) >= 8
    assert 2 / 2 ** len(plan.seeds) <= 0.05 / len(plan.contrasts)  # an exact test can pass Holm's first threshold
    assert plan.eval_samples >= 16
    train, validation = plan_task(plan).splits()
    assert len(validation) >= 450 and len(plan_task(plan).tuning_split()) >= 450
    assert plan.rollout_tokens // plan.eval_every_tokens >= 8  # >= 8 points along the budget (plus the start)
    assert plan.sweep and plan.common_rate in plan.sweep["learning_rates"]
    assert plan.common_rate_eval_every_tokens >= plan.rollout_tokens  # final-point comparison: start and end only
    assert plan.common["steps_per_generation"] > 1  # off-policy: clipping has something to act on


def plan_task(plan: AblationPlan):
    from trl_loo_gspo.experiment.ablation.plan import demo_task

    return demo_task(plan, plan.seeds[0])[0]


def test_the_task_spreads_answer_lengths_at_least_threefold():
    task = plan_task(AblationPlan.from_yaml(PLAN))
    train, _ = task.splits()
    lengths = sorted(len(s) + 1 for s in train["solution"])  # reference answers + end of sequence
    assert lengths[9 * len(lengths) // 10] / lengths[len(lengths) // 10] >= 3
