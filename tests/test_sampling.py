"""Pure decision functions of dynamic sampling (method §3.1)."""

import math

import pytest
import torch

from trl_loo_gspo.sampling import (
    RefillSampler,
    allocate_group_sizes,
    budget_reached,
    due_for_recheck,
    group_decisions,
    refill_prompt_count,
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


def test_recheck_schedule():
    registry = {7: {"step": 1}, 3: {"step": 2}, 9: {"step": 3}, 1: {"step": 4}}
    assert due_for_recheck(registry, 4, 2, 10) == [3, 7]  # filtered at least 2 steps ago, lowest index first
    assert due_for_recheck(registry, 4, 2, 1) == [3]  # at most `limit`
    assert due_for_recheck(registry, 5, 2, 10) == []  # only every 2 steps
    assert due_for_recheck(registry, 0, 2, 10) == [] and due_for_recheck(registry, 4, None, 10) == []
    assert due_for_recheck(registry, 6, 3, 10) == [3, 7, 9]
