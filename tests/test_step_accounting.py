"""The loss-denominator schedule (pure) and the checkpointed run state, without a model."""

import itertools
import json
import random

import pytest
import torch

from trl_loo_gspo.algorithms.step_accounting import IDX, SUM_STATS, StepAccounting, step_denominator
from trl_loo_gspo.trainer.run_state import LEGACY_STATE_FILE, RunStateCallback, saved_run_state


def brute_force(first, n, steps, iterations, counts):
    """Micro-step m trains slice m % S of round m // (S * iterations); exact iff one round serves the whole step."""
    rounds = {m // (steps * iterations) for m in range(first, first + n)}
    if len(rounds) == 1:
        return max(sum(counts[m % steps] for m in range(first, first + n)), 1.0), False
    return max(counts[first % steps] * n, 1.0), True


@pytest.mark.parametrize(("steps", "iterations", "ga"), list(itertools.product([1, 2, 3, 4], [1, 2], [1, 2, 3, 4])))
def test_schedule_matches_the_micro_step_layout(steps, iterations, ga):
    rng = random.Random(steps * 100 + iterations * 10 + ga)
    counts = [float(rng.randint(0, 50)) for _ in range(steps)]
    for first in range(0, 3 * steps * iterations * ga, ga):  # optimizer steps start every GA micro-steps
        expected = brute_force(first, ga, steps, iterations, counts)
        assert step_denominator(first, ga, steps, iterations, counts) == expected


def test_exact_when_the_round_covers_the_step():
    assert step_denominator(0, 2, 2, 1, [7.0, 5.0]) == (12.0, False)
    assert step_denominator(2, 2, 4, 1, [1.0, 2.0, 3.0, 4.0]) == (7.0, False)
    assert step_denominator(0, 2, 2, 1, [0.0, 0.0]) == (1.0, False)  # never divides by 0
    with pytest.raises(ValueError, match="slice counts"):
        step_denominator(0, 2, 2, 1, [1.0])


def test_provisional_denominator_is_corrected_exactly():
    step = StepAccounting(steps_per_generation=1, num_iterations=1, device=torch.device("cpu"))
    step.slice_counts = torch.tensor([[10.0, 2.0]], dtype=torch.float64)
    step.begin(first=0, n=3, column=0)  # S = 1 < GA = 3: three rounds in one step
    assert step.denominator == 30.0
    assert step.correction(true_denominator=24.0) == pytest.approx(30.0 / 24.0)
    assert step.correction(true_denominator=30.0) == 1.0


def test_step_sums_reset_at_each_step_and_trl_loss_keeps_only_sums():
    step = StepAccounting(2, 1, torch.device("cpu"))
    stats = torch.zeros(len(SUM_STATS), dtype=torch.float64)
    stats[IDX["tokens"]] = 5
    step.begin(0, 2, column=None)  # TRL's loss: no slice counts needed
    step.add(stats)
    step.add(stats, torch.tensor([1.5, -0.5], dtype=torch.float64))
    step.add_loss(torch.tensor(0.25))
    step.add_loss(torch.tensor(0.5))
    assert step.stats[IDX["tokens"]] == 10 and step.micro == 2 and float(step.loss_sum) == 0.75
    assert step.extrema.tolist() == [1.5, -0.5]
    step.end()
    step.begin(2, 2, column=None)
    assert step.micro == 0 and step.stats.sum() == 0 and step.loss_sum is None


class _Trainer:
    def run_state(self):
        return {"generated_tokens_total": 12}


def test_run_state_comes_back_from_trainer_state_or_the_legacy_file(tmp_path):
    saved = RunStateCallback(_Trainer().run_state).state()
    assert saved_run_state({"RunStateCallback": saved}, None) == {"generated_tokens_total": 12}
    assert saved_run_state({"RunStateCallback": [saved]}, None) == {"generated_tokens_total": 12}
    assert saved_run_state({}, None) is None
    (tmp_path / LEGACY_STATE_FILE).write_text(json.dumps({"generated_tokens_total": 3}))
    assert saved_run_state({}, str(tmp_path)) == {"generated_tokens_total": 3}
    assert RunStateCallback().state() == {"args": {}, "attributes": {"snapshot": {}}}  # rebuilt by Trainer: no data


def test_a_run_state_saved_by_release_0_1_loads_into_the_components():
    """0.1 saved one flat dict; today each component has its own entry (trainer.load_run_state upgrades it)."""
    from trl_loo_gspo.trainer.entropy import EntropyFeedback
    from trl_loo_gspo.trainer.reference_kl import ReferenceKL
    from trl_loo_gspo.trainer.run_plan import EntropyFeedbackPlan
    from trl_loo_gspo.trainer.run_state import upgrade_run_state
    from trl_loo_gspo.trainer.step import TokenCounters

    flat = {
        "generated_tokens_total": 120,
        "effective_tokens_total": 80,
        "sampling_counters": {"rounds": 3},
        "refill_sampler": None,
        "filtered_registry": {"7": {"step": 2, "pass_rate": 1.0, "outcome": "all_correct"}},
        "entropy_feedback": {"state": {"k": 1e-4, "entropy": 2.5}, "target": 2.5, "calibration": [2.4, 2.6]},
        "kl_due_step": 15,
    }
    state = upgrade_run_state(json.loads(json.dumps(flat)))
    counters = TokenCounters()
    counters.load_state_dict(state["counters"])
    assert (counters.generated, counters.effective) == (120, 80)
    assert state["sampler"]["sampling_counters"] == {"rounds": 3} and "7" in state["sampler"]["filtered_registry"]
    feedback = EntropyFeedback(EntropyFeedbackPlan(on=True))
    feedback.load_state_dict(state["entropy_feedback"])
    assert (feedback.k, feedback.target, feedback.calibration) == (1e-4, 2.5, [2.4, 2.6])
    kl = object.__new__(ReferenceKL)
    kl.load_state_dict(state["reference_kl"])
    assert kl.due_step == 15
    assert upgrade_run_state(state) is state  # today's layout comes back unchanged
