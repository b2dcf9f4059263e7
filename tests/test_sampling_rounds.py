"""The sampling rounds' decisions (algorithms/sampling_rounds.py) and the sampler that acts on them, as properties
(issue 44): over every mode — plain, probe, adaptive K, re-check — × a budget or none × shuffling on or off, driven
by hypothesis with a fake generate-and-score (no model): nothing new is drawn once the budget is spent (only the
continuations of probes that already passed); refill never returns a prompt of the batch being filled, nor, without
shuffling, one of the batches TRL serves next; no round past the cap; the batch is padded only at the budget, the cap
or when fewer rows are missing than the smallest group."""

from __future__ import annotations

from collections import defaultdict

import torch
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_loo_gspo.algorithms.sampling_rounds import (
    BUDGET_SPENT,
    ROUND_CAP,
    NextRound,
    RoundRules,
    RoundState,
    Stop,
    next_round,
)
from trl_loo_gspo.trainer.rollout import DynamicSampler
from trl_loo_gspo.trainer.sampling_plan import SamplingCalls, SamplingPlan

K = 4


# ---------------------------------------------------------------------------------------------- the pure decisions
@st.composite
def rules_and_state(draw):
    probe = draw(st.sampled_from([None, 2, 3]))
    adaptive = probe is not None and draw(st.booleans())
    rules = RoundRules(
        total_rows=K * draw(st.integers(1, 8)),
        num_generations=K,
        max_rounds=draw(st.integers(1, 8)),
        probe=probe,
        adaptive=adaptive,
        min_group=draw(st.integers(probe, 2 * K)) if adaptive else 1,
        ranks=draw(st.sampled_from([1, 2, 4])),
    )
    pending = draw(st.integers(0, 3)) if probe else 0
    decided = draw(st.integers(pending, 20))
    state = RoundState(
        rounds=draw(st.integers(1, rules.max_rounds)),
        filled=draw(st.integers(0, rules.total_rows)),
        pending_groups=pending,
        pending_rows=pending * K,
        kept=draw(st.integers(pending, decided)),
        decided=decided,
        spent=draw(st.booleans()),
    )
    return rules, state


@settings(max_examples=2000, deadline=None)
@given(rules_and_state())
def test_the_decisions_keep_their_promises(case):
    rules, state = case
    action = next_round(rules, state)
    pending = state.pending_groups > 0
    if isinstance(action, Stop):
        assert not pending  # a passing probe is always completed
        if action.reason is None:
            assert state.filled >= rules.total_rows
        elif action.reason == BUDGET_SPENT:
            assert state.spent
        elif action.reason == ROUND_CAP:
            assert state.rounds >= rules.max_rounds or not rules.new_prompts_usable(state.rounds + 1)
        else:  # too few rows for the smallest group
            assert rules.adaptive and rules.total_rows - state.filled < rules.min_group
        return
    assert isinstance(action, NextRound)
    assert pending or action.draw > 0  # a round always carries something
    assert state.rounds < rules.max_rounds or pending  # never a round past the cap but a continuation
    if state.spent:
        assert action.draw == 0  # nothing new once the budget is spent
    if not rules.new_prompts_usable(state.rounds + 1):
        assert action.draw == 0
    assert action.draw <= rules.groups_per_batch + rules.ranks  # at most one batch (rounded to the ranks)


def test_a_full_batch_stops_and_a_spent_budget_stops_unless_a_probe_waits():
    rules = RoundRules(total_rows=16, num_generations=4, max_rounds=8, probe=2)
    assert next_round(rules, RoundState(rounds=1, filled=16)) == Stop(None)
    assert next_round(rules, RoundState(rounds=1, filled=8, spent=True)) == Stop(BUDGET_SPENT)
    waiting = RoundState(rounds=1, filled=8, pending_groups=1, pending_rows=4, kept=3, decided=4, spent=True)
    assert next_round(rules, waiting) == NextRound(0, 2)  # the continuation only
    assert next_round(rules, RoundState(rounds=8, filled=8)) == Stop(ROUND_CAP)
    # not spent: new probes for the 4 rows still open at the keep rate 3/4 -> ceil(1 / 0.75) = 2 prompts
    assert next_round(rules, RoundState(rounds=1, filled=8, pending_groups=1, pending_rows=4, kept=3, decided=4)) == (
        NextRound(2, 2)
    )


# ---------------------------------------------------------------------------------------------- the sampler
class OneProcess:
    num_processes, process_index, is_main_process = 1, 0, True
    device = torch.device("cpu")

    def reduce(self, tensor, reduction="sum"):
        return tensor


class FakeRun:
    """generate-and-score without a model: each row's reward follows its prompt's kind (always 1, never 0, mixed:
    alternating by the row's position in the call), its completion has 1–3 tokens; every call is recorded."""

    def __init__(self, kinds: list[str], budget: int | None) -> None:
        self.kinds, self.budget = kinds, budget
        self.calls: list[dict] = []
        self.generated = 0  # tokens generated in the current sample() call
        self.step = 0

    def generate_and_score(self, rows: list[dict], per_prompt: int):
        spent_before = self.budget is not None and self.generated >= self.budget
        self.calls.append({"prompts": [row["prompt"] for row in rows], "spent_before": spent_before})
        completions, rewards = [], []
        for position, row in enumerate(rows):
            kind = self.kinds[int(row["prompt"][1:-1])]
            completions.append([7] * (1 + position % 3))
            rewards.append({"always": 1.0, "never": 0.0}.get(kind, float(position % 2)))
        self.generated += sum(len(c) for c in completions)
        generation = ([[1, 2]] * len(rows), completions, None, ["x"] * len(rows), None, {}, None, None)
        return generation, torch.tensor(rewards).unsqueeze(1), None, [{} for _ in rows]

    def calls_for(self, sampler_plan: SamplingPlan) -> SamplingCalls:
        return SamplingCalls(
            self.generate_and_score,
            lambda: self.budget,  # one batch per call here: all of the budget is left when it starts
            lambda: self.generated,
            lambda rewards: rewards[:, 0],
            lambda: self.step,
        )


MODES = {
    "plain": {},
    "probe": {"probe_generations": 2},
    "adaptive": {"probe_generations": 2, "adaptive_group_size": True, "group_size_bounds": (2, 8)},
    "recheck": {"recheck_filtered_every": 1},
}


def sampling_plan(mode: str, max_rounds: int, shuffle: bool) -> SamplingPlan:
    fields = dict(
        dynamic_sampling=True,
        num_generations=K,
        group_filter="zero_variance",
        pass_rate_band=(0.0, 1.0),
        signal_tolerance=1e-6,
        max_sampling_rounds=max_rounds,
        probe_generations=None,
        probe_pass_rate_band=(0.0, 1.0),
        adaptive_group_size=False,
        group_size_bounds=(2, 2 * K),
        on_sampling_exhausted="pad",
        recheck_filtered_every=None,
        process_spans=False,
        refill_seed=3,
        shuffle_dataset=shuffle,
    )
    return SamplingPlan(**{**fields, **MODES[mode]})


def batch_inputs(dataset: Dataset, first: int, groups: int) -> list[dict]:
    """TRL's layout: each prompt of the batch K times in a row."""
    return [dataset[i] for i in range(first, first + groups) for _ in range(K)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(sorted(MODES)),
    kinds=st.lists(st.sampled_from(["always", "never", "mixed"]), min_size=48, max_size=48),
    groups=st.integers(1, 4),
    max_rounds=st.integers(2, 6),
    budget=st.one_of(st.none(), st.integers(1, 120)),
    shuffle=st.booleans(),
)
def test_the_sampler_keeps_its_promises_in_every_mode(mode, kinds, groups, max_rounds, budget, shuffle):
    dataset = Dataset.from_list([{"prompt": f"p{i}="} for i in range(len(kinds))])
    plan = sampling_plan(mode, max_rounds, shuffle)
    run = FakeRun(kinds, budget)
    sampler = DynamicSampler(plan, run.calls_for(plan), dataset, OneProcess(), environments=False)
    for batch in range(2):  # two consecutive batches, as TRL serves them without shuffling: 0.., then the next ones
        run.calls.clear()
        run.generated, run.step = 0, batch
        first = batch * groups
        batch_prompts = {f"p{i}=" for i in range(first, first + groups)}
        next_batches = {f"p{i}=" for i in range(first + groups, first + 3 * groups)}
        metrics: dict = defaultdict(list)
        inputs, replay = sampler.sample(batch_inputs(dataset, first, groups), metrics)
        assert len(inputs) == groups * K  # the batch keeps its shape
        rounds = metrics["sampling/rounds"][-1]
        assert rounds == len(run.calls) <= max_rounds
        drawn_before: set[str] = set()
        readmitted = set()
        for number, call in enumerate(run.calls):
            prompts = set(call["prompts"])
            new = prompts - drawn_before
            if number == 0:
                readmitted = new - batch_prompts
            elif call["spent_before"]:
                assert not new, (number, new)  # nothing new after the budget: continuations only
            refills = new if number else set()
            assert not refills & batch_prompts  # refill never re-draws the batch being filled
            if not shuffle:
                assert not refills & next_batches  # nor, in dataset order, the batches TRL serves next
            drawn_before |= prompts
        assert mode == "recheck" or not readmitted
        padded = int(replay.round.padding.sum())
        if padded:  # padding only at the budget, the cap, or when fewer rows are missing than a group
            reached = budget is not None and run.generated >= budget
            # (with the probe the cap comes a round early: a probe drawn for the last round could not be completed)
            cap = max_rounds - 1 if plan.probe_generations else max_rounds
            assert reached or rounds >= cap or mode == "adaptive", (padded, rounds, run.generated)
        trained = [row["prompt"] for row, pad in zip(inputs, replay.round.padding.tolist(), strict=True) if not pad]
        starts = trained[::K] if mode in ("plain", "recheck", "probe") else None
        if starts is not None:  # groups of K: no prompt trains as two groups of one batch
            assert len(starts) == len(set(starts))


def test_the_sampler_runs_on_values_alone():
    """The plan, the calls, the dataset and an accelerator: no trainer."""
    plan = sampling_plan("plain", 2, True)
    run = FakeRun(["mixed"] * 8, None)
    sampler = DynamicSampler(plan, run.calls_for(plan), Dataset.from_list([{"prompt": f"p{i}="} for i in range(8)]),
                             OneProcess(), environments=False)  # fmt: skip
    inputs, replay = sampler.sample(batch_inputs(sampler.train_dataset, 0, 2), defaultdict(list))
    assert len(inputs) == 8 and not bool(replay.round.padding.any())  # built from values alone
