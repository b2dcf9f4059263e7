"""Reward shaping R = R_verifier − λ_len·P_overlong − λ_hack·P_hack: each term alone, together, λ = 0, logs."""

import pytest

from trl_loo_gspo.verifiers import MathVerifier, Verifier, VerifierResult
from trl_loo_gspo.verifiers.shaping import ShapedReward


class Exact(Verifier):
    """1.0 when the completion equals the answer; None (unscorable) for the answer 'infra'."""

    name = "exact"
    version = "test"

    def verify(self, completion, answer=None, **_):
        if answer == "infra":
            return VerifierResult(None, "unscorable", "sandbox_failure")
        return VerifierResult(float(completion.strip() == answer), "pass" if completion.strip() == answer else "fail")

    @staticmethod
    def hack_score(completion, **_):
        return 1.0 if "HACK" in completion else 0.0


COMPLETIONS = ["1", "1 HACK", "2", "1"]
ANSWERS = ["1", "1", "1", "infra"]
IDS = [[0] * 6, [0] * 8, [0] * 12, [0] * 9]  # L_max = 10, L_cache = 4: penalties 0, 0.5, 1, 0.75


def call(reward, **extra):
    return reward(prompts=["p"] * 4, completions=COMPLETIONS, completion_ids=IDS, answer=ANSWERS, **extra)


def test_lambda_zero_reproduces_the_bare_verifier_exactly():
    bare = call(Exact())
    assert call(ShapedReward(Exact())) == bare == [1.0, 0.0, 0.0, None]


def test_overlong_term_alone_uses_trl_soft_punishment():
    shaped = call(ShapedReward(Exact(), lambda_len=0.5, max_completion_length=10, soft_punish_cache=4))
    assert shaped == [1.0 - 0.0, 0.0 - 0.25, 0.0 - 0.5, None]  # unscorable stays unscorable


def test_hack_term_alone():
    shaped = call(ShapedReward(Exact(), lambda_hack=2.0))
    assert shaped == [1.0, -2.0, 0.0, None]


def test_both_terms_together():
    reward = ShapedReward(Exact(), lambda_len=1.0, max_completion_length=10, soft_punish_cache=4, lambda_hack=1.0)
    assert call(reward) == [1.0, 0.0 - 0.5 - 1.0, 0.0 - 1.0, None]


def test_truncated_but_correct_answers_are_penalised_softly_not_zeroed():
    reward = ShapedReward(Exact(), lambda_len=0.2, max_completion_length=10, soft_punish_cache=4)
    assert reward(completions=["1"], completion_ids=[[0] * 12], answer=["1"]) == [pytest.approx(0.8)]


def test_components_are_logged_per_step_and_per_sample():
    metrics, extra = {}, {}
    reward = ShapedReward(Exact(), lambda_len=1.0, max_completion_length=10, soft_punish_cache=4, lambda_hack=1.0)
    call(reward, log_metric=metrics.__setitem__, log_extra=extra.__setitem__)
    assert metrics["shaping/exact_shaped/verifier"] == pytest.approx(1 / 3)
    assert metrics["shaping/exact_shaped/overlong"] == pytest.approx((0 + 0.5 + 1 + 0.75) / 4)
    assert metrics["shaping/exact_shaped/overlong_triggered"] == 0.75
    assert metrics["shaping/exact_shaped/hack"] == 0.25 and metrics["shaping/exact_shaped/hack_triggered"] == 0.25
    assert metrics["verifiers/exact/anomaly/sandbox_failure"] == 0.25
    assert extra["exact_shaped/p_overlong"] == [0.0, 0.5, 1.0, 0.75] and extra["exact_shaped/p_hack"] == [0, 1, 0, 0]


def test_math_verifier_hack_detector_is_the_default():
    reward = ShapedReward(MathVerifier(), lambda_hack=1.0)
    scores = reward(
        completions=["$\\boxed{2}$ or $\\boxed{3}$", "$\\boxed{3}$"], completion_ids=[[0], [0]], answer=["3", "3"]
    )
    assert scores[1] == 1.0 and scores[0] <= 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lambda_len": -1.0},
        {"lambda_hack": -0.5},
        {"lambda_len": 1.0},  # no max_completion_length / soft_punish_cache
        {"lambda_len": 1.0, "max_completion_length": 4, "soft_punish_cache": 8},
    ],
)
def test_invalid_settings_fail_at_construction(kwargs):
    with pytest.raises(ValueError):
        ShapedReward(Exact(), **kwargs)


def test_hack_term_needs_a_detector():
    def plain(completions, **_):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="hack_detector"):
        ShapedReward(plain, lambda_hack=1.0)


@pytest.mark.slow
def test_components_appear_in_the_trainer_logs(tmp_path):
    from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
    from trl_loo_gspo.demo.tiny import addition_dataset

    from .helpers import base_kwargs, make_model_and_tokenizer

    model, tokenizer = make_model_and_tokenizer()
    reward = ShapedReward(Exact(), lambda_len=0.1, max_completion_length=8, soft_punish_cache=4, lambda_hack=1.0)
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path), max_steps=2, optim="adamw_torch", learning_rate=1e-3)),
        train_dataset=addition_dataset(32, seed=3),
        processing_class=tokenizer,
    )
    trainer.train()
    log = trainer.state.log_history[0]
    for key in (
        "shaping/exact_shaped/verifier",
        "shaping/exact_shaped/overlong",
        "shaping/exact_shaped/overlong_triggered",
        "shaping/exact_shaped/hack",
        "verifiers/exact/anomaly/timeout",
        "verifiers/exact/unscorable",
        "rewards/exact_shaped/mean",
    ):
        assert key in log, key
    assert log["shaping/exact_shaped/overlong_triggered"] > 0  # untrained model: completions run to the limit
