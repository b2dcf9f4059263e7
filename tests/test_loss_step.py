"""The loss as a function of one value: config → objective → LossStep → own_loss (trl_loo_gspo.trainer.loss), with
no trainer, on the spec's worked example in float64 (docs/method.md §4)."""

from types import SimpleNamespace

import pytest
import torch

from tests.test_core import F64, spec_example
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import aggregation
from trl_loo_gspo.algorithms.losses import ClipRange
from trl_loo_gspo.trainer.loss import LossStep, batch_loss, own_loss

SCALARS = dict(
    vllm_weights=False,
    epsilon_low=0.2,
    epsilon_high=0.3,
    beta=0.0,
    bias_correction_kl=False,
    world_size=1,
    measure_noise=False,
)


def config(tmp_path, **fields):
    return LooGspoConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, **fields)


def worked_batch():
    _, _, _, mask, logps, old_logps = spec_example()
    adv = torch.tensor([2 / 3, 2 / 3, -2 / 3, -2 / 3], dtype=F64)
    inputs = {"advantages": adv, "completion_mask": mask, "old_per_token_logps": old_logps}
    return inputs, logps, torch.zeros_like(logps)


def test_batch_loss_of_the_config_is_the_worked_example(tmp_path):
    inputs, logps, entropies = worked_batch()
    out = batch_loss(config(tmp_path), inputs, logps, entropies, denominator=12.0, **SCALARS)
    assert abs(out.loss.item() - (-2 / 15)) < 1e-15  # §4: Σ T_i ℓ_i / 12 tokens
    # the same value built by hand, field by field, from the objective the config resolves to
    by_hand = LossStep(
        policy_loss="response_clip",
        loss_aggregation="token_total",
        clip=ClipRange(0.2, 0.3),
        beta=0.0,
        bias_correction_kl=False,
        denominator=12.0,
        world_size=1,
        measure_noise=False,
        per_token_logps=logps,
        old_per_token_logps=inputs["old_per_token_logps"],
        advantages=inputs["advantages"],
        mask=inputs["completion_mask"],
        entropies=entropies,
    )
    assert own_loss(by_hand).loss.item() == out.loss.item()


def test_the_configs_aggregation_reaches_the_loss(tmp_path):
    inputs, logps, entropies = worked_batch()
    per_answer = batch_loss(
        config(tmp_path, loss_aggregation="sequence_mean"), inputs, logps, entropies, denominator=4.0, **SCALARS
    )
    # §3.3 equal weight per answer: (−11/15 − 13/15 + 3/5 + 8/15) / 4 answers
    assert abs(per_answer.loss.item() - (-11 / 15 - 13 / 15 + 3 / 5 + 8 / 15) / 4) < 1e-15


def test_a_trl_objective_is_not_computed_by_our_loss(tmp_path):
    inputs, logps, entropies = worked_batch()
    with pytest.raises(ValueError, match="TRL's loss"):
        batch_loss(config(tmp_path, loss_type="grpo"), inputs, logps, entropies, denominator=12.0, **SCALARS)


def test_the_trainers_objective_is_its_run_plans_one_resolution(tmp_path):
    from trl_loo_gspo.trainer.run_plan import RunPlan

    cfg = config(tmp_path)
    bare = SimpleNamespace(args=cfg)  # a trainer built without __init__ (TRL's tests): the config's resolution
    assert LooGspoTrainer.objective.fget(bare) == cfg.objective
    holder = SimpleNamespace(args=cfg, run_plan=RunPlan.resolve(cfg))
    assert LooGspoTrainer.objective.fget(holder) is holder.run_plan.objective == cfg.objective
    cfg.loss_aggregation = "sequence_mean"  # a changed config trains from the next plan (train() resolves it again)
    assert LooGspoTrainer.objective.fget(holder).loss_aggregation == "token_total"
    holder.run_plan = RunPlan.resolve(cfg)
    assert LooGspoTrainer.objective.fget(holder).loss_aggregation == "sequence_mean"


def test_an_unknown_aggregation_name_says_how_to_add_one():
    rows, lengths = torch.ones(2, dtype=F64), torch.tensor([1, 2])
    with pytest.raises(ValueError, match="register_aggregation"):
        aggregation.agg_loss(rows, lengths, "no_such", 3.0)
