"""LooGspoConfig validation: invalid combinations fail at construction with a message naming the field."""

import pytest
from trl import GRPOConfig

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo._compat import check_trl_version


def make(**kwargs):
    return LooGspoConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[], **kwargs)


def test_defaults_are_the_method_at_gspo_scale():
    config = make()
    assert config.advantage_estimator == "loo"
    assert config.loss_aggregation == "token_total"
    assert (config.epsilon, config.epsilon_high) == (3e-4, 4e-4)
    assert config.importance_sampling_level == "sequence"
    assert config.scale_rewards == "none"
    assert config.log_ratio_clamp is None
    assert config.beta == 0.0


def test_epsilon_high_none_means_equal_to_epsilon():
    assert make(epsilon=0.01, epsilon_high=None).epsilon_high == 0.01


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"advantage_estimator": "rloo"}, "advantage_estimator"),
        ({"loss_aggregation": "dapo"}, "loss_aggregation"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0}, "epsilon"),
        ({"epsilon_high": 0.0}, "epsilon_high"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"loss_type": "dapo"}, "loss_type"),
        ({"loss_type": "grpo"}, "loss_type"),
        ({"importance_sampling_level": "token"}, "importance_sampling_level"),
        ({"scale_rewards": "group"}, "scale_rewards"),
        ({"scale_rewards": "batch"}, "scale_rewards"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
        ({"top_entropy_quantile": 0.2}, "top_entropy_quantile"),
        ({"off_policy_mask_threshold": 0.5}, "off_policy_mask_threshold"),
        ({"delta": 2.0}, "delta"),
        ({"entropy_coef": 0.01}, "entropy_coef"),
        ({"use_adaptive_entropy": True}, "use_adaptive_entropy"),
        ({"log_ratio_clamp": 1e-4}, "log_ratio_clamp"),
        ({"log_ratio_clamp": 0.0}, "log_ratio_clamp"),
        ({"signal_tolerance": -1.0}, "signal_tolerance"),
    ],
)
def test_invalid_combinations_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make(**kwargs)


def test_guard_must_be_wider_than_the_clip_range():
    make(epsilon=0.2, epsilon_high=0.3, log_ratio_clamp=0.3)  # log(1.3)=0.262, -log(0.8)=0.223
    with pytest.raises(ValueError, match="log_ratio_clamp"):
        make(epsilon=0.2, epsilon_high=0.3, log_ratio_clamp=0.25)


def test_trainer_rejects_a_plain_grpo_config_with_the_fix():
    args = GRPOConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[])
    with pytest.raises(TypeError, match="LooGspoConfig"):
        LooGspoTrainer(model="unused", reward_funcs=[], args=args)


@pytest.mark.parametrize("version", ["1.15.2", "1.17.0", "2.0.0"])
def test_trl_outside_the_tested_range_fails_clearly(version):
    with pytest.raises(ImportError, match="trl>=1.16.0,<1.17.0"):
        check_trl_version(version)


def test_trl_inside_the_tested_range_passes():
    assert check_trl_version("1.16.0") == "1.16.0"
    assert check_trl_version("1.16.3") == "1.16.3"
