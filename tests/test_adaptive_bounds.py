"""Adaptive group sizes stay inside their bounds (method §3.1, ``adaptive_group_size``): pass rates outside [0, 1]
(rewards off the [0, 1] scale with ``probe_pass_rate_band`` beyond it) count as uninformative, as if clipped to
[0, 1], so every size is 0 or in [min_generations, max_generations] and the sizes never exceed the rows; and a
``min_generations`` larger than the generation batch is refused — at construction when ``generation_batch_size``
states the batch, else by the sampler at its first batch (its rows depend on the process count) — instead of the
sampler dividing by zero."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_loo_gspo.algorithms.group_filter import allocate_group_sizes
from trl_loo_gspo.algorithms.sampling_rounds import probe_layout
from trl_loo_gspo.trainer.rollout import DynamicSampler

from .test_adaptive_sizes import check_sizes
from .test_config import make
from .test_sampling_rounds import FakeRun, K, OneProcess, batch_inputs, probe_cases, sampling_plan

FINITE = st.floats(allow_nan=False, allow_infinity=False)


def clipped(rates: list[float]) -> list[float]:
    return [min(max(p, 0.0), 1.0) for p in rates]


# ---------------------------------------------------------------------------------------------- the allocation
def test_the_reported_rates_get_sizes_inside_the_bounds():
    rates = [-1.82, 1.59, 0.02, 1.10]  # returned [-7, 7, 7, 0]: a negative size, 14 rows of 7
    sizes = allocate_group_sizes(rates, 7, 2, 7)
    check_sizes(sizes, 7, 2, 7)
    # 0.02 is the only informative rate (first); the others count as 0 or 1: k_min each, in index order, the last
    # taking the 3 rows that cannot make another group
    assert sizes == allocate_group_sizes(clipped(rates), 7, 2, 7) == [2, 3, 2, 0]


@settings(max_examples=1000, deadline=None)
@given(
    rates=st.lists(st.one_of(FINITE, st.floats(-3.0, 4.0), st.floats()), max_size=12),  # NaN and ±inf too
    rows=st.integers(0, 64),
    k_min=st.integers(1, 6),
    extra=st.integers(0, 8),
)
def test_any_pass_rates_give_sizes_inside_the_bounds_as_if_clipped(rates, rows, k_min, extra):
    k_max = k_min + extra
    sizes = allocate_group_sizes(rates, rows, k_min, k_max)
    check_sizes(sizes, rows, k_min, k_max)  # 0 or in [k_min, k_max], sum <= rows, no unfillable remainder
    assert sizes == allocate_group_sizes(clipped(rates), rows, k_min, k_max)


@settings(max_examples=500, deadline=None)
@given(case=probe_cases(), data=st.data())
def test_the_probe_layout_keeps_its_rows_for_pass_rates_off_the_scale(case, data):
    """The sampler's decision (``probe_layout``) with probe means outside [0, 1]: the rows given fit the rows missing,
    and every adaptive size is in the bounds."""
    n = len(case["passing"])
    case = {**case, "adaptive": True, "final": False}
    case["probe_means"] = data.draw(st.lists(st.floats(-5.0, 6.0), min_size=n, max_size=n))
    layout = probe_layout(**case)
    low, high = case["group_size_bounds"]
    assert sum(layout.size_of.values()) <= max(case["rows_missing"], 0)
    assert all(low <= size <= high for size in layout.size_of.values())


class OffScaleRun(FakeRun):
    """Rewards off the [0, 1] scale: a call's rows in threes around their prompt's mean (mean − 0.5, mean, mean + 0.5),
    so a probe of 3 answers has exactly that mean and a spread."""

    def __init__(self, means: list[float]) -> None:
        super().__init__(["mixed"] * len(means), None)
        self.means = means

    def generate_and_score(self, rows: list[dict], per_prompt: int):
        generation, _, spans, logs = super().generate_and_score(rows, per_prompt)
        rewards = [self.means[int(row["prompt"][1:-1])] + 0.5 * (i % 3 - 1) for i, row in enumerate(rows)]
        return generation, torch.tensor(rewards).unsqueeze(1), spans, logs


def test_the_sampler_fills_the_batch_with_groups_in_the_bounds_when_rewards_leave_0_1():
    means = [-1.82, 1.59, 1.10] + [0.5] * 5
    dataset = Dataset.from_list([{"prompt": f"p{i}="} for i in range(len(means))])
    plan = dataclasses.replace(
        sampling_plan("adaptive", 4, True),
        probe_generations=3,
        group_size_bounds=(3, 7),
        probe_pass_rate_band=(-5.0, 5.0),  # every probe above passes
    )
    run = OffScaleRun(means)
    sampler = DynamicSampler(plan, run.calls_for(plan), dataset, OneProcess(), environments=False)
    metrics: dict = defaultdict(list)
    inputs, replay = sampler.sample(batch_inputs(dataset, 0, 3), metrics)  # 12 rows
    assert len(inputs) == 3 * K and not bool(replay.round.padding.any())
    # before: sizes [-2, 7, 7]: prompt 0 dropped, 14 rows of groups for 12, one of them generated and discarded
    assert metrics["sampling/surplus_groups"] == [0]
    sizes = torch.bincount(replay.round.group_ids).tolist()
    assert sorted(sizes) == [3, 3, 6] and all(3 <= size <= 7 for size in sizes)


# ---------------------------------------------------------------------------------------------- min_generations
def test_the_sampler_refuses_a_min_generations_larger_than_the_generation_batch():
    """4 rows (1 prompt × K, one process), every probe passing: no group of 6 fits. It used to end in a
    ZeroDivisionError (no candidate left to pad from); now a ValueError with the numbers, before generating."""
    dataset = Dataset.from_list([{"prompt": f"p{i}="} for i in range(8)])
    plan = dataclasses.replace(sampling_plan("adaptive", 3, True), group_size_bounds=(6, 8))
    run = FakeRun(["mixed"] * 8, None)
    sampler = DynamicSampler(plan, run.calls_for(plan), dataset, OneProcess(), environments=False)
    with pytest.raises(ValueError, match=r"min_generations=6 .* 4 rows \(4 per process x 1 process"):
        sampler.sample(batch_inputs(dataset, 0, 1), defaultdict(list))
    assert run.calls == []  # refused up front
    # a group of exactly the batch's rows fits: trained, no padding
    plan = dataclasses.replace(plan, group_size_bounds=(4, 8))
    sampler = DynamicSampler(plan, run.calls_for(plan), dataset, OneProcess(), environments=False)
    inputs, replay = sampler.sample(batch_inputs(dataset, 0, 1), defaultdict(list))
    assert len(inputs) == K and not bool(replay.round.padding.any())


ADAPTIVE = dict(
    per_device_train_batch_size=4,
    num_generations=4,
    dynamic_sampling=True,
    probe_generations=2,
    adaptive_group_size=True,
    max_generations=16,
)


def test_a_min_generations_larger_than_the_stated_generation_batch_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"min_generations=12 is larger than generation_batch_size=8"):
        make(generation_batch_size=8, min_generations=12, **ADAPTIVE)
    config = make(generation_batch_size=8, min_generations=8, **ADAPTIVE)  # a group of the whole batch fits
    dataclasses.replace(config)  # and round-trips
    # Without generation_batch_size the rows are per_device_train_batch_size × steps_per_generation × processes: 4 on
    # one process, 8 on two. Not refusable here (the run's processes are unknown); the sampler checks its first batch.
    config = make(steps_per_generation=1, min_generations=8, **ADAPTIVE)
    assert config.generation_batch_size == 4 * config.world_size
    dataclasses.replace(config)


# ---------------------------------------------------------------------------------------------- the last round
@pytest.mark.parametrize("bounds", [(2, 8), (2, 4)])
def test_one_round_with_min_generations_at_the_probe_takes_whole_groups_of_the_probe(bounds):
    """``max_sampling_rounds=1`` with ``min_generations == probe_generations`` (the one-round setting validation
    allows): every probe passes and, sized for later rounds, would want a larger group. The last round now sizes up
    to the probe, so the passing probes are the batch's groups; it used to take none of them and divide by zero
    padding a batch with no candidate left."""
    dataset = Dataset.from_list([{"prompt": f"p{i}="} for i in range(16)])
    plan = dataclasses.replace(sampling_plan("adaptive", 1, True), group_size_bounds=bounds)
    run = FakeRun(["mixed"] * 16, None)
    sampler = DynamicSampler(plan, run.calls_for(plan), dataset, OneProcess(), environments=False)
    with pytest.warns(UserWarning, match="max_sampling_rounds=1"):  # one round cannot fill the batch: padded
        inputs, replay = sampler.sample(batch_inputs(dataset, 0, 2), defaultdict(list))  # 8 rows, 2 prompts
    padding = replay.round.padding
    assert len(inputs) == 2 * K and int(padding.sum()) == 4
    # both prompts' probes of 2 are whole groups (the sizes were allocated up to the probe on the last round)
    assert torch.bincount(replay.round.group_ids[~padding]).tolist() == [2, 2]
