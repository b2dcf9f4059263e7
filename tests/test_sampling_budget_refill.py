"""Three budget and refill defects of the sampling rounds (issue 44), each reproduced at the trainer level: the
two-stage probe drew new probes after the budget was spent (B1), the registration record lost a budget given as a
callback (B2), and with ``shuffle_dataset=False`` refill re-drew the batch being filled (B3)."""

import json

import pytest
from datasets import Dataset

from trl_loo_gspo import LooGspoTrainer
from trl_loo_gspo.algorithms.group_filter import RefillSampler
from trl_loo_gspo.trainer.budget import RolloutTokenBudget

from .helpers import controlled_trainer, record_micro_batches

pytestmark = pytest.mark.slow


def _sampling(trainer) -> dict:
    return next(h for h in trainer.state.log_history if "sampling/rounds" in h)


@pytest.mark.parametrize("given_as", ["config", "callback"])
def test_with_the_probe_nothing_new_is_drawn_once_the_budget_is_spent(tmp_path, given_as):
    """B1: a 1-token budget and one step. The first round probes 2 answers of each prompt; the budget is spent, so
    the only round that may follow carries the continuations of the probes that already passed — no new probes
    (on main: 5 rounds, 132 tokens, rounds 2-4 drawing 8 new probe rows each)."""
    config = {"rollout_token_budget": 1} if given_as == "config" else {}
    trainer, _, _ = controlled_trainer(
        LooGspoTrainer, tmp_path, max_steps=1, probe_generations=2, max_sampling_rounds=8, **config
    )  # always-right, always-wrong and mixed prompts: some probes fail, so the batch is not full after round 2
    if given_as == "callback":
        trainer.add_callback(RolloutTokenBudget(1))
    trainer.train()
    logged = _sampling(trainer)
    assert logged["sampling/rounds"] <= 2, logged["sampling/rounds"]
    # probe tokens come from the first round only: its 8 rows (the batch's 4 prompts x 2) are answers "1" … "1111"
    # by row position (+ EOS), 2 + 3 + 4 + 5 tokens per 4 rows = 28 (on main: 56, a second round of new probes)
    assert logged["tokens/probe"] == 28, logged["tokens/probe"]
    assert logged["sampling/padded_fraction"] > 0  # the batch was not filled: padded, as a spent budget does


def test_the_registration_record_keeps_a_budget_given_as_a_callback(tmp_path):
    """B2: the ablation runner hands the budget as a callback; experiment.json recorded the config field (null)."""
    trainer, _, _ = controlled_trainer(LooGspoTrainer, tmp_path, max_steps=1)
    trainer.add_callback(RolloutTokenBudget(60))
    trainer.train()
    record = json.loads((tmp_path / "experiment.json").read_text())
    assert record["budget"]["rollout_token_budget"] == 60
    assert trainer.experiment_record["budget"]["rollout_token_budget"] == 60
    # the run plan is recorded whole: its budget, objective, sampling, feedback and records settings
    plan = record["run_plan"]
    assert plan == json.loads(json.dumps(trainer.run_plan.to_dict()))
    assert plan["rollout_token_budget"] == 60 and plan["configured_budget"] is None
    assert plan["sampling"]["dynamic_sampling"] is True and plan["sampling"]["num_generations"] == 4
    assert plan["objective"]["loss_type"] == "loo_gspo" and plan["feedback"]["entropy"]["on"] is False
    assert plan["records"]["register_experiment"] is True


def test_without_shuffling_refill_never_redraws_the_batch_being_filled(tmp_path):
    """B3: with shuffle_dataset=False TRL serves prompts 0, 1, 2, 3 | 4, 5, 6, 7 | …; refill walked the same order
    from 0, so prompt 0 trained as two groups of one batch and the next batch's prompts were consumed early."""
    kinds = ["never"] * 2 + ["mixed"] * 30  # the first batch's prompts 0 and 1 are filtered: refill must fill in
    data = Dataset.from_list([{"prompt": f"p{i}=", "kind": kind} for i, kind in enumerate(kinds)])
    trainer, _, _ = controlled_trainer(
        record_micro_batches(LooGspoTrainer),
        tmp_path,
        data,
        max_steps=1,
        shuffle_dataset=False,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=1,
    )
    trainer.train()
    trained = list(trainer._logs["prompt"])
    groups = [trained[i] for i in range(0, len(trained), 4)]
    assert len(groups) == len(set(groups)), groups  # no prompt trains as two groups of one batch
    assert "p0=" not in groups and "p1=" not in groups and {"p2=", "p3="} <= set(groups)
    # and refill did not take the prompts TRL serves next (4, 5, 6, 7 are the next batch)
    assert not {"p4=", "p5=", "p6=", "p7="} & set(groups), groups


def test_the_unshuffled_refill_order_walks_the_dataset_from_its_end():
    sampler = RefillSampler(10, seed=0, shuffle=False)
    assert sampler.draw(3) == [9, 8, 7]
    assert sampler.draw(2, exclude={6}) == [5, 4]
    assert sampler.draw(5) == [3, 2, 1, 0, 9]  # a new pass from the end again
