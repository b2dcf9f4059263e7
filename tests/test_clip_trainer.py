"""The clip measurements and the clip-range controller in the real trainer (docs/method.md, "Choosing ε"): logged
per optimizer step by position in the round, consistent with the loss's own clip counts, composed with entropy
feedback, in the run summary and the ablation record, and continued exactly after a resume."""

import json

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.experiment.ablation.runner import clip_record
from trl_loo_gspo.trainer.reporting import summary_rows

from .helpers import base_kwargs, make_model_and_tokenizer, parity_trainer

pytestmark = pytest.mark.slow


def trainer(tmp_path, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(
        str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        steps_per_generation=4,  # four optimizer steps per generation round: positions 0, 1, 2, 3
        max_steps=8,
        learning_rate=0.2,
        epsilon=0.01,
        epsilon_high=0.02,
    )
    kwargs.update(overrides)
    return parity_trainer(LooGspoTrainer, model, tokenizer, LooGspoConfig(**kwargs))


def steps(run):
    return [h for h in run.state.log_history if "loss" in h]


def test_a_fixed_range_is_measured_by_position_and_agrees_with_the_losss_own_counts(tmp_path):
    run = trainer(tmp_path)
    run.train()
    logs = steps(run)
    assert [h["clip/round_position"] for h in logs] == [0, 1, 2, 3] * 2
    for h in logs:
        # two independent counts of the step's clipped answers: the loss's sums and the gathered rows
        clipped_by_sums = h["clip_ratio/region_answers"] * h["clip/answers"]
        if h["clip/round_position"] == 0:
            assert "clip/offpolicy_fraction" not in h and h["ratio/abs_log/p99"] < 1e-5  # the old weights: s = 1
        else:
            assert h["clip/offpolicy_fraction"] * h["clip/offpolicy_answers"] == pytest.approx(clipped_by_sums)
        assert h["clip/epsilon_low"] == 0.01 and h["clip/epsilon_high"] == 0.02  # no controller: fixed
    assert any(h.get("clip/offpolicy_fraction", 0) > 0 for h in logs)  # the range bit somewhere
    assert max(h["ratio/abs_log/p90"] for h in logs) > 0.01
    rows = dict(summary_rows(run.state.log_history, run.run_facts()))
    assert [part.split(":")[0] for part in rows["… by step in round"].split(", ")] == ["1", "2", "3"]
    record = clip_record(run)
    stats = record["clip_stats"]
    assert sorted(stats["by_position"]) == ["0", "1", "2", "3"]
    assert stats["by_position"]["0"]["clipped_fraction"] == 0.0
    assert record["offpolicy_clip_fraction"] == stats["offpolicy"]["clipped_fraction"]
    assert record["epsilon_low_final"] == 0.01 and record["gradient_answers"] == sum(
        h["clip/gradient_answers"] for h in logs
    )
    json.dumps(record)  # the ablation record is JSON


def test_the_controller_moves_the_range_after_off_policy_steps_and_entropy_feedback_widens_it(tmp_path):
    run = trainer(
        tmp_path,
        clip_target_fraction=0.15,
        entropy_feedback=True,
        entropy_feedback_target=100.0,  # far above: k widens every step
        entropy_step=1e-3,
        entropy_k_max=1e-2,
    )
    run.train()
    logs = steps(run)
    previous = 0.01
    for h in logs:
        if h["clip/round_position"] == 0:  # nothing off-policy measured: the range stays
            assert h["clip/epsilon_low"] == previous
        else:
            assert h["clip/epsilon_low"] != previous
        # the feedback acts on the controlled base: ε_high = 2 ε_low (the configured ratio) + k
        assert h["clip/epsilon_high"] == pytest.approx(2 * h["clip/epsilon_low"] + h["entropy_feedback/k"])
        assert h["clip/target_fraction"] == 0.15
        previous = h["clip/epsilon_low"]
    assert run.epsilon_low == previous and run.clip_control.state.updates == 6
    assert dict(summary_rows(run.state.log_history, run.run_facts()))["clip target (controller)"] == "15.0%"


def test_a_resume_continues_the_same_sequence_of_epsilon(tmp_path):
    common = dict(clip_target_fraction=0.15, max_steps=8, save_strategy="steps", save_steps=3, optim="adamw_torch")
    full = trainer(tmp_path / "full", **common)
    full.train()
    resumed = trainer(tmp_path / "resumed", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))  # inside the first round
    keys = ("loss", "clip/epsilon_low", "clip/epsilon_high", "clip/epsilon_estimate", "clip/measured_fraction")
    by_step = [{h["step"]: {k: h.get(k) for k in keys} for h in steps(t)} for t in (full, resumed)]
    assert {s: by_step[1][s] for s in range(4, 9)} == {s: by_step[0][s] for s in range(4, 9)}
    assert resumed.clip_control.state_dict() == full.clip_control.state_dict()  # controller, tally, warning window
    assert full.clip_control.state.updates == 6 and full.epsilon_low != 0.01
