"""A true drop-in: with a TRL loss type, LooGspoTrainer trains what stock GRPOTrainer trains (TRL's own code), and our
additions (dynamic sampling, entropy feedback) work on top of it."""

import math

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

from .helpers import (
    base_kwargs,
    controlled_dataset,
    controlled_reward,
    controlled_rollout,
    controlled_trainer,
    make_model_and_tokenizer,
    param_delta,
    reference_gradient,
    run_recorded,
    spy_rounds,
)

pytestmark = pytest.mark.slow

TRL_LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


run = run_recorded


def assert_same_run(ours, stock, model0):
    assert len(ours.recorded) == len(stock.recorded) > 0
    for (inputs_a, loss_a, _), (inputs_b, loss_b, _) in zip(ours.recorded, stock.recorded, strict=True):
        torch.testing.assert_close(inputs_a["advantages"], inputs_b["advantages"], rtol=0, atol=0)
        torch.testing.assert_close(inputs_a["completion_mask"], inputs_b["completion_mask"], rtol=0, atol=0)
        assert abs(loss_a.item() - loss_b.item()) < 1e-7, (loss_a.item(), loss_b.item())
    assert any(abs(loss.item()) > 1e-5 for _, loss, _ in ours.recorded)  # a non-trivial loss was compared
    a, b = param_delta(ours.model, model0), param_delta(stock.model, model0)
    assert any(d.abs().max() > 0 for d in a.values())  # the step moved the weights
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-7, msg=f"parameter {name}")


@pytest.mark.parametrize("dynamic_sampling", [False, True], ids=["plain", "dynamic-sampling"])
@pytest.mark.parametrize("loss_type", TRL_LOSS_TYPES)
def test_trl_loss_type_equals_stock_grpo_trainer(tmp_path, loss_type, dynamic_sampling):
    """One SGD step, same seed, S = GA = 2: the same advantages, micro-batch losses and update as stock TRL. With
    dynamic sampling on, every group of this data carries a signal, so the kept batch is the stock batch."""
    ours, model0 = run(
        LooGspoTrainer, LooGspoConfig, tmp_path / "ours", loss_type=loss_type, dynamic_sampling=dynamic_sampling
    )
    stock, _ = run(GRPOTrainer, GRPOConfig, tmp_path / "stock", loss_type=loss_type)
    assert not ours.args.uses_own_loss and ours.objective.advantage_estimator == "trl"
    if dynamic_sampling:
        assert ours.state.log_history[0]["sampling/frac_filtered"] == 0.0
    assert_same_run(ours, stock, model0)


def test_trl_gspo_form_of_dapo_runs_through_our_exact_loss(tmp_path):
    """loss_type='dapo' + sequence ratio is our token-total objective: same update as TRL when S = GA, and it keeps
    our exact denominator when S ≠ GA (where TRL's window average is not exact)."""
    common = dict(loss_type="dapo", importance_sampling_level="sequence", num_iterations=2, max_steps=2)
    common.update(epsilon=1e-3, epsilon_high=2e-3)  # the off-policy 2nd step is partly on the clipped branch
    ours, model0 = run(LooGspoTrainer, LooGspoConfig, tmp_path / "ours", **common)
    stock, _ = run(GRPOTrainer, GRPOConfig, tmp_path / "stock", **common)
    assert ours.args.uses_own_loss and ours.objective.loss_aggregation == "token_total"
    assert "tokens/loss_denominator" in ours.state.log_history[0]
    assert_same_run(ours, stock, model0)


def test_our_token_level_control_equals_trl_dapo_when_s_equals_ga(tmp_path):
    """loss_type='loo_gspo' with importance_sampling_level='token' (our token_clip loss, token-total aggregation) is
    DAPO's token-level loss: with TRL's advantages (scale_rewards='group') and TRL's epsilon it trains exactly what
    stock TRL's dapo trains when S = GA (the ablation's "response-level → token-level ratio" on our loss path)."""
    common = dict(importance_sampling_level="token", num_iterations=2, max_steps=2, epsilon=0.02, epsilon_high=0.03)
    ours, model0 = run(
        LooGspoTrainer, LooGspoConfig, tmp_path / "ours", loss_type="loo_gspo", scale_rewards="group", **common
    )
    stock, _ = run(GRPOTrainer, GRPOConfig, tmp_path / "stock", loss_type="dapo", **common)
    assert ours.args.uses_own_loss and ours.objective.policy_loss == "token_clip"
    assert_same_run(ours, stock, model0)
    clipped = [h["clip_ratio/region_tokens"] for h in ours.state.log_history if "clip_ratio/region_tokens" in h]
    assert any(c > 0 for c in clipped)  # the off-policy step clipped some tokens: the clip branch was compared


@pytest.mark.parametrize(("steps", "ga"), [(4, 2), (1, 3)], ids=["S=2GA", "S<GA-rescale"])
def test_trl_gspo_form_of_dapo_is_exact_when_s_differs_from_ga(tmp_path, steps, ga):
    """Where stock TRL's dapo denominator is a window average (tests/test_trainer_loss.py), ours is the step's count:
    the first update is exactly −lr ∇(Σ T_i ℓ_i / Σ T_i) over that step's micro-batches."""
    ours, model0 = run(
        LooGspoTrainer,
        LooGspoConfig,
        tmp_path,
        loss_type="dapo",
        importance_sampling_level="sequence",
        steps_per_generation=steps,
        gradient_accumulation_steps=ga,
        per_device_train_batch_size=4,
    )
    first_step = [inputs for inputs, _, step in ours.recorded if step == 0]
    assert len(first_step) == ga
    grads, hand_loss = reference_gradient(ours, model0, first_step)
    lr = ours.args.learning_rate
    delta = param_delta(ours.model, model0)
    for name, grad in grads.items():
        torch.testing.assert_close(delta[name], -lr * grad, rtol=0, atol=1e-6, msg=f"parameter {name}")
    assert abs(ours.state.log_history[0]["loss"] - hand_loss.item()) < 1e-6


def test_trl_advantages_with_scale_rewards_group_equal_our_grpo_estimator(tmp_path):
    """advantage_estimator='grpo' (ours, over group ids) and TRL's scale_rewards='group' are the same weights."""
    ours, model0 = run(LooGspoTrainer, LooGspoConfig, tmp_path / "ours", advantage_estimator="grpo")
    trl, _ = run(LooGspoTrainer, LooGspoConfig, tmp_path / "trl", scale_rewards="group")
    assert trl.objective.advantage_estimator == "trl"
    for (a, _, _), (b, _, _) in zip(ours.recorded, trl.recorded, strict=True):
        torch.testing.assert_close(a["advantages"], b["advantages"], rtol=1e-6, atol=1e-6)


class RecordingBatches(LooGspoTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []
        spy_rounds(self, self._record)

    def _record(self, output, round_data, training):
        if training:
            self.batches.append({"rewards": round_data.rewards_per_func.clone(), "output": output})


def run_controlled(tmp_path, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    args = LooGspoConfig(**base_kwargs(str(tmp_path), **overrides))
    trainer = RecordingBatches(
        model=model,
        reward_funcs=[controlled_reward],
        args=args,
        train_dataset=controlled_dataset(),
        processing_class=tokenizer,
        rollout_func=controlled_rollout(tokenizer, args.num_generations),
    )
    trainer.train()
    return trainer


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_dynamic_sampling_with_a_trl_loss_trains_only_on_groups_with_signal(tmp_path, loss_type):
    trainer = run_controlled(tmp_path, loss_type=loss_type, dynamic_sampling=True, max_steps=3)
    assert trainer.state.global_step == 3
    assert any(h.get("sampling/frac_filtered", 0) > 0 for h in trainer.state.log_history)  # filtering happened
    k = trainer.args.num_generations
    for batch in trainer.batches:
        rewards = batch["rewards"][:, 0].view(-1, k)
        assert ((rewards.max(1).values - rewards.min(1).values) > 0).all()  # every trained group has a signal
        assert (batch["output"]["advantages"].view(-1, k).abs().sum(1) > 0).all()
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


def test_padding_rows_stay_out_of_trl_token_denominator(tmp_path):
    """When the rounds run out, padding rows get no valid token, and TRL's dapo denominator (num_items_in_batch,
    counted by TRL before our mask) is recounted without them."""
    trainer = run_controlled(
        tmp_path, loss_type="dapo", dynamic_sampling=True, max_sampling_rounds=1, per_device_train_batch_size=16
    )
    output = trainer.batches[0]["output"]
    pad = torch.isnan(trainer.batches[0]["rewards"]).all(1)
    assert pad.any() and not pad.all()
    assert output["completion_mask"][pad].sum() == 0
    assert int(output["num_items_in_batch"]) == int(output["completion_mask"].sum())


def test_entropy_feedback_moves_the_clip_bound_of_a_trl_loss(tmp_path):
    trainer = run_controlled(
        tmp_path,
        loss_type="grpo",
        entropy_feedback=True,
        entropy_feedback_target=100.0,  # far above any entropy: k grows every step
        entropy_step=0.01,
        entropy_k_max=0.05,
        max_steps=3,
    )
    logs = [h for h in trainer.state.log_history if "entropy_feedback/k" in h]
    assert [round(h["entropy_feedback/k"], 6) for h in logs] == [0.01, 0.02, 0.03]
    assert all(0.0 < h["entropy_feedback/entropy"] < math.log(trainer.model.config.vocab_size) + 1e-6 for h in logs)
    assert trainer.epsilon_high == pytest.approx(0.3 + 0.03)


@pytest.mark.parametrize("resolved", [True, False])
def test_trls_constructor_checks_the_resolved_objective(tmp_path, monkeypatch, capfd, caplog, resolved):
    """loss_type='vespo' resolves importance_sampling_level to 'token': TRL's constructor sees that, not the unset
    field (without the resolution — the control — TRL warns that the level should be 'token')."""
    import contextlib

    if not resolved:
        monkeypatch.setattr(LooGspoConfig, "resolved_for_trl", lambda self: contextlib.nullcontext(self))
    model, tokenizer = make_model_and_tokenizer()
    args = LooGspoConfig(**base_kwargs(str(tmp_path), loss_type="vespo", max_steps=1))
    assert args.importance_sampling_level is None  # unset: the objective resolves it
    with caplog.at_level("WARNING"):
        trainer = LooGspoTrainer(
            model=model,
            reward_funcs=[controlled_reward],
            args=args,
            train_dataset=controlled_dataset(),
            processing_class=tokenizer,
        )
    said = caplog.text + "".join(capfd.readouterr())
    assert ("`importance_sampling_level` should be set to `'token'`" in said) is not resolved
    assert args.importance_sampling_level is None  # the user's field is kept
    assert trainer.importance_sampling_level == "token" and trainer.loss_type == "vespo"


@pytest.mark.parametrize("loss_type", [None, "dapo"])
def test_every_batch_key_we_add_is_read_by_the_loss_that_trains(tmp_path, loss_type):
    """``round_step`` rides in the batch only where our loss reads it (the first update of a round); with TRL's loss
    it would ride unread."""
    seen: list[set] = []

    class Recording(LooGspoTrainer):
        def _compute_loss(self, model, inputs):
            seen.append(set(inputs))
            return super()._compute_loss(model, inputs)

    overrides = {} if loss_type is None else {"loss_type": loss_type}
    trainer, _, _ = controlled_trainer(Recording, tmp_path, dynamic_sampling=False, max_steps=1, **overrides)
    trainer.train()
    assert seen and all(("round_step" in keys) is trainer.objective.uses_own_loss for keys in seen)
