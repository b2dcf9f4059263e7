"""Adaptive group sizes never dead-end: a round never leaves fewer missing rows than the smallest group could fill,
unless no size can change (then the trainer stops and pads at once instead of probing in vain). Property tests over
random pass rates, budgets and size bounds, plus the round loop simulated with the same pure functions."""

import random

from trl_loo_gspo.algorithms.group_filter import adaptive_round_can_fill, allocate_group_sizes


def check_sizes(sizes, rows, k_min, k_max):
    assert sum(sizes) <= rows
    assert all(size == 0 or k_min <= size <= k_max for size in sizes)
    left = rows - sum(sizes)
    if 0 < left < k_min:  # only when no sized group could give a row back
        assert all(size in (0, k_min) for size in sizes), (sizes, rows, k_min, k_max)


def test_allocation_never_leaves_an_unfillable_remainder():
    rng = random.Random(0)
    for _ in range(20_000):
        k_min = rng.randint(1, 6)
        k_max = rng.randint(k_min, 12)
        rows = rng.randint(0, 64)
        rates = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, rng.random()]) for _ in range(rng.randint(0, 12))]
        check_sizes(allocate_group_sizes(rates, rows, k_min, k_max), rows, k_min, k_max)


def test_the_round_loop_fills_the_batch_or_stops_at_once():
    """The trainer's loop: each round probes prompts, sizes the passing ones for the rows still missing, and goes on
    while another group fits. It never runs a round that cannot add a group, and with enough informative prompts it
    fills the batch exactly."""
    rng = random.Random(1)
    for _ in range(5_000):
        probe = rng.randint(2, 4)
        k_min = rng.randint(probe, probe + 2)
        k_max = rng.randint(k_min, 2 * k_min + 4)
        total = rng.choice([8, 12, 16, 24, 32])
        filled, rounds, useless = 0, 0, 0
        while filled < total and rounds < 50:
            if not adaptive_round_can_fill(total - filled, k_min):
                break  # the trainer pads the rest here
            rounds += 1
            rates = [rng.choice([0.25, 0.5, 0.75]) for _ in range(rng.randint(1, 8))]  # probes that passed
            sizes = allocate_group_sizes(rates, total - filled, k_min, k_max)
            useless += sum(sizes) == 0
            filled += sum(sizes)
        assert filled <= total
        assert useless == 0  # every round that ran could add a group
        if filled < total:  # stopped early: only when no group size could cover the rest
            assert total - filled < k_min
