"""Entropy feedback on ε_high in a real (tiny) training run: k follows the controller recomputed from the logs."""

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms.controllers import EntropyControllerState, entropy_controller_step
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward

from .helpers import base_kwargs, make_model_and_tokenizer

pytestmark = pytest.mark.slow
STEP, K_MAX = 1e-3, 2.5e-3


def train(tmp_path, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(
        str(tmp_path),
        max_steps=5,
        optim="adamw_torch",
        learning_rate=1e-3,
        epsilon=3e-4,
        epsilon_high=4e-4,
        entropy_feedback=True,
        entropy_step=STEP,
        entropy_k_max=K_MAX,
    )
    kwargs.update(overrides)
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=addition_dataset(64, seed=4),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer, [h for h in trainer.state.log_history if "entropy_feedback/k" in h]


def recompute(logs, target, k0, **kw):
    state, ks = EntropyControllerState(k=k0), []
    for h in logs:
        state = entropy_controller_step(state, h["entropy_feedback/entropy"], target, STEP, K_MAX, **kw)
        ks.append(state.k)
    return ks


def test_k_rises_within_bounds_when_entropy_is_below_target(tmp_path):
    trainer, logs = train(tmp_path, entropy_feedback_target=100.0)  # far above any entropy of a 50-token vocabulary
    ks = [h["entropy_feedback/k"] for h in logs]
    assert ks == pytest.approx([1e-3, 2e-3, 2.5e-3, 2.5e-3, 2.5e-3])  # rises by δ, held at k_max
    assert ks == pytest.approx(recompute(logs, 100.0, 0.0))
    for h in logs:
        assert h["entropy_feedback/entropy"] == pytest.approx(h["entropy"])  # the step's global token mean
        assert h["entropy_feedback/epsilon_high"] == pytest.approx(4e-4 + h["entropy_feedback/k"])
    assert trainer.epsilon_high == pytest.approx(4e-4 + K_MAX)


def test_k_falls_when_entropy_is_above_target(tmp_path):
    _, logs = train(tmp_path, entropy_feedback_target=0.0, entropy_k_init=K_MAX)
    ks = [h["entropy_feedback/k"] for h in logs]
    assert ks == pytest.approx([1.5e-3, 5e-4, 0.0, 0.0, 0.0])
    assert ks == pytest.approx(recompute(logs, 0.0, K_MAX))


def test_target_calibrated_from_the_first_steps_then_ema_and_dead_band(tmp_path):
    _, logs = train(
        tmp_path, entropy_feedback_target=None, entropy_calibration_steps=2, entropy_ema=0.5, entropy_dead_band=1e-3
    )
    assert [h["entropy_feedback/k"] for h in logs[:2]] == [0.0, 0.0]  # held while calibrating
    target = (logs[0]["entropy_feedback/entropy"] + logs[1]["entropy_feedback/entropy"]) / 2
    assert logs[2]["entropy_feedback/target"] == pytest.approx(target)
    state = EntropyControllerState(k=0.0)
    for h in logs[2:]:
        state = entropy_controller_step(state, h["entropy_feedback/entropy"], target, STEP, K_MAX, 0.5, 1e-3)
        assert h["entropy_feedback/k"] == pytest.approx(state.k)


def test_guard_must_stay_wider_than_the_widened_clip_range():
    import math

    kwargs = dict(output_dir="/tmp/x", use_cpu=True, bf16=False, epsilon=0.2, epsilon_high=0.3, entropy_feedback=True)
    LooGspoConfig(**kwargs, entropy_k_max=0.2, log_ratio_clamp=math.log(1.5) + 1e-3)
    with pytest.raises(ValueError, match="log_ratio_clamp"):
        LooGspoConfig(**kwargs, entropy_k_max=0.2, log_ratio_clamp=math.log(1.5) - 1e-3)
