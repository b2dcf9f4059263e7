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
        ({"sweep": {"learning_rates": [1e-4, 2e-4], "seeds": [7], "require_interior": "yes"}}, "true or false"),
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
    assert {r["name"]: {"learning_rate": r["overrides"]["learning_rate"]} for r in records} == chosen
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


GRIDS = {
    "grpo": {"epsilon": [0.1, 0.2, 0.3]},
    "loo": {"epsilon": [1e-3, 3e-3, 1e-2], "epsilon_high": [2e-3, 6e-3, 2e-2]},
}


def grid_plan(tmp_path, **overrides) -> AblationPlan:
    sweep = {"learning_rates": [1e-4, 2e-4, 4e-4], "seeds": [7, 8], "rollout_tokens": 500, "grids": GRIDS}
    variants = [
        {"name": "loo", "config": {"advantage_estimator": "loo"}},
        {"name": "loo-mean", "base": "loo", "config": {"advantage_estimator": "group_mean"}},
        {"name": "loo-sym", "base": "loo", "config": {"epsilon_high": None}},
        {"name": "loo-token", "base": "loo", "config": {"importance_sampling_level": "token"}},
    ]
    return write_plan(tmp_path, **{"sweep": sweep, "variants": variants, **overrides})


def grid_runner(calls: list, best: dict[str, tuple[float, float]]):
    """A fake runner whose score peaks at a variant's (learning rate, epsilon), greedy and sampled alike."""

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation", **_):
        lr, eps = overrides["learning_rate"], overrides.get("epsilon")
        calls.append((split, name, seed, lr, eps, overrides.get("epsilon_high")))
        want_lr, want_eps = best.get(name, best["loo"])  # (ablations: their root's optimum)
        score = 0.6 - abs(lr / want_lr - 1) * 0.1 - abs(eps / want_eps - 1) * 0.05 + 0.001 * seed
        return {
            "name": name, "seed": seed, "baseline": is_baseline, "final_pass_rate": score, "best_pass_rate": score,
            "final_pass_at_1": score, "auc": score, "greedy_auc": score, "curve": [[0, 0.3], [500, score]],
            "generated_tokens": 500, "effective_tokens": 250, "split": split, "learning_rate": lr,
        }  # fmt: skip

    return runner


def test_each_variant_chooses_a_learning_rate_and_a_grid_value_and_ablations_inherit_or_tune_their_own(tmp_path):
    plan = grid_plan(tmp_path, sweep={**grid_plan(tmp_path).sweep, "grids": {**GRIDS, "loo-token": {
        "epsilon": [0.1, 0.2, 0.3], "epsilon_high": [0.1, 0.2, 0.3]}}, "metric": "final_pass_at_1"})  # fmt: skip
    calls: list = []
    best = {"grpo": (2e-4, 0.2), "loo": (2e-4, 3e-3), "loo-token": (2e-4, 0.3)}
    run_ablation(plan, grid_runner(calls, best))
    tuning = [c for c in calls if c[0] == "tuning"]
    first = [c for c in tuning if c[1] in ("grpo", "loo")]
    assert len(first) == 2 * (3 * 3 + 3 * 3)  # seeds x (rates x grid values) per swept variant: equal cells
    assert {(c[3], c[4]) for c in first if c[1] == "loo"} == {
        (lr, e) for lr in (1e-4, 2e-4, 4e-4) for e in (1e-3, 3e-3, 1e-2)
    }
    assert all(c[5] == 2 * c[4] for c in first if c[1] == "loo")  # the grid's fields set together
    second = [c for c in tuning if c[1] == "loo-token"]
    assert tuning.index(second[0]) == len(first)  # the second phase after the first choice
    assert sorted((c[3], c[4]) for c in second) == [(2e-4, e) for e in (0.1, 0.1, 0.2, 0.2, 0.3, 0.3)]
    study = {(c[1], c[3], c[4], c[5]) for c in calls if c[0] == "validation"}
    assert study == {
        ("grpo", 2e-4, 0.2, None),
        ("loo", 2e-4, 3e-3, 6e-3),
        ("loo-mean", 2e-4, 3e-3, 6e-3),  # the root's whole choice
        ("loo-sym", 2e-4, 3e-3, None),  # ... except the field it sets itself
        ("loo-token", 2e-4, 0.3, 0.3),  # its own grid's best, at the root's rate
    }
    assert run_path(plan, "loo", 7, cell={"learning_rate": 2e-4, "epsilon": 3e-3, "epsilon_high": 6e-3}).exists()
    assert (tmp_path / "out" / "sweep" / "loo" / "lr0.0002-epsilon0.003-epsilon_high0.006" / "seed8.json").exists()
    assert (tmp_path / "out" / "sweep" / "loo-token" / "epsilon0.3-epsilon_high0.3" / "seed7.json").exists()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Learning rate and clip parameter per variant (sweep on the tuning split)" in report
    assert "scored by its final greedy pass@1 on the tuning split" in report
    assert "### loo: learning rate × epsilon, epsilon_high" in report
    assert "| 0.003, 0.006 | 0.557 | 0.607 | 0.508 |" in report  # a grid row: one column per rate
    assert "### loo-token: its own epsilon, epsilon_high, at loo's choice" in report
    assert "| loo | 9 | lr 0.0002, epsilon 0.003, epsilon_high 0.006 | 0.607 |" in report
    assert "2 of 2 |" in report  # the choice beats the runner-up in both sweep seeds
    assert "better than the next value inside it: loo-token (epsilon 0.3, epsilon_high 0.3: 0.607 vs 0.591" in report
    assert "loo-mean (loo's lr 0.0002, epsilon 0.003, epsilon_high 0.006)" in report

    calls.clear()  # resumable: every record reused, nothing trained
    run_ablation(plan, grid_runner(calls, best))
    assert calls == []


def test_a_choice_at_a_grid_edge_is_flagged_with_its_axis(tmp_path):
    plan = grid_plan(tmp_path, variants=[{"name": "loo", "config": {}}])
    run_ablation(plan, grid_runner([], {"grpo": (4e-4, 0.2), "loo": (2e-4, 1e-2)}))
    report = (tmp_path / "out" / "report.md").read_text()
    assert (
        "At the edge of the grid, better than the next value inside it: grpo (lr 0.0004: 0.607 vs 0.557 at lr 0.0002),"
        " loo (epsilon 0.01, epsilon_high 0.02: 0.607 vs 0.573 at epsilon 0.003, epsilon_high 0.006)" in report
    )


def test_a_choice_tied_with_its_inner_neighbour_is_not_an_edge(tmp_path):
    from trl_loo_gspo.experiment.ablation.sweep import edge_choices

    plan = grid_plan(tmp_path, variants=[{"name": "loo", "config": {}}])
    rows = [
        {"name": "loo", "seed": 7, "learning_rate": lr, "final_pass_rate": 0.5 if lr == 2e-4 else 0.4,
         "auc": 0.0, "sweep_cell": {"learning_rate": lr, "epsilon": e, "epsilon_high": 2 * e}}
        for lr in (1e-4, 2e-4, 4e-4) for e in (1e-3, 3e-3, 1e-2)
    ]  # fmt: skip
    # every epsilon scores the same (e.g. a guard that never fires): the tie-break takes the first, not an edge
    assert choose(plan, rows)["loo"] == {"learning_rate": 2e-4, "epsilon": 1e-3, "epsilon_high": 2e-3}
    assert edge_choices(plan, rows) == []
    rows[0]["final_pass_rate"] = 0.45  # lr 1e-4 at epsilon 1e-3 is still below lr 2e-4: interior on the rates
    assert edge_choices(plan, rows) == []


def test_require_interior_stops_before_anything_trains_at_an_edge_then_extends(tmp_path):
    sweep = {**grid_plan(tmp_path).sweep, "require_interior": True}
    plan = grid_plan(tmp_path, variants=[{"name": "loo", "config": {}}], sweep=sweep)
    calls: list = []
    best = {"grpo": (4e-4, 0.2), "loo": (2e-4, 3e-3)}
    from trl_loo_gspo.experiment.ablation.sweep import SweepEdgeError

    with pytest.raises(SweepEdgeError, match=r"1 sweep choice\(s\) at the edge .*\n  - grpo \(lr 0.0004: "):
        run_ablation(plan, grid_runner(calls, best))
    assert calls and all(c[0] == "tuning" for c in calls)  # the study never started
    assert not (tmp_path / "out" / "runs").exists()
    calls.clear()
    extended = grid_plan(
        tmp_path, variants=[{"name": "loo", "config": {}}], sweep={**sweep, "learning_rates": [1e-4, 2e-4, 4e-4, 8e-4]}
    )
    run_ablation(extended, grid_runner(calls, {"grpo": (4e-4, 0.2), "loo": (2e-4, 3e-3)}))
    tuning = [c for c in calls if c[0] == "tuning"]
    assert {c[3] for c in tuning} == {8e-4} and len(tuning) == 2 * (3 + 3)  # only the new rate's cells trained
    assert {(c[1], c[3]) for c in calls if c[0] == "validation"} == {("grpo", 4e-4), ("loo", 2e-4)}


def test_the_choice_breaks_ties_by_the_curve_area_of_the_same_kind_then_the_smaller_rate(tmp_path):
    plan = write_plan(tmp_path, sweep={"learning_rates": [1e-4, 3e-4], "seeds": [7], "metric": "final_pass_at_1"})
    rows = [
        {"name": "grpo", "seed": 7, "learning_rate": 1e-4, "final_pass_at_1": 0.5, "greedy_auc": 0.3, "auc": 0.9},
        {"name": "grpo", "seed": 7, "learning_rate": 3e-4, "final_pass_at_1": 0.5, "greedy_auc": 0.4, "auc": 0.1},
        {"name": "loo", "seed": 7, "learning_rate": 1e-4, "final_pass_at_1": 0.5, "greedy_auc": 0.4},
        {"name": "loo", "seed": 7, "learning_rate": 3e-4, "final_pass_at_1": 0.5, "greedy_auc": 0.4},
    ]
    assert choose(plan, rows) == {"grpo": {"learning_rate": 3e-4}, "loo": {"learning_rate": 1e-4}}


@pytest.mark.parametrize(
    "grids, message",
    [
        ({"nope": {"epsilon": [0.1, 0.2]}}, r"sweep.grids.nope: no run named 'nope'"),
        ({"loo": {"epsilon": [0.1, 0.2], "epsilon_high": [0.2]}}, "their lists need one length"),
        ({"loo": {"epsilon": [0.1]}}, "at least 2 values"),
        ({"loo": {"learning_rate": [1e-4, 2e-4]}}, "learning_rate is swept by sweep.learning_rates"),
        ({"loo": {"epsilon": [0.1, 0.1]}}, "repeated values"),
        ({"loo": [0.1, 0.2]}, "a mapping of config field -> list of values"),
        ({"loo": {"epsilon": [0.2, -1.0]}}, r"variant 'loo': .*\(sweep.grids cell \{'epsilon': -1.0\}\)"),
    ],
)
def test_a_bad_grid_fails_at_construction_naming_the_field(tmp_path, grids, message):
    with pytest.raises(ValueError, match=message):
        write_plan(tmp_path, sweep={"learning_rates": [1e-4, 3e-4], "seeds": [7], "grids": grids})
