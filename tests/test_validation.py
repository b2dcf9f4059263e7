"""Independent validation at rollout-token checkpoints (method §5.2)."""

import pytest
import torch
from datasets import Dataset

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward
from trl_loo_gspo.trainer.validation import ValidationCallback
from trl_loo_gspo.verifiers import Verifier, VerifierResult

from .helpers import base_kwargs, make_model_and_tokenizer

pytestmark = pytest.mark.slow


class StartsWithDigit(Verifier):
    """Passes when the completion starts with a digit (often, for an untrained model); None for answer 'x'."""

    name, version = "starts_with_digit", "test"

    def verify(self, completion, answer=None, **_):
        if answer == "x":
            return VerifierResult(None, "unscorable", "sandbox_failure")
        ok = completion[:1].isdigit()
        return VerifierResult(float(ok), "pass" if ok else "fail")


def _trainer(tmp_path, max_steps: int) -> LooGspoTrainer:
    """The tiny local model on addition prompts, rewarded by the fraction of digits."""
    model, tokenizer = make_model_and_tokenizer()
    return LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path), max_steps=max_steps, optim="adamw_torch", learning_rate=1e-3)),
        train_dataset=addition_dataset(64, seed=8),
        processing_class=tokenizer,
    )


def test_evaluates_at_rollout_token_checkpoints_not_steps(tmp_path):
    trainer = _trainer(tmp_path, max_steps=6)
    validation = Dataset.from_list(
        [{"prompt": f"{i}+{i}=", "answer": "x" if i == 0 else str(2 * i)} for i in range(8)]
    )
    callback = ValidationCallback(trainer, validation, StartsWithDigit(), every_tokens=150, samples=2)
    trainer.add_callback(callback)
    trainer.train()
    tokens = [h["rollout_tokens"] for h in callback.history]
    assert tokens[0] == 0.0  # before the first step
    total = trainer.generated_tokens_total
    assert len(tokens) == 1 + total // 150  # one evaluation per 150 generated tokens crossed
    for k, value in enumerate(tokens[1:], start=1):
        assert value >= 150 * k  # evaluated once the checkpoint was crossed ...
        assert value - 150 * k < max(
            h["tokens/generated"] for h in trainer.state.log_history if "tokens/generated" in h
        )
    logged = [h for h in trainer.state.log_history if "eval/pass_rate" in h]
    assert [h["rollout_tokens"] for h in logged] == tokens
    for h in logged:
        assert 0.0 <= h["eval/pass_at_1"] <= 1.0 and 0.0 <= h["eval/pass_rate"] <= 1.0
        assert h["eval/unscorable"] == pytest.approx(1 / 8)  # the problem whose verifier is unscorable
    # the training logs still carry their own metrics (the evaluation did not flush them)
    assert all("loss" in h and "entropy" in h for h in trainer.state.log_history if "loss" in h)


def test_every_tokens_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        ValidationCallback(object(), [], StartsWithDigit(), every_tokens=0)


def test_validation_restores_every_random_stream(tmp_path, monkeypatch):
    """torch.manual_seed inside validation reseeds CPU *and every CUDA device*: after ValidationCallback.evaluate all
    of them are as they were, with Python's and NumPy's streams. CUDA is simulated (no GPU here): the state saved
    before must be the one restored after."""
    import random

    import numpy as np

    model, tokenizer = make_model_and_tokenizer()
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path))),
        train_dataset=addition_dataset(16, seed=8),
        processing_class=tokenizer,
    )
    validation = Dataset.from_list([{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(4)])
    callback = ValidationCallback(trainer, validation, StartsWithDigit(), every_tokens=150, samples=2, seed=5)
    cuda = {"state": "training-stream", "restored": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [cuda["state"]])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", cuda["restored"].append)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: cuda.update(state=f"seed-{seed}"))
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    cuda["state"] = "training-stream"
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    cuda["state"] = "training-stream"
    callback.evaluate()
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert cuda["restored"] == [["training-stream"]]  # the CUDA stream saved before validation reseeded it


def test_curve_points_greedy_only_and_a_full_final_point_with_per_problem_results(tmp_path):
    trainer = _trainer(tmp_path, max_steps=4)
    validation = Dataset.from_list(
        [{"prompt": f"{i}+{i}=", "answer": "x" if i == 0 else str(2 * i), "terms": 2 + i % 2} for i in range(7)]
    )
    callback = ValidationCallback(
        trainer, validation, StartsWithDigit(), every_tokens=100, samples=3, curve_samples=0, strata="terms"
    )
    trainer.add_callback(callback)
    trainer.train()
    between = callback.history[1:]
    assert between and all(h["eval/pass_rate"] != h["eval/pass_rate"] for h in between)  # NaN: greedy only
    assert [d["samples"] for d in callback.details] == [3] + [0] * len(between)
    last_tokens = callback.history[-1]["rollout_tokens"]
    final = callback.finish()
    assert final["rollout_tokens"] == float(trainer.generated_tokens_total)
    # a greedy-only point at the current count is replaced, not followed by a second point at the same count
    points = [h["rollout_tokens"] for h in callback.history]
    assert len(points) == len(set(points)) and points[-1] == final["rollout_tokens"]
    assert len(callback.history) == (1 + len(between) if last_tokens == final["rollout_tokens"] else 2 + len(between))
    assert callback.finish() is callback.history[-1]  # already full at this count: not evaluated again
    assert len(callback.history) == len(callback.details)
    for point, detail in ((callback.history[0], callback.details[0]), (final, callback.details[-1])):
        assert detail["samples"] == 3 and len(detail["greedy"]) == len(detail["successes"]) == 7
        assert point["eval/pass_at_1"] == pytest.approx(sum(detail["greedy"]) / 7)
        assert point["eval/pass_rate"] == pytest.approx(sum(detail["successes"]) / 21)
        assert detail["greedy"][0] == 0 and detail["successes"][0] == 0  # the unscorable problem never passes
        summed, tokens = detail["entropy"]
        assert tokens >= 21 and point["eval/entropy"] == pytest.approx(summed / tokens) and summed > 0
    assert callback.labels() == [2, 3, 2, 3, 2, 3, 2]
    state = callback.state_dict()
    again = ValidationCallback(trainer, validation, StartsWithDigit(), every_tokens=100, samples=3)
    again.load_state_dict(state)
    assert again.details == callback.details and again.history == callback.history


def test_curve_samples_and_strata_are_checked(tmp_path):
    rows = Dataset.from_list([{"prompt": "1=", "answer": "1"}])
    with pytest.raises(ValueError, match="curve_samples"):
        ValidationCallback(object(), rows, StartsWithDigit(), every_tokens=10, samples=2, curve_samples=3)
    with pytest.raises(ValueError, match="strata: no column 'terms'"):
        ValidationCallback(object(), rows, StartsWithDigit(), every_tokens=10, samples=2, strata="terms")
