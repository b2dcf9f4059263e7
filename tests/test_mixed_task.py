"""The mixed-difficulty sum task (demo-mixed): splits, verifier, the profile of sampled groups, and its plan."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from trl_loo_gspo.demo.evaluate import sample_groups
from trl_loo_gspo.demo.mixed import MixedSumTask, group_profile
from trl_loo_gspo.demo.multistep import MultiStepTask, final_score
from trl_loo_gspo.demo.policy import PolicySpec
from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2
from trl_loo_gspo.experiment.ablation.plan import AblationPlan

ROOT = Path(__file__).resolve().parent.parent


def test_splits_are_disjoint_by_multiset_with_the_same_mix_of_terms():
    task = MixedSumTask(train_per_terms=300, validation_per_terms=50)
    train, validation = task.splits()
    assert Counter(train["terms"]) == {1: 300, 2: 300, 3: 300, 4: 300}
    assert Counter(validation["terms"]) == {1: 50, 2: 50, 3: 50, 4: 50}
    key = lambda operands: tuple(sorted(operands))  # noqa: E731
    assert not {key(o) for o in train["operands"]} & {key(o) for o in validation["operands"]}
    assert len({key(o) for o in train["operands"]}) == len(train)  # no permutation twice either
    assert set(train.select(range(64))["terms"]) == {1, 2, 3, 4}  # shuffled: the warm start calibrates on these


def test_every_solution_is_scored_right_and_numbers_have_one_to_three_digits():
    task = MixedSumTask(train_per_terms=200, validation_per_terms=20)
    train, _ = task.splits()
    assert all(task.score(row["solution"], row) == 1.0 for row in train)
    assert all(final_score(row["solution"] + "1", row["answer"]) == 0.0 for row in train.select(range(50)))
    digits = Counter(len(str(n)) for operands in train["operands"] for n in operands)
    assert set(digits) == {1, 2, 3}
    copy = train.filter(lambda r: r["terms"] == 1)[0]
    assert copy["solution"] == copy["answer"] == copy["prompt"][:-1]


def test_answer_lengths_vary_several_fold_and_fit_the_completion_limit():
    task = MixedSumTask()
    train, _ = task.splits()
    lengths = sorted(len(s) + 1 for s in train["solution"])  # + end of sequence
    p10, p90 = lengths[len(lengths) // 10], lengths[9 * len(lengths) // 10]
    assert p90 / p10 >= 5
    assert lengths[-1] <= task.max_new_tokens


def test_splits_depend_on_the_seed_only():
    assert MixedSumTask(seed=3).splits()[1]["prompt"] == MixedSumTask(seed=3).splits()[1]["prompt"]
    assert MixedSumTask(seed=3).splits()[1]["prompt"] != MixedSumTask(seed=4).splits()[1]["prompt"]


def test_impossible_settings_fail_naming_the_field():
    with pytest.raises(ValueError, match=r"validation_per_terms \+ tuning_per_terms must be <= 1000"):
        MixedSumTask(train_per_terms=1000, validation_per_terms=1)
    with pytest.raises(ValueError, match="max_terms"):
        MixedSumTask(max_terms=5)


def test_policy_cache_keys_differ_by_task():
    keys = {PolicySpec(task=t).key() for t in (MixedSumTask(), MultiStepTask())}
    assert len(keys) == 2


def test_group_profile_by_hand():
    scores = [[1, 1], [0, 0], [1, 0], [0, 0]]
    lengths = [[2, 2], [10, 10], [4, 6], [20, 30]]
    profile = group_profile(scores, lengths, [1, 2, 2, 4])
    assert profile["degenerate"] == 0.75 and profile["all_right"] == 0.25 and profile["all_wrong"] == 0.5
    assert profile["length_min_max"] == [2, 30]
    assert profile["per_label"]["2"] == {"groups": 2, "degenerate": 0.5, "pass_rate": 0.25, "mean_length_tokens": 7.5}
    assert profile["length_tokens"] == {"p10": 2.0, "p50": 10.0, "p90": 30.0}


def test_sample_groups_counts_tokens_up_to_the_first_end_of_sequence():
    tokenizer = char_tokenizer(MixedSumTask.alphabet)
    tokenizer.padding_side = "left"
    model = tiny_qwen2(tokenizer, hidden_size=16, num_hidden_layers=1)
    task = MixedSumTask(train_per_terms=10, validation_per_terms=2)
    rows = task.splits()[1]
    scores, lengths = sample_groups(model, tokenizer, rows, 3, 7, task.score, seed=1)
    assert len(scores) == len(lengths) == len(rows) and all(len(g) == 3 for g in scores)
    assert all(1 <= n <= 7 for group in lengths for n in group)
    again = sample_groups(model, tokenizer, rows, 3, 7, task.score, seed=1)
    assert again == (scores, lengths)  # seeded


def test_the_shipped_mixed_plan_checks_and_is_balanced():
    plan = AblationPlan.from_yaml(ROOT / "recipes" / "ablations" / "mixed.yaml")  # builds every run's config
    names = {v["name"] for v in plan.variants}
    assert plan.task == "demo-mixed" and len(plan.seeds) >= 5 and plan.stock_baseline
    assert {"gspo", "full"} <= names and {n for n in names if n.startswith("full-")} == {
        "full-loo",
        "full-token_total",
        "full-dynamic_sampling",
        "full-response_clipping",
    }
    assert {n for n in names if n.startswith("gspo+")} == {"gspo+loo", "gspo+token_total", "gspo+dynamic_sampling"}


def test_the_shipped_mixed_plan_updates_off_policy_so_that_clipping_can_act():
    from trl_loo_gspo.experiment.ablation.plan import run_args

    plan = AblationPlan.from_yaml(ROOT / "recipes" / "ablations" / "mixed.yaml")
    for variant in plan.variants:
        args = run_args(plan, variant["name"], variant["config"], False, 0)
        assert args.steps_per_generation > args.gradient_accumulation_steps  # several updates per generation round
        assert args.generation_batch_size == 256 and args.num_generations == 8


def test_chained_addition_settings_draw_min_to_max_terms_of_bounded_operands():
    """The study's chained-addition task (min_terms, max_operand): 2–4 terms of 0–99, disjoint by multiset, every
    answer a worked chain of 1–3 steps; fields at their defaults keep the earlier task and its policy cache key."""
    task = MixedSumTask(min_terms=2, max_terms=4, max_operand=99, train_per_terms=400, validation_per_terms=160,
                        tuning_per_terms=160)  # fmt: skip
    train, validation = task.splits()
    tuning = task.tuning_split()
    assert Counter(train["terms"]) == {2: 400, 3: 400, 4: 400} and Counter(validation["terms"]) == {
        2: 160,
        3: 160,
        4: 160,
    }
    assert max(n for o in train["operands"] for n in o) == 99 and min(n for o in train["operands"] for n in o) == 0
    key = lambda operands: tuple(sorted(operands))  # noqa: E731
    sets = [{key(o) for o in split["operands"]} for split in (train, validation, tuning)]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    assert all(task.score(row["solution"], row) == 1.0 for row in validation)
    assert {row["solution"].count(";") for row in validation} == {0, 1, 2}
    assert max(len(s) + 1 for s in train["solution"]) <= task.max_new_tokens == 3 * 12 + 1
    assert PolicySpec(task=MixedSumTask()).key() == PolicySpec(task=MixedSumTask(min_terms=1)).key()
    assert PolicySpec(task=task).key() != PolicySpec(task=MixedSumTask(min_terms=2, max_operand=99)).key()


def test_chained_addition_capacity_is_checked_on_the_smallest_number_of_terms():
    # 2 terms of 0–9: 55 distinct multisets
    with pytest.raises(ValueError, match=r"<= 55 \(the distinct problems of 2 term"):
        MixedSumTask(min_terms=2, max_operand=9, train_per_terms=50, validation_per_terms=6)
    with pytest.raises(ValueError, match="min_terms"):
        MixedSumTask(min_terms=3, max_terms=2)
    with pytest.raises(ValueError, match="max_operand"):
        MixedSumTask(max_operand=0)


def test_running_sums_format_writes_and_scores_only_the_partial_sums():
    """answer_format='sums': "12+34+5=" -> "46;51"; the last sum is the answer; steps and extra text score 0."""
    from trl_loo_gspo.demo.multistep import MultiStepVerifier, running_sums_score

    task = MixedSumTask(min_terms=2, max_terms=4, max_operand=49, train_per_terms=200, validation_per_terms=20,
                        answer_format="sums")  # fmt: skip
    train, _ = task.splits()
    row = next(r for r in train if r["terms"] == 3)
    a, b, c = row["operands"]
    assert row["solution"] == f"{a + b};{a + b + c}" and task.score(row["solution"], row) == 1.0
    assert all(task.score(r["solution"], r) == 1.0 for r in train)
    assert max(len(s) + 1 for s in train["solution"]) <= task.max_new_tokens == 3 * 4 + 1
    assert running_sums_score("46;51", "51") == 1.0 and running_sums_score(" 51 ", "51") == 1.0
    assert running_sums_score("46;50", "51") == 0.0 and running_sums_score("12+34=46;46+5=51", "51") == 0.0
    assert running_sums_score("46;51;", "51") == 0.0 and running_sums_score("", "51") == 0.0
    verifier = MultiStepVerifier(answer_format="sums")
    assert verifier.verify("46;51", answer="51", operands=[12, 34, 5]).score == 1.0
    with pytest.raises(ValueError, match="emit_spans needs answer_format='steps'"):
        MultiStepVerifier(emit_spans=True, answer_format="sums")
    with pytest.raises(ValueError, match="answer_format"):
        MixedSumTask(answer_format="bare")
    assert PolicySpec(task=MixedSumTask(answer_format="steps")).key() == PolicySpec(task=MixedSumTask()).key()
