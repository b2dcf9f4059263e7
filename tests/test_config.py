"""LooGspoConfig validation: invalid combinations fail at construction with a message naming the field."""

import pytest
from trl import GRPOConfig

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo._compat import check_trl_version


def make(**kwargs):
    return LooGspoConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[], **kwargs)


def test_defaults_are_the_method_at_gspo_scale():
    config = make()
    objective = config.objective
    assert objective.advantage_estimator == "loo"
    assert objective.loss_aggregation == "token_total"
    assert (objective.epsilon_low, objective.epsilon_high) == (3e-4, 4e-4)
    assert objective.importance_sampling_level == "sequence"
    assert objective.scale_rewards == "none"
    assert config.log_ratio_clamp is None
    assert config.beta == 0.0


def test_epsilon_high_none_means_equal_to_epsilon():
    assert make(epsilon=0.01, epsilon_high=None).objective.epsilon_high == 0.01


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"advantage_estimator": "rloo"}, "advantage_estimator"),
        ({"loss_aggregation": "dapo"}, "loss_aggregation"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0}, "epsilon"),
        ({"epsilon_high": 0.0}, "epsilon_high"),
        ({"epsilon_high": -0.1}, "epsilon_high"),
        ({"log_ratio_clamp": 1e-4}, "log_ratio_clamp"),
        ({"log_ratio_clamp": 0.0}, "log_ratio_clamp"),
        ({"signal_tolerance": -1.0}, "signal_tolerance"),
        ({"loss_type": "ppo"}, "loss_type"),
    ],
)
def test_invalid_combinations_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make(**kwargs)


def test_guard_must_be_wider_than_the_clip_range():
    make(epsilon=0.2, epsilon_high=0.3, log_ratio_clamp=0.3)  # log(1.3)=0.262, -log(0.8)=0.223
    with pytest.raises(ValueError, match="log_ratio_clamp"):
        make(epsilon=0.2, epsilon_high=0.3, log_ratio_clamp=0.25)


_CONTROLLED = dict(clip_target_fraction=0.15, steps_per_generation=4, gradient_accumulation_steps=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clip_target_fraction": 0.0}, "clip_target_fraction must be in"),
        ({"clip_target_fraction": 1.0}, "clip_target_fraction must be in"),
        ({"loss_type": "grpo"}, "clip_target_fraction chooses the clip range of our loss's sequence ratio"),
        ({"loss_type": "loo_gspo", "importance_sampling_level": "token"}, "importance_sampling_level=.token."),
        ({"clip_controller_max_step": 0.0}, "clip_controller_max_step"),
        ({"clip_controller_ema": 1.0}, "clip_controller_ema"),
        ({"clip_epsilon_bounds": [1e-3, 0.5]}, "clip_epsilon_bounds"),  # 3e-4 outside the bounds
        ({"clip_epsilon_bounds": [1e-5, 1.0]}, "clip_epsilon_bounds"),
        ({"steps_per_generation": 1}, "needs off-policy updates"),
        ({"steps_per_generation": 2, "gradient_accumulation_steps": 2}, "needs off-policy updates"),
        ({"log_ratio_clamp": 0.5}, "top of clip_epsilon_bounds"),  # ε may reach 0.5: -log(0.5) = 0.69
    ],
)
def test_the_clip_controller_refuses_what_it_cannot_control(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(**{**_CONTROLLED, **kwargs})


def test_the_clip_controller_accepts_its_settings():
    args = make(**_CONTROLLED, log_ratio_clamp=1.0, num_iterations=1)
    assert args.clip_target_fraction == 0.15 and args.objective.epsilon_low == 3e-4  # the objective's start
    make(clip_target_fraction=0.15, steps_per_generation=1, gradient_accumulation_steps=1, num_iterations=2)


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


# ------------------------------------------------------------------ every GRPOConfig value (drop-in)
TRL_LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


@pytest.mark.parametrize("loss_type", TRL_LOSS_TYPES)
def test_a_trl_loss_type_configures_exactly_what_grpo_config_does(loss_type):
    config = make(loss_type=loss_type)
    ours, objective = config.to_dict(), config.objective
    stock = GRPOConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[], loss_type=loss_type)
    # the fields the user left unset stay None in the config; the resolved objective holds TRL's values
    resolved = {
        "epsilon": objective.epsilon_low,
        "importance_sampling_level": objective.importance_sampling_level,
        "scale_rewards": objective.scale_rewards,
    }
    differing = {k: (v, ours[k]) for k, v in stock.to_dict().items() if resolved.get(k, ours[k]) != v}
    assert differing == {}
    assert objective.epsilon_high == (stock.epsilon if stock.epsilon_high is None else stock.epsilon_high)
    assert objective.advantage_estimator == "trl" and objective.loss_aggregation is None


@pytest.mark.parametrize(
    ("kwargs", "own_loss"),
    [
        ({}, True),
        ({"loss_type": "dapo", "importance_sampling_level": "sequence"}, True),  # TRL's GSPO = our token total
        ({"loss_type": "dapo", "importance_sampling_level": "sequence", "delta": 2.0}, False),  # TRL-only option
        ({"loss_type": "dapo"}, False),
        ({"loss_type": "grpo", "importance_sampling_level": "sequence"}, False),
    ],
)
def test_which_code_computes_the_loss(kwargs, own_loss):
    assert make(**kwargs).uses_own_loss is own_loss


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delta": 2.0},
        {"off_policy_mask_threshold": 0.5},
        {"top_entropy_quantile": 0.2},
        {"entropy_coef": 0.1},
        {"use_adaptive_entropy": True},
        {"importance_sampling_level": "token"},
    ],
)
def test_a_trl_loss_option_selects_trl_default_loss_and_says_so(kwargs):
    with pytest.warns(UserWarning, match="loss_type is TRL's default 'dapo'"):
        config = make(**kwargs)
    assert config.objective.loss_type == "dapo" and not config.uses_own_loss
    assert config.objective.epsilon_low == 0.2 and config.objective.advantage_estimator == "trl"


@pytest.mark.parametrize(
    ("kwargs", "scale"),
    [({"scale_rewards": "group"}, "group"), ({"scale_rewards": True}, "group"), ({"scale_rewards": "batch"}, "batch")],
)
def test_a_trl_advantage_option_keeps_our_loss_with_trl_advantages(kwargs, scale):
    config = make(**kwargs)
    objective = config.objective
    assert objective.uses_own_loss and objective.advantage_estimator == "trl" and objective.scale_rewards == scale
    assert make(multi_objective_aggregation="normalize_then_sum").objective.advantage_estimator == "trl"


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"loss_type": "loo_gspo", "delta": 2.0}, ("loss_type", "delta")),
        ({"loss_type": "loo_gspo", "top_entropy_quantile": 0.2}, ("loss_type", "top_entropy_quantile")),
        ({"advantage_estimator": "loo", "scale_rewards": "group"}, ("advantage_estimator", "scale_rewards")),
        (
            {"advantage_estimator": "grpo", "multi_objective_aggregation": "normalize_then_sum"},
            ("advantage_estimator", "multi_objective_aggregation"),
        ),
        ({"loss_type": "grpo", "log_ratio_clamp": 1.0}, ("log_ratio_clamp", "loss_type")),
        ({"loss_type": "grpo", "loss_aggregation": "token_total"}, ("loss_aggregation", "loss_type")),
        ({"loss_type": "bnpo", "process_advantage_coef": 0.1}, ("process_advantage_coef", "loss_type")),
        (
            {"loss_type": "dapo", "importance_sampling_level": "sequence", "loss_aggregation": "sequence_mean"},
            ("loss_type", "loss_aggregation"),
        ),
        ({"loss_type": "sapo", "entropy_feedback": True}, ("entropy_feedback", "loss_type")),
        (
            {
                "loss_type": "grpo",
                "dynamic_sampling": True,
                "num_generations": 8,
                "per_device_train_batch_size": 8,
                "probe_generations": 4,
                "adaptive_group_size": True,
            },
            ("adaptive_group_size", "advantage_estimator"),
        ),
    ],
)
def test_contradictions_fail_naming_both_fields(kwargs, fields):
    with pytest.raises(ValueError) as error:
        make(**kwargs)
    for name in fields:
        assert name in str(error.value)


def test_our_defaults_do_not_shadow_trl_fields():
    config = make()
    assert config.entropy_target == GRPOConfig.entropy_target  # TRL's adaptive-entropy target stays TRL's
    assert config.entropy_feedback_target is None


def test_our_loss_with_a_token_ratio_is_the_token_level_control_at_trls_epsilon():
    """loss_type='loo_gspo' named with importance_sampling_level='token' keeps our loss (advantages, aggregation,
    denominator) and clips per token; unset, ε is TRL's 0.2 (a token ratio is not length-normalised), not 3e-4."""
    objective = make(loss_type="loo_gspo", importance_sampling_level="token").objective
    assert objective.uses_own_loss and objective.policy_loss == "token_clip"
    assert (objective.epsilon_low, objective.epsilon_high) == (0.2, 0.2)
    assert (objective.advantage_estimator, objective.loss_aggregation) == ("loo", "token_total")
    tuned = make(loss_type="loo_gspo", importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28).objective
    assert (tuned.epsilon_low, tuned.epsilon_high) == (0.2, 0.28)
    assert make().objective.policy_loss == "response_clip"
    with pytest.raises(ValueError, match="importance_sampling_level='tokens' is not one of"):
        make(loss_type="loo_gspo", importance_sampling_level="tokens")
