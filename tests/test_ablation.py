"""The ablation runner: resumable runs, results/report/plot, verdicts, and a tiny real ablation on the demo task."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from trl_loo_gspo.experiment.ablation.plan import AblationPlan
from trl_loo_gspo.experiment.ablation.runner import report, run_ablation

from .helpers import TINY_POLICY
from .recipe_fixtures import REPO, cpu_overrides, data_override, save_tiny_model


def plan_for(tmp_path, **overrides):
    data = dict(
        output_dir=str(tmp_path / "out"),
        seeds=[0, 1, 2],
        rollout_tokens=1000,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": "loo", "config": {}}, {"name": "loo_dyn", "config": {"dynamic_sampling": True}}],
    )
    data.update(overrides)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return AblationPlan.from_yaml(path)


def fake_runner(calls, gains, fail_on=None):
    def runner(plan, name, overrides, is_baseline, seed, progress):
        calls.append((name, seed))
        if fail_on == (name, seed):
            raise KeyboardInterrupt  # the ablation is killed mid-run
        final = 0.40 + 0.01 * seed + gains.get(name, 0.0)
        return {
            "name": name,
            "seed": seed,
            "baseline": is_baseline,
            "final_pass_rate": final,
            "best_pass_rate": final,
            "final_pass_at_1": final,
            "auc": final / 2,
            "curve": [[0, 0.4], [plan.rollout_tokens, final]],
            "generated_tokens": plan.rollout_tokens,
            "effective_tokens": plan.rollout_tokens // 2,
        }

    return runner


def test_runner_resumes_after_a_kill_without_redoing_finished_runs(tmp_path):
    plan = plan_for(tmp_path)
    calls = []
    with pytest.raises(KeyboardInterrupt):
        run_ablation(plan, fake_runner(calls, {}, fail_on=("loo", 1)))
    finished = list(calls[:-1])
    assert len(finished) == 4  # seed 0: grpo, loo, loo_dyn; seed 1: grpo; then killed in (loo, 1)
    assert not (tmp_path / "out" / "runs" / "loo" / "seed1.json").exists()  # no half-written record
    calls.clear()
    records = run_ablation(plan, fake_runner(calls, {}))
    assert calls == [("loo", 1), ("loo_dyn", 1), ("grpo", 2), ("loo", 2), ("loo_dyn", 2)]  # only the missing runs
    assert len(records) == 9
    for name in ("results.csv", "report.md", "pass_rate_vs_tokens.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert len(rows) == 9 and {"final_pass_rate", "auc", "generated_tokens", "effective_tokens"} <= set(rows[0])
    assert {"start_pass_at_1", "start_pass_rate", "greedy_auc", "gradient_answers"} <= set(rows[0])


def test_report_verdicts_and_paired_differences(tmp_path):
    plan = plan_for(tmp_path)
    calls = []
    records = run_ablation(plan, fake_runner(calls, {"loo": 0.05, "loo_dyn": 0.0}))
    text = report(plan, records)
    loo = next(line for line in text.splitlines() if line.startswith("| loo |"))
    dyn = next(line for line in text.splitlines() if line.startswith("| loo_dyn |"))
    assert "+0.050" in loo and "better" in loo  # identical +0.05 on every seed: a zero-width interval above 0
    assert "+0.000" in dyn and "no detectable difference" in dyn
    assert "Caveats (method §5.2)" in text and "effective" in text


def test_plan_validation(tmp_path):
    with pytest.raises(ValueError, match="task"):
        plan_for(tmp_path, task="chess")
    with pytest.raises(ValueError, match="unique"):
        plan_for(tmp_path, variants=[{"name": "grpo", "config": {}}])


@pytest.mark.slow
def test_a_tiny_real_ablation_on_the_demo_task(tmp_path):
    plan = plan_for(
        tmp_path,
        seeds=[0, 1],
        rollout_tokens=400,
        eval_every_tokens=200,
        eval_samples=1,
        common={"per_device_train_batch_size": 16, "num_generations": 4},
        variants=[{"name": "loo", "config": {}}],
        policy=TINY_POLICY,
    )
    records = run_ablation(plan)
    assert len(records) == 4
    for r in records:
        assert r["generated_tokens"] >= 400 and r["curve"][0][0] == 0 and r["curve"][-1][0] == r["generated_tokens"]
        assert 0.0 <= r["final_pass_rate"] <= 1.0
    saved = json.loads((tmp_path / "out" / "runs" / "loo" / "seed1.json").read_text())
    assert saved["effective_tokens"] is not None and saved["policy_key"]
    assert 0.0 <= saved["valid_groups"] <= 1.0 and 0.0 <= saved["truncation"] <= 1.0  # method §5.2's list
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| loo |" in text and "## What each variant did with the budget" in text and "| MDE |" in text


def test_recipe_plans_need_an_existing_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # recipe paths are relative to the working directory (the repository root)
    with pytest.raises(ValueError, match="recipe"):
        plan_for(tmp_path, task="recipe", recipe=str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match="recipe"):
        plan_for(tmp_path, recipe="recipes/math-lora.yaml")  # a recipe with the demo task: refused
    plan = AblationPlan.from_yaml(REPO / "recipes" / "ablations" / "gpu-math.yaml")  # the shipped GPU plan parses
    assert plan.task == "recipe" and len(plan.seeds) >= 3 and Path(plan.recipe).name == "math-lora.yaml"


@pytest.mark.slow
def test_a_recipe_ablation_builds_a_stock_baseline_from_the_same_recipe(tmp_path, monkeypatch):
    from trl import GRPOConfig

    from trl_loo_gspo.experiment.ablation.plan import recipe_args

    monkeypatch.chdir(REPO)
    recipe = REPO / "recipes" / "math-lora.yaml"
    model_dir = save_tiny_model(tmp_path / "tiny")
    flags = cpu_overrides(model_dir, tmp_path / "unused") + data_override(recipe, tmp_path)
    at = flags.index("--max_steps")
    del flags[at : at + 2]  # the token budget stops the runs
    plan = plan_for(
        tmp_path,
        task="recipe",
        recipe=str(recipe),
        recipe_overrides=flags,
        seeds=[0],
        rollout_tokens=120,
        eval_every_tokens=60,
        eval_samples=1,
        variants=[{"name": "full", "config": {}}, {"name": "full-dyn", "config": {"dynamic_sampling": False}}],
    )
    with pytest.raises(ValueError, match="recipe_overrides also sets"):
        recipe_args(plan, "full", {"num_generations": 4}, False, 0)
    _, base_args, _ = recipe_args(plan, "grpo", {}, True, 0)
    _, full_args, _ = recipe_args(plan, "full-dyn", {"dynamic_sampling": False}, False, 0)
    stock = GRPOConfig(output_dir=str(tmp_path / "x"), use_cpu=True, bf16=False)
    assert (
        not base_args.uses_own_loss and base_args.objective.advantage_estimator == "trl"
    )  # TRL's loss and defaults ...
    resolved = base_args.objective
    assert (resolved.loss_type, resolved.epsilon_low) == (stock.loss_type, stock.epsilon)
    assert resolved.epsilon_high == (stock.epsilon if stock.epsilon_high is None else stock.epsilon_high)
    assert (resolved.importance_sampling_level, resolved.scale_rewards) == (
        stock.importance_sampling_level,
        stock.scale_rewards,
    )
    assert base_args.learning_rate == full_args.learning_rate == 1e-5  # ... the recipe's values for the rest
    assert base_args.num_generations == full_args.num_generations == 2  # and the command-line overrides
    assert base_args.max_completion_length == full_args.max_completion_length == 8
    assert full_args.objective.epsilon_low == 3e-4 and full_args.dynamic_sampling is False
    records = run_ablation(plan)
    assert [r["trainer"] for r in records] == ["LooGspoTrainer"] * 3  # one trainer, one code path
    assert [r["baseline"] for r in records] == [True, False, False]
    for r in records:
        assert r["generated_tokens"] >= 120 and r["curve"][0][0] == 0
    assert (tmp_path / "out" / "runs" / "full" / "seed0" / "experiment.json").exists()  # variants register
    assert "| full-dyn |" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.slow
def test_a_tiny_process_ablation_on_the_multistep_task(tmp_path):
    plan = plan_for(
        tmp_path,
        task="demo-multistep",
        seeds=[0],
        rollout_tokens=600,
        eval_every_tokens=300,
        eval_samples=1,
        common={"per_device_train_batch_size": 16, "num_generations": 4},
        baseline={"name": "outcome", "trainer": "loo_gspo", "config": {}},
        variants=[{"name": "process", "config": {"process_advantage_coef": 0.5}}],
        policy=TINY_POLICY,
    )
    records = run_ablation(plan)
    assert [r["trainer"] for r in records] == ["LooGspoTrainer", "LooGspoTrainer"]
    outcome, with_process = records
    assert outcome["process_log"] == [] and with_process["process_log"]
    assert {"process/corr_final/step", "process/positive_in_failed"} <= set(with_process["process_log"][0])
    rows = list(csv.DictReader(open(tmp_path / "out" / "process_metrics.csv")))
    assert len(rows) == len(with_process["process_log"]) and rows[0]["name"] == "process"
    text = (tmp_path / "out" / "report.md").read_text()
    assert "(LooGspoTrainer)" in text and "## Process signal vs final verification (method §6)" in text
    with pytest.raises(ValueError, match="baseline.trainer"):
        plan_for(tmp_path, baseline={"name": "x", "trainer": "ppo", "config": {}})


def test_contrasts_between_variants_are_reported_paired_and_checked(tmp_path):
    with pytest.raises(ValueError, match=r"contrasts entries are \[a, b\] pairs of run names"):
        plan_for(tmp_path, contrasts=[["loo", "nope"]])
    plan = plan_for(tmp_path, contrasts=[["loo_dyn", "loo"]])
    records = run_ablation(plan, fake_runner([], {"loo": 0.01, "loo_dyn": 0.03}))
    text = report(plan, records)
    row = next(line for line in text.splitlines() if line.startswith("| loo_dyn − loo |"))
    assert row.startswith("| loo_dyn − loo | 3 | +0.020 | [+0.020, +0.020] |") and "| better |" in row
