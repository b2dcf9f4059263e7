"""Pure decision functions of dynamic sampling (method §3.1)."""

import json
import math

import pytest
import torch

from trl_loo_gspo.algorithms.group_filter import (
    RecheckSchedule,
    RefillSampler,
    allocate_group_sizes,
    budget_reached,
    due_for_recheck,
    group_decisions,
    oldest_filtered,
    refill_prompt_count,
    resolve_refill_seed,
    select_groups,
)

NAN = float("nan")


def test_zero_variance_filter_with_tolerance_and_categories():
    rewards = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1 + 1e-9, 1, 1], dtype=torch.float64)
    d = group_decisions(rewards, torch.arange(16) // 4)
    assert d.keep.tolist() == [False, False, True, False]  # fp noise (1e-9) is not a signal
    assert d.all_correct.tolist() == [True, False, False, True]
    assert d.all_wrong.tolist() == [False, True, False, False]


def test_unscorable_answers_do_not_make_a_signal():
    rewards = torch.tensor([1.0, NAN, NAN, NAN, 0.0, 1.0, NAN, NAN, NAN, NAN, NAN, NAN])
    d = group_decisions(rewards, torch.arange(12) // 4)
    assert d.keep.tolist() == [False, True, False]
    assert d.all_wrong.tolist() == [False, False, True]  # nothing scorable counts as failed
    assert math.isnan(d.mean[2].item())


def test_pass_rate_band_keeps_means_strictly_inside():
    rewards = torch.tensor([0.2, 0.4, 0.6, 0.8, 0.0, 0.1, 0.0, 0.1, 0.9, 1.0, 1.0, 0.9, 0.5, 0.5, 0.5, 0.5])
    d = group_decisions(rewards, torch.arange(16) // 4, mode="pass_rate_band", band=(0.1, 0.9))
    # means: 0.5 (kept), 0.05 (below), 0.95 (above), 0.5 with no spread (dropped)
    assert d.keep.tolist() == [True, False, False, False]
    assert d.all_correct.tolist() == [False, False, True, False]
    assert d.all_wrong.tolist() == [False, True, False, True]
    with pytest.raises(ValueError, match="group_filter"):
        group_decisions(rewards, torch.arange(16) // 4, mode="std")


def test_select_groups_fills_in_order_and_discards_surplus():
    s = select_groups([False, True, True, False, True, True], [4] * 6, rows=12, exhausted=False)
    assert s.chosen == [1, 2, 4] and s.surplus == 1 and s.padding_rows == 0


def test_select_groups_with_variable_sizes_skips_groups_that_do_not_fit():
    s = select_groups([True, True, True, True], [6, 5, 2, 4], rows=12, exhausted=True)
    assert s.chosen == [0, 1] and s.surplus == 2 and s.padding_rows == 1  # 6 + 5 = 11; 2 and 4 overflow
    s = select_groups([True, True, True], [6, 4, 2], rows=12, exhausted=False)
    assert s.chosen == [0, 1, 2] and s.surplus == 0


def test_select_groups_pads_only_when_exhausted():
    with pytest.raises(ValueError):
        select_groups([True, False, False], [4, 4, 4], rows=8, exhausted=False)
    s = select_groups([True, False, False], [4, 4, 4], rows=8, exhausted=True)
    assert s.chosen == [0] and s.padding_rows == 4 and s.surplus == 0


def test_allocate_group_sizes_favours_informative_prompts_at_a_fixed_budget():
    rates = [0.5, 0.1, 0.9, 0.3]
    sizes = allocate_group_sizes(rates, rows=32, k_min=4, k_max=12)
    assert sum(sizes) == 32
    assert all(4 <= s <= 12 for s in sizes if s)
    assert sizes[0] == max(sizes)  # p = 0.5 is the most informative
    assert sizes[3] >= sizes[1]  # 0.3 before 0.1
    # a budget smaller than the prompts can use: the least informative are not continued
    few = allocate_group_sizes(rates, rows=16, k_min=4, k_max=12)
    assert sum(few) == 16 and few[0] == 12 and few[3] == 4 and few[1] == few[2] == 0
    # more budget than the prompts can take at k_max: sizes capped, the rest is left
    many = allocate_group_sizes([0.5, 0.5], rows=40, k_min=4, k_max=12)
    assert many == [12, 12]
    # a remainder too small for a group is absorbed
    assert sum(allocate_group_sizes([0.5, 0.5, 0.5], rows=26, k_min=4, k_max=12)) == 26
    with pytest.raises(ValueError):
        allocate_group_sizes(rates, 8, k_min=5, k_max=4)


def test_refill_count_scales_with_keep_rate_caps_and_aligns_to_processes():
    assert refill_prompt_count(0, 0.5, 1, 8, 16) == 0
    assert refill_prompt_count(4, 0.5, 1, 8, 16) == 8
    assert refill_prompt_count(4, 0.0, 1, 8, 16) == 16  # keep rate floored at 1/8, capped at one batch
    assert refill_prompt_count(3, 1.0, 2, 8, 16) == 3  # 3 × 8 rows split evenly over 2 processes
    assert refill_prompt_count(3, 1.0, 4, 2, 16) == 4  # 3 × 2 rows do not split over 4: round up to 4 prompts


def test_refill_sampler_is_seeded_wraps_and_restores():
    a, b = RefillSampler(10, seed=3), RefillSampler(10, seed=3)
    first = a.draw(7)
    assert first == b.draw(7) and len(set(first)) == 7
    state = a.state_dict()
    rest = a.draw(6)  # wraps into a new permutation
    assert set(rest[:3]) == set(range(10)) - set(first)
    c = RefillSampler(10, seed=3)
    c.load_state_dict(state)
    assert c.draw(6) == rest
    assert RefillSampler(10, seed=4).draw(7) != first
    with pytest.raises(ValueError):
        c.load_state_dict({**state, "seed": 9})


def test_refill_sampler_excludes_and_never_loops_forever():
    s = RefillSampler(5, seed=0)
    assert not set(s.draw(3, exclude={0, 1})) & {0, 1}
    assert len(s.draw(4, exclude=set(range(5)))) == 4  # everything excluded: exclusion is ignored


def test_budget_accounting():
    assert not budget_reached(99, 100) and budget_reached(100, 100) and not budget_reached(10**9, None)


def test_stateless_recheck_fires_on_multiples_and_takes_the_oldest_first():
    registry = {7: {"step": 1}, 3: {"step": 2}, 9: {"step": 3}, 1: {"step": 4}}
    assert due_for_recheck(registry, 4, 2, 10) == [7, 3]  # filtered at least 2 steps ago, oldest first
    assert due_for_recheck(registry, 4, 2, 1) == [7]  # at most `limit`
    assert due_for_recheck(registry, 5, 2, 10) == []  # only every 2 steps
    assert due_for_recheck(registry, 0, 2, 10) == [] and due_for_recheck(registry, 4, None, 10) == []
    assert due_for_recheck(registry, 6, 3, 10) == [7, 3, 9]


def rounds_that_fire(schedule, steps):
    return [step for step in steps if schedule.fire(step)]


def test_recheck_fires_at_the_first_round_at_or_after_each_multiple():
    """recheck_filtered_every = N = 3, a generation round every S·num_iterations/GA = 4·1/2 = 2 optimizer steps:
    rounds at 0, 2, 4, …. The multiples 3, 6, 9, 12 are served by the first round at or after each: 3 → 4, 6 → 6,
    9 → 10, 12 → 12 (round 8 is before 9, round 2 before 3). A `step % 3 == 0` test fires at 6 and 12 only
    (every lcm(3, 2) = 6 steps)."""
    assert rounds_that_fire(RecheckSchedule(3), range(0, 14, 2)) == [4, 6, 10, 12]
    # a round span larger than N: every round after step 0 serves (at least) one multiple, once
    assert rounds_that_fire(RecheckSchedule(2), range(0, 13, 4)) == [4, 8, 12]
    # rounds on every step: exactly the multiples; never at step 0; None never fires
    assert rounds_that_fire(RecheckSchedule(3), range(13)) == [3, 6, 9, 12]
    assert rounds_that_fire(RecheckSchedule(None), range(13)) == []
    with pytest.raises(ValueError):
        RecheckSchedule(0)


def test_recheck_schedule_survives_a_checkpoint_mid_run():
    full = RecheckSchedule(3)
    assert rounds_that_fire(full, range(0, 26, 2)) == [4, 6, 10, 12, 16, 18, 22, 24]
    first = RecheckSchedule(3)
    assert rounds_that_fire(first, range(0, 9, 2)) == [4, 6]  # checkpoint after the round at step 8
    state = json.loads(json.dumps(first.state_dict()))  # saved in trainer_state.json
    assert state == {"every": 3, "due_step": 9}
    resumed = RecheckSchedule(3)
    resumed.load_state_dict(state)
    assert rounds_that_fire(resumed, range(10, 26, 2)) == [10, 12, 16, 18, 22, 24]
    fresh = RecheckSchedule(3)  # no saved schedule (a 0.1 checkpoint): the first round at or after N re-checks
    fresh.load_state_dict(None)
    assert rounds_that_fire(fresh, range(10, 16, 2)) == [10, 12]
    changed = RecheckSchedule(4)  # resumed with another N: its first multiple after the last one served (6)
    changed.load_state_dict(state)
    assert changed.due_step == 8 and rounds_that_fire(changed, range(10, 18, 2)) == [10, 12, 16]


def test_readmission_takes_the_oldest_filtered_prompts_first():
    """High dataset indices filtered long ago go before low indices filtered recently (no starvation)."""
    registry = {
        900: {"step": 0, "pass_rate": 0.0, "outcome": "all_wrong"},
        5: {"step": 4, "pass_rate": 1.0, "outcome": "all_correct"},
        2: {"step": 2, "pass_rate": 0.0, "outcome": "all_wrong"},
        700: {"step": 0, "pass_rate": 1.0, "outcome": "all_correct"},
        1: {"step": 8, "pass_rate": 0.0, "outcome": "all_wrong"},  # too recent at step 10 (N = 3)
    }
    assert oldest_filtered(registry, 10, 3, 10) == [700, 900, 2, 5]  # by filtering step, ties by index
    assert oldest_filtered(registry, 10, 3, 2) == [700, 900]
    assert oldest_filtered(registry, 10, 3, 0) == []
    schedule = RecheckSchedule(3)
    assert schedule.readmit(registry, 2, 3) == []  # before the first multiple
    assert schedule.readmit(registry, 4, 3) == [700, 900]  # filtered at least 3 steps before step 4
    # the caller removes them; a later round takes the next-oldest, not the lowest index
    for index in (700, 900):
        del registry[index]
    registry[3] = {"step": 6, "pass_rate": 0.0, "outcome": "all_wrong"}
    assert schedule.readmit(registry, 6, 1) == [2]
    assert schedule.readmit(registry, 8, 1) == []  # 8 < 9: not due
    assert schedule.readmit(registry, 10, 5) == [2, 5, 3]


def test_refill_sampler_without_shuffle_cycles_from_the_end_of_the_dataset():
    """TRL serves 0, 1, … without shuffling: refill walks from the end, away from the batch and the next ones."""
    s = RefillSampler(5, seed=0, shuffle=False)
    assert s.draw(7) == [4, 3, 2, 1, 0, 4, 3]
    assert s.draw(4, exclude={1}) == [2, 0, 4, 3]
    state = json.loads(json.dumps(s.state_dict()))
    assert state == {"dataset_size": 5, "seed": 0, "shuffle": False, "epoch": 2, "cursor": 2}
    other_seed = RefillSampler(5, seed=123, shuffle=False)  # the seed plays no part without shuffling
    other_seed.load_state_dict(state)
    assert other_seed.draw(3) == s.draw(3) == [2, 1, 0]
    assert RefillSampler(5, seed=1, shuffle=False).draw(10) == RefillSampler(5, seed=2, shuffle=False).draw(10)


def test_refill_seed_follows_data_seed_and_reorders_the_refill():
    assert resolve_refill_seed(None, None, 42) == 42
    assert resolve_refill_seed(None, 7, 42) == 7  # data_seed over seed
    assert resolve_refill_seed(3, 7, 42) == 3  # an explicit refill_seed over both
    by_data_seed = RefillSampler(20, resolve_refill_seed(None, 7, 42), shuffle=True).draw(20)
    by_seed = RefillSampler(20, resolve_refill_seed(None, None, 42), shuffle=True).draw(20)
    assert sorted(by_data_seed) == sorted(by_seed) == list(range(20)) and by_data_seed != by_seed
    assert RefillSampler(20, 7, shuffle=True).draw(20) == by_data_seed


def test_refill_sampler_state_of_release_0_1_loads_or_fails_clearly():
    """A 0.1 state has no "shuffle" entry (that sampler always shuffled): a shuffling sampler resumes it on the same
    permutation; a non-shuffling one refuses with a message that says why."""
    reference = RefillSampler(10, seed=3)
    reference.draw(7)
    old_state = {"dataset_size": 10, "seed": 3, "epoch": 0, "cursor": 7}
    resumed = RefillSampler(10, seed=3, shuffle=True)
    resumed.load_state_dict(old_state)
    assert resumed.draw(9) == reference.draw(9)
    assert RefillSampler(10, seed=3).draw(10) == [4, 5, 0, 1, 2, 8, 3, 6, 9, 7]  # the 0.1 permutation, pinned
    with pytest.raises(ValueError, match="shuffle=True.*release 0.1.*shuffle=False"):
        RefillSampler(10, seed=3, shuffle=False).load_state_dict(old_state)
    with pytest.raises(ValueError, match="dataset of 10 prompts"):
        RefillSampler(11, seed=3, shuffle=True).load_state_dict(old_state)
