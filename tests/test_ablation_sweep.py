"""A learning rate per variant from a sweep on a tuning split: the split, the plan's checks, the choice, the report."""

from __future__ import annotations

import json

import pytest
import yaml

from trl_loo_gspo.demo.mixed import MixedSumTask
from trl_loo_gspo.demo.task import AdditionTask
from trl_loo_gspo.experiment.ablation.plan import AblationPlan, run_path
from trl_loo_gspo.experiment.ablation.runner import run_ablation
from trl_loo_gspo.experiment.ablation.sweep import choose

TASK = {"max_terms": 2, "train_per_terms": 60, "validation_per_terms": 20, "tuning_per_terms": 20}


def _key(operands) -> tuple[int, ...]:
    return tuple(sorted(operands))


def test_the_tuning_split_is_disjoint_from_training_and_validation_by_multiset():
    task = MixedSumTask(max_terms=3, train_per_terms=300, validation_per_terms=50, tuning_per_terms=40, seed=2)
    train, validation = task.splits()
    tuning = task.tuning_split()
    assert len(train) == 900 and len(validation) == 150 and len(tuning) == 120
    keys = [{_key(o) for o in split["operands"]} for split in (train, validation, tuning)]
    assert not keys[0] & keys[2] and not keys[1] & keys[2] and not keys[0] & keys[1]
    assert sorted(tuning["terms"]) == [1] * 40 + [2] * 40 + [3] * 40


def test_without_a_tuning_split_the_splits_are_those_drawn_before_the_field_existed():
    train, validation = MixedSumTask(seed=0).splits()
    # (first rows drawn by the task before `tuning_per_terms` existed, at the same settings)
    assert validation[:3]["prompt"] == ["88=", "8+202+490=", "3+4="]
    assert train[:3]["prompt"] == ["860=", "470+534=", "6+942+752+25="]
    with pytest.raises(ValueError, match="tuning_per_terms > 0"):
        MixedSumTask(seed=0).tuning_split()


def test_the_addition_task_holds_out_a_tuning_split_by_unordered_pair():
    task = AdditionTask(seed=0, tuning_pairs=100)
    train, validation = task.splits()
    tuning = task.tuning_split()
    pair = lambda prompt: frozenset(prompt[:-1].split("+"))  # noqa: E731
    keys = [{pair(p) for p in split["prompt"]} for split in (train, validation, tuning)]
    assert len(keys[2]) == 100 and not keys[0] & keys[2] and not keys[1] & keys[2] and not keys[0] & keys[1]
    assert validation["prompt"] == AdditionTask(seed=0).splits()[1]["prompt"]  # the validation split is unchanged
    # (first rows drawn before `tuning_pairs` existed)
    assert validation[:3]["prompt"] == ["1+50=", "50+1=", "50+55="]
    assert AdditionTask(seed=0).splits()[0][:3]["prompt"] == ["47+64=", "64+47=", "36+58="]
    with pytest.raises(ValueError, match="tuning_pairs must be in"):
        AdditionTask(digits=1, validation_pairs=50, tuning_pairs=5)


def write_plan(tmp_path, **overrides) -> AblationPlan:
    data = dict(
        output_dir=str(tmp_path / "out"),
        task="demo-mixed",
        task_options=TASK,
        split_seed=0,
        seeds=[0, 1],
        rollout_tokens=1000,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": "loo", "config": {"advantage_estimator": "loo"}}],
        sweep={"learning_rates": [1e-4, 3e-4], "seeds": [7], "rollout_tokens": 500},
    )
    data.update(overrides)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return AblationPlan.from_yaml(path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sweep": {"learning_rates": [1e-4, 3e-4], "seeds": [1]}}, r"sweep.seeds \[1\] are also study seeds"),
        ({"sweep": {"learning_rates": [1e-4], "seeds": [7]}}, "at least 2 positive numbers"),
        ({"sweep": {"learning_rates": [1e-4, 2e-4], "seeds": [7], "budget": 5}}, "unknown key 'budget'"),
        ({"sweep": {"learning_rates": [1e-4, 2e-4], "seeds": [7], "metric": "loss"}}, "sweep.metric"),
        ({"common": {"learning_rate": 1e-4}}, "common: sets learning_rate, which the sweep chooses"),
        ({"task_options": {"max_terms": 2}}, "holds out no tuning split"),
        ({"task": "demo-addition", "task_options": {}}, "holds out no tuning split"),
        ({"task_options": {"max_terms": 9}}, "task_options for demo-mixed: max_terms must be in"),
        ({"task_options": {"terms": 2}}, "task_options for demo-mixed: .*unexpected keyword argument 'terms'"),
    ],
)
def test_a_bad_sweep_or_task_fails_at_construction_naming_the_field(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        write_plan(tmp_path, **change)


def sweep_runner(calls: list, best: dict[str, float]):
    """A fake runner: a run's score peaks at its variant's ``best`` learning rate; validation runs record the rate."""

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation", **_common_rate):
        lr = overrides["learning_rate"]
        calls.append((split, name, seed, lr))
        score = 0.5 - abs(lr - best[name]) * 100 + 0.001 * seed
        tokens = 500 if split == "tuning" else plan.rollout_tokens
        record = {
            "name": name,
            "seed": seed,
            "baseline": is_baseline,
            "final_pass_rate": score,
            "best_pass_rate": score,
            "final_pass_at_1": score,
            "auc": score / 2,
            "curve": [[0, 0.3], [tokens, score]],
            "generated_tokens": tokens,
            "effective_tokens": tokens // 2,
            "split": split,
        }
        if split == "tuning":
            record["learning_rate"] = lr
        return record

    return runner


def test_each_variant_trains_at_the_rate_it_chose_on_the_tuning_split(tmp_path):
    plan = write_plan(tmp_path)
    calls: list = []
    records = run_ablation(plan, sweep_runner(calls, {"grpo": 1e-4, "loo": 3e-4}))
    sweep = [c for c in calls if c[0] == "tuning"]
    assert len(sweep) == 4 and calls[:4] == sweep  # every sweep run first: 2 rates x 2 variants x 1 seed
    assert {(name, lr) for _, name, seed, lr in sweep} == {(n, r) for n in ("grpo", "loo") for r in (1e-4, 3e-4)}
    assert all(seed == 7 for _, _, seed, _ in sweep)
    study = sorted((name, seed, lr) for split, name, seed, lr in calls if split == "validation")
    assert study == [("grpo", 0, 1e-4), ("grpo", 1, 1e-4), ("loo", 0, 3e-4), ("loo", 1, 3e-4)]
    assert {r["overrides"]["learning_rate"] if "overrides" in r else None for r in records} == {None}
    assert json.loads(run_path(plan, "loo", 7, 3e-4).read_text())["learning_rate"] == 3e-4
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Learning rate per variant (sweep on the tuning split)" in report
    assert "| loo | 0.487 | 0.507 | 0.0003 |" in report
    assert "same sweep budget for every variant: 1,000 generated tokens" in report

    calls.clear()  # a second run reuses every record: the same choice, nothing trained
    run_ablation(plan, sweep_runner(calls, {"grpo": 1e-4, "loo": 3e-4}))
    assert calls == []


def test_a_changed_choice_makes_the_study_records_stale(tmp_path):
    plan = write_plan(tmp_path)
    run_ablation(plan, sweep_runner([], {"grpo": 1e-4, "loo": 3e-4}))
    record_path = run_path(plan, "loo", 7, 3e-4)
    record = json.loads(record_path.read_text())
    record["final_pass_rate"] = 0.0  # the sweep now prefers 1e-4 for loo
    record_path.write_text(json.dumps(record))
    from trl_loo_gspo.experiment.ablation.provenance import StaleRecordsError

    with pytest.raises(StaleRecordsError, match="loo seed 0: another config"):
        run_ablation(plan, sweep_runner([], {"grpo": 1e-4, "loo": 3e-4}))


@pytest.mark.slow
def test_a_tiny_real_sweep_scores_on_the_tuning_split_then_trains_at_the_choice(tmp_path):
    from .helpers import TINY_POLICY

    plan = write_plan(
        tmp_path,
        task="demo-addition",
        task_options={"tuning_pairs": 30},
        seeds=[0],
        rollout_tokens=300,
        eval_every_tokens=300,
        eval_samples=1,
        common={"per_device_train_batch_size": 16, "num_generations": 4},
        sweep={"learning_rates": [1e-5, 1e-4], "seeds": [5], "rollout_tokens": 200},
        policy=TINY_POLICY,
    )
    records = run_ablation(plan)
    sweep = [json.loads(run_path(plan, n, 5, lr).read_text()) for n in ("grpo", "loo") for lr in (1e-5, 1e-4)]
    assert all(r["split"] == "tuning" and 200 <= r["generated_tokens"] < 300 for r in sweep)
    assert {r["learning_rate"] for r in sweep} == {1e-5, 1e-4}
    assert all(r["split"] == "validation" and r["generated_tokens"] >= 300 for r in records)
    chosen = choose(plan, sweep)
    assert {r["name"]: r["overrides"]["learning_rate"] for r in records} == chosen
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Learning rate per variant (sweep on the tuning split)" in report


def test_a_task_without_a_tuning_split_keeps_its_policy_cache_key():
    from trl_loo_gspo.demo.policy import PolicySpec

    # (keys written before the tuning fields existed: the demo's seed-0 policy, the mixed ablation's seed-0 policy)
    assert PolicySpec(task=AdditionTask(seed=0), seed=0).key() == "7d464322fecc0b60"
    assert PolicySpec(task=MixedSumTask(seed=0), seed=0).key() == "b7af2e26841421b2"
    assert PolicySpec(task=AdditionTask(seed=0, tuning_pairs=5), seed=0).key() != "7d464322fecc0b60"


def test_label_smoothing_of_the_warm_start_keys_its_own_policy_and_changes_the_training():
    """``sft_label_smoothing`` (0 by default) leaves every existing cache key as it was; set, it keys its own
    policy, and the supervised phase trains another model (a few supervised steps of the tiny policy)."""
    import torch

    from trl_loo_gspo.demo.policy import PolicySpec, supervised_warm_start
    from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2

    from .helpers import TINY_POLICY

    assert PolicySpec(task=MixedSumTask(seed=0), seed=0, sft_label_smoothing=0.0).key() == "b7af2e26841421b2"
    assert PolicySpec(task=MixedSumTask(seed=0), seed=0, sft_label_smoothing=0.1).key() != "b7af2e26841421b2"
    task = MixedSumTask(seed=0, min_terms=2, max_terms=2, max_operand=9, train_per_terms=20, validation_per_terms=5)
    weights = []
    for smoothing in (0.0, 0.1):
        spec = PolicySpec(task=task, sft_label_smoothing=smoothing, **TINY_POLICY)
        tokenizer = char_tokenizer(task.alphabet)
        model = tiny_qwen2(tokenizer, hidden_size=spec.hidden_size, num_hidden_layers=spec.num_hidden_layers,
                           intermediate_size=spec.intermediate_size, seed=spec.seed)  # fmt: skip
        supervised_warm_start(model, tokenizer, task.splits()[0], spec, log=lambda _: None)
        weights.append(model.lm_head.weight.detach().clone())
    assert not torch.equal(weights[0], weights[1])
