"""The config keeps the user's fields; the objective is resolved afresh from them (issue #23 defects 5, 6, 12, 2)."""

import dataclasses
import pickle

import pytest

from trl_loo_gspo import LooGspoConfig


def make(**kwargs):
    return LooGspoConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[], **kwargs)


def test_fields_stay_as_the_user_wrote_them():
    config = make()
    assert (config.loss_type, config.epsilon, config.epsilon_high) == (None, None, None)
    assert (config.importance_sampling_level, config.scale_rewards) == (None, None)
    assert (config.advantage_estimator, config.loss_aggregation) == (None, None)


@pytest.mark.parametrize("value", ["none", False])
def test_spelling_out_the_default_scale_rewards_keeps_loo(value):
    # defect 5: scale_rewards='none' (the value the defaults resolve to) switched LOO to TRL's group mean
    assert make(scale_rewards=value).objective == make().objective
    assert make(scale_rewards=value).objective.advantage_estimator == "loo"


def test_scale_rewards_none_is_accepted_with_adaptive_group_sizes():
    kwargs = {"dynamic_sampling": True, "num_generations": 8, "per_device_train_batch_size": 8}
    config = make(scale_rewards="none", probe_generations=4, adaptive_group_size=True, **kwargs)
    assert config.objective.advantage_estimator == "loo"


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo", "cispo", "loo_gspo"])
def test_replace_one_field_equals_a_fresh_config(loss_type):
    # defect 6: replace(cfg, loss_type=...) failed naming loss_aggregation, or gave a hybrid objective
    replaced = dataclasses.replace(make(), loss_type=loss_type)
    assert replaced.objective == make(loss_type=loss_type).objective


def test_replace_back_and_forth_round_trips():
    base = make(epsilon=0.01)
    there = dataclasses.replace(base, loss_type="grpo")
    assert there.objective.epsilon_low == 0.01 and there.objective.advantage_estimator == "trl"
    back = dataclasses.replace(there, loss_type=None)
    assert back.objective == base.objective


def test_a_saved_config_reloads_to_the_same_objective_and_stays_replaceable():
    # Trainer.save_model pickles the args as training_args.bin
    config = make(loss_type="loo_gspo", loss_aggregation="sequence_mean")
    loaded = pickle.loads(pickle.dumps(config))
    assert loaded.objective == config.objective
    grpo = dataclasses.replace(loaded, loss_type="grpo", loss_aggregation=None)
    assert grpo.objective == make(loss_type="grpo").objective


def test_entropy_feedback_is_refused_with_cispo_naming_both_fields():
    # defect 12: cispo reads epsilon_high as an absolute cap (~5): widening it by k <= 4e-4 does nothing
    with pytest.raises(ValueError) as error:
        make(loss_type="cispo", entropy_feedback=True)
    assert "entropy_feedback" in str(error.value) and "cispo" in str(error.value)


def test_a_probe_needs_a_second_round():
    # defect 2: with max_sampling_rounds=1 every probed group was thrown away and the whole batch padded
    kwargs = {"dynamic_sampling": True, "num_generations": 8, "per_device_train_batch_size": 8}
    with pytest.raises(ValueError) as error:
        make(probe_generations=4, max_sampling_rounds=1, **kwargs)
    assert "probe_generations" in str(error.value) and "max_sampling_rounds" in str(error.value)
    make(probe_generations=4, max_sampling_rounds=2, **kwargs)
    # one round can complete groups of exactly the probe size
    make(probe_generations=4, max_sampling_rounds=1, adaptive_group_size=True, min_generations=4, **kwargs)
