"""Ratio noise at the first update of a round (metrics ``noise/*``): the pure summary, and the real trainer's logs —
exactly 0 in float32 on-policy, present only on fresh rounds, and large when the old log-probs are perturbed."""

import logging
import math

import pytest
import torch

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms.noise import NOISE_METRICS, fresh_round, noise_rows, noise_summary
from trl_loo_gspo.trainer.step import noise_warning

from .helpers import base_kwargs, make_model_and_tokenizer, parity_trainer


def test_noise_rows_and_summary_float64_golden():
    log_s = torch.tensor([0.0, -5e-4, 2e-4, 1e-3, 7.0], dtype=torch.float64)
    clipped = torch.tensor([False, True, False, False, True])
    valid = torch.tensor([True, True, True, True, False])  # the last row is not an answer
    rows = noise_rows(log_s, clipped, valid, 3e-4, 4e-4)
    assert torch.isnan(rows[4]).all()
    # s = exp(log s): 1, 0.99950.. (< 1 − 3e-4), 1.0002 (inside), 1.0010005 (> 1 + 4e-4)
    assert rows[:4, 2].tolist() == [0.0, 1.0, 0.0, 1.0]
    summary = noise_summary(rows)
    assert set(summary) == set(NOISE_METRICS)
    assert summary["noise/answers"] == 4.0
    assert summary["noise/clip_ratio"] == 0.25
    assert summary["noise/out_of_range"] == 0.5
    # |log s| sorted 0, 2e-4, 5e-4, 1e-3: median (2e-4 + 5e-4)/2, p90 at position 2.7: 5e-4 + 0.7·5e-4
    assert math.isclose(summary["noise/abs_log_ratio/median"], 3.5e-4, rel_tol=1e-12)
    assert math.isclose(summary["noise/abs_log_ratio/p90"], 8.5e-4, rel_tol=1e-12)
    assert summary["noise/abs_log_ratio/max"] == 1e-3
    assert noise_summary(rows[4:]) is None


def test_fresh_round_and_the_warning_threshold():
    assert fresh_round(3, 3) and not fresh_round(3, 4)
    quiet = {"noise/out_of_range": 0.01, "noise/answers": 100.0, "noise/abs_log_ratio/p90": 1e-4}
    assert noise_warning(quiet | {"noise/abs_log_ratio/max": 2e-4}, 3e-4, 4e-4, 5) is None
    assert noise_warning(None, 3e-4, 4e-4, 5) is None
    loud = noise_warning(quiet | {"noise/out_of_range": 0.2, "noise/abs_log_ratio/max": 2e-3}, 3e-4, 4e-4, 5)
    assert "20.0% of 100 answers" in loud and "[1 - 0.0003, 1 + 0.0004]" in loud and "cast_lm_head_to_fp32" in loud


class PerturbedOldLogps(LooGspoTrainer):
    """Adds a fixed offset to the old log-probs TRL computes: s_i ≠ 1 at identical weights, as bf16 noise would."""

    offset = 1e-3

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if output.get("old_per_token_logps") is not None:
            output["old_per_token_logps"] = output["old_per_token_logps"] - self.offset
        return output


def _train(tmp_path, trainer_cls=LooGspoTrainer, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(str(tmp_path), learning_rate=0.05, epsilon=3e-4, epsilon_high=4e-4, **overrides)
    trainer = parity_trainer(trainer_cls, model, tokenizer, LooGspoConfig(**kwargs))
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.slow
def test_noise_is_exactly_zero_in_float32_on_the_first_update_and_absent_later(tmp_path):
    """S = 2·GA: TRL computes the old log-probs in their own pass (another batch layout than the loss's); the first
    optimizer step of each round still sees s_i = 1 exactly in float32, and the second (weights moved) logs none."""
    logs = _train(tmp_path, steps_per_generation=4, gradient_accumulation_steps=2, max_steps=4)
    fresh = [entry for entry in logs if "noise/answers" in entry]
    assert [entry["step"] for entry in fresh] == [1, 3]  # the first update of each of the two rounds
    for entry in fresh:
        assert entry["noise/answers"] > 0
        for name in ("noise/clip_ratio", "noise/out_of_range", "noise/abs_log_ratio/max"):
            assert entry[name] == 0.0, (name, entry[name])
    moved = [entry for entry in logs if entry["step"] in (2, 4)]
    assert all(entry["ratio/max"] != 1.0 or entry["ratio/min"] != 1.0 for entry in moved)  # s_i ≠ 1 there


@pytest.mark.slow
def test_noise_is_zero_when_trl_skips_the_old_pass(tmp_path):
    """S = GA, one iteration: no old log-prob pass at all; every step is a fresh round and logs 0."""
    logs = _train(tmp_path, max_steps=2)
    assert [entry["noise/abs_log_ratio/max"] for entry in logs] == [0.0, 0.0]


@pytest.mark.slow
def test_perturbed_old_logps_show_as_noise_and_warn(tmp_path, caplog):
    """The metric can fail: an offset of 1e-3 on every old log-prob is log s_i = 1e-3 for every answer, outside
    [1 − 3e-4, 1 + 4e-4]; the run warns once, naming ε."""
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.step"):
        logs = _train(tmp_path, PerturbedOldLogps, steps_per_generation=4, gradient_accumulation_steps=2, max_steps=4)
    fresh = [entry for entry in logs if "noise/answers" in entry]
    assert len(fresh) == 2
    for entry in fresh:
        assert entry["noise/out_of_range"] == 1.0
        assert math.isclose(entry["noise/abs_log_ratio/median"], 1e-3, rel_tol=1e-4)
        assert 0.0 < entry["noise/clip_ratio"] <= 1.0  # the clipped branch needs Â > 0 above the range
    warnings = [r.message for r in caplog.records if "Ratio noise" in r.message]
    assert len(warnings) == 1 and "optimizer step 0" in warnings[0]
