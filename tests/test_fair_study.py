"""The fair study's plan (recipes/ablations/fair-study.yaml, issue 47), checked on the built training configs: the
split is fresh and large enough, the primary metric is declared, every arm gets the same tuning effort where its
parameter allows, the grids span what the issue asks, and each ablation's study run differs from full's in exactly
the fields it names — at full's tuned settings (no model is trained here)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trl_loo_gspo.experiment.ablation.plan import AblationPlan, demo_task, run_args
from trl_loo_gspo.experiment.ablation.sweep import choose, grid_cells, grid_runs, sweep_runs, with_choices

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "recipes" / "ablations" / "fair-study.yaml"
RUN_IDENTITY = {"output_dir", "logging_dir", "run_name"}
#: full's tuned settings in these checks (any cell of its grid would do)
FULL = {"learning_rate": 5e-5, "epsilon": 6.5e-3, "epsilon_high": 8.67e-3}


@pytest.fixture(scope="module")
def plan() -> AblationPlan:
    return AblationPlan.from_yaml(PLAN)


def _records(plan: AblationPlan, runs: list, best: dict) -> list[dict]:
    """Sweep records that score 1 in each variant's ``best`` cell (full's: FULL) and 0 elsewhere."""
    records = []
    for name, overrides, _, seed, cell in runs:
        want = best.get(name, {})
        score = float(all(overrides.get(k) == v for k, v in want.items()))
        records.append({"name": name, "seed": seed, "learning_rate": overrides.get("learning_rate"),
                        "sweep_cell": cell, "final_pass_at_1": score, "greedy_auc": score})  # fmt: skip
    return records


@pytest.fixture(scope="module")
def study(plan: AblationPlan) -> dict[str, dict]:
    """Each variant's study-run config (built), after a two-phase sweep whose records favour FULL for full."""
    best = {"full": FULL, "full-token_ratio": {"epsilon": 0.2}, "full+guard": {"log_ratio_clamp": 0.2},
            "full+ref_kl": {"beta": 1e-2}}  # fmt: skip
    records = _records(plan, sweep_runs(plan), best)
    chosen = choose(plan, records)
    records += _records(plan, grid_runs(plan, chosen), best)
    chosen = choose(plan, records)
    runs = {name: cfg for name, cfg, _, seed in with_choices(plan.runs(), chosen) if seed == plan.seeds[0]}
    built = {}
    for name, cfg in runs.items():
        args = run_args(plan, name, cfg, name == "grpo", plan.seeds[0])
        built[name] = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
        built[name] = {k: v for k, v in built[name].items() if k not in RUN_IDENTITY}
    return built


def differing(a: dict, b: dict) -> set[str]:
    return {key for key in a if a[key] != b[key]}


def test_each_ablation_differs_from_tuned_full_in_exactly_its_fields(plan, study):
    changes = {name: differing(study[name], study["full"]) for name in plan.bases()}
    assert changes == {
        "full-mean": {"advantage_estimator"},
        "full-std": {"advantage_estimator"},
        "full-answer_mean": {"loss_aggregation"},
        "full-no_ds": {"dynamic_sampling"},
        "full-token_ratio": {"loss_type", "importance_sampling_level", "epsilon", "epsilon_high"},  # its own eps
        "full+entropy": {"entropy_feedback"},
        "full+guard": {"log_ratio_clamp"},
        "full+ref_kl": {"beta"},
        "full-symmetric": {"epsilon_high"},
        "full+probe": {"probe_generations"},
    }
    assert all(study[name]["learning_rate"] == FULL["learning_rate"] for name in plan.bases())
    assert study["full-token_ratio"]["epsilon"] == 0.2 and study["full-token_ratio"]["epsilon_high"] == 0.28
    assert study["full-symmetric"]["epsilon"] == FULL["epsilon"]
    assert study["full-symmetric"]["epsilon_high"] in (None, FULL["epsilon"])  # (resolved to eps_low by the loss)
    assert study["full+guard"]["log_ratio_clamp"] == 0.2 and study["full+ref_kl"]["beta"] == 1e-2


def test_the_split_is_fresh_and_the_validation_split_large_enough(plan):
    assert plan.split_seed not in (0, None)  # the chain studies' split (split_seed 0) has been looked at
    task = demo_task(plan, plan.seeds[0])[0]
    train, validation = task.splits()
    tuning = task.tuning_split()
    assert len(validation) >= 2000 and len(tuning) >= 450
    keys = [{tuple(sorted(o)) for o in split["operands"]} for split in (train, validation, tuning)]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]
    # one problem's greedy pass has sd <= 0.5: the split's pass@1 has a standard error <= 1 point (+ rounding)
    assert 0.5 / len(validation) ** 0.5 <= 0.0112


def test_the_primary_metric_and_both_families_are_declared(plan):
    assert plan.primary_metric == "greedy" and plan.primary == ["full", "grpo"]
    assert plan.sweep["metric"] == "final_pass_at_1" and plan.sweep["require_interior"] is True
    assert len(plan.contrasts) == 5 and len(plan.option_contrasts) == 5
    assert not {tuple(p) for p in plan.contrasts} & {tuple(p) for p in plan.option_contrasts}
    assert 2 / 2 ** len(plan.seeds) <= 0.05 / 5  # the exact test can pass Holm's first threshold in either family
    assert plan.eval_samples >= 16 and plan.eval_curve_samples == 0
    assert plan.rollout_tokens // plan.eval_every_tokens >= 8


def test_every_arm_is_tuned_with_the_same_effort_where_its_parameter_allows(plan):
    sweep = plan.sweep
    assert len(sweep["seeds"]) >= 3 and not set(sweep["seeds"]) & set(plan.seeds)
    assert min(sweep["learning_rates"]) <= 1.25e-5  # low enough for the greedy optimum (chain-study-2 audit)
    cells = {name: len(grid_cells(plan, name)) for name, _, _ in plan.entries() if name not in plan.bases()}
    # 4 values per clip axis (3 for the token eps), one more where the first tuning phase chose an edge
    assert cells == {"grpo": 4, "gspo": 5, "gspo-published": 1, "cispo": 4, "sapo": 5, "full": 4,
                     "full-calibrated": 5, "full-noclip": 4}  # fmt: skip
    for name in ("gspo", "full"):  # sequence clip: a log grid spanning 3e-4 ... 3e-2, eps_high / eps_low = 4/3
        grid = sweep["grids"][name]
        assert min(grid["epsilon"]) <= 3e-4 and max(grid["epsilon"]) >= 3e-2
        assert all(abs(h / e - 4 / 3) < 0.01 for e, h in zip(grid["epsilon"], grid["epsilon_high"], strict=True))
    assert sweep["grids"]["grpo"]["epsilon"] == [0.1, 0.2, 0.3, 0.4]  # 0.4: past the first phase's edge
    assert sweep["grids"]["full-token_ratio"]["epsilon"] == [0.05, 0.1, 0.2, 0.3, 0.4]  # grpo's, and its own edge
    published = {n: c for n, c, _ in plan.entries()}["gspo-published"]
    assert (published["epsilon"], published["epsilon_high"]) == (3e-4, 4e-4)
