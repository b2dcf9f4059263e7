"""Under dynamic sampling TRL's per-batch metrics describe the trained batch, not every generated row: num_tokens,
completions/*, frac_reward_zero_std (adaptive group sizes), the log_extra columns of the completions table, and our
rewards/frac_unscorable (padding rows are not answers)."""

import pytest
import torch

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import advantages

from .helpers import (
    base_kwargs,
    controlled_dataset,
    controlled_reward,
    controlled_rollout,
    make_model_and_tokenizer,
)

pytestmark = pytest.mark.slow
K = 4


class Recording(LooGspoTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        batch = {k: output[k].clone() for k in ("prompt_mask", "completion_mask", "completion_ids")}
        rows = output["completion_ids"].size(0)
        batch["table"] = (list(self._logs["prompt"])[-rows:], list(self._logs["extra"].get("echo", []))[-rows:])
        self.batches.append(batch)
        return output


def logging_reward(prompts, completions, kind, log_extra=None, **kwargs):
    log_extra("echo", list(prompts))  # a column of the completions table, one value per row: the row's own prompt
    return controlled_reward(completions, kind)


def make(tmp_path, reward=logging_reward, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(str(tmp_path), num_generations=K, per_device_train_batch_size=8, dynamic_sampling=True)
    kwargs.update({"max_steps": 3, **overrides})
    return Recording(
        model=model,
        reward_funcs=[reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=controlled_dataset(),
        processing_class=tokenizer,
        rollout_func=controlled_rollout(tokenizer, K),
    )


def test_trl_generation_metrics_describe_the_trained_batch(tmp_path):
    trainer = make(tmp_path)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert any(h["sampling/rounds"] > 1 for h in logs)  # groups were filtered and refilled
    seen = 0
    for log, batch in zip(logs, trainer.batches, strict=True):  # S = GA: one generation batch per optimizer step
        lengths = batch["completion_mask"].sum(-1).float()
        seen += int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
        assert log["num_tokens"] == seen  # tokens of trained rows only
        assert log["completions/mean_length"] == pytest.approx(lengths.mean().item())
        assert log["completions/max_length"] == lengths.max().item()
        assert log["completions/clipped_ratio"] == 0.0


def test_log_extra_columns_stay_aligned_with_their_rows(tmp_path):
    """Each step's completions-table rows and the values the reward function logged for them (here: the completion
    prompt) line up, also when the batch is assembled from several rounds."""
    trainer = make(tmp_path, log_completions=True, max_steps=4)
    trainer.train()
    assert any(h.get("sampling/rounds", 1) > 1 for h in trainer.state.log_history)
    for batch in trainer.batches:
        prompts, echoed = batch["table"]
        assert len(prompts) == len(echoed) > 0
        assert prompts == echoed


def test_padding_rows_are_not_unscorable_answers(tmp_path):
    """Every reward 1.0: every group is filtered and the batch is all padding — said as such, not as unscorable."""

    def always_right(completions, **_):
        return [1.0] * len(completions)

    trainer = make(tmp_path, reward=always_right, max_sampling_rounds=2, max_steps=1)
    with pytest.warns(UserWarning, match="max_sampling_rounds"):
        trainer.train()
    log = next(h for h in trainer.state.log_history if "sampling/rounds" in h)
    assert log["sampling/padded_fraction"] == 1.0
    assert log["rewards/frac_unscorable"] == 0.0
    assert log["rollout/reward_mean"] == 1.0


def test_rows_without_signal_counts_actual_groups():
    """Groups of 6 and 2 rows: the second is constant (2 of 8 rows). Windows of num_generations = 4, as TRL groups
    them, would see [1, 1, 1, 1] and [0, 0, 1, 1]: half the rows "zero std"."""
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 1, 1])
    groups = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    assert advantages.frac_rows_without_signal(rewards, groups) == 0.25
    padding = torch.tensor([True] * 6 + [False] * 2)
    assert advantages.frac_rows_without_signal(rewards, groups, rows=padding) == 0.0


def test_frac_reward_zero_std_with_adaptive_group_sizes(tmp_path):
    trainer = make(tmp_path, probe_generations=2, adaptive_group_size=True, min_generations=2, max_generations=6)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(h["sampling/padded_fraction"] == 0.0 for h in logs)
    assert all(h["frac_reward_zero_std"] == 0.0 for h in logs)  # every kept group carries a signal


def test_padding_rows_get_no_forward_pass(tmp_path, monkeypatch):
    """When the rounds run out, the zero-weight padding rows are left out of every forward pass of the step (the
    loss's, and TRL's old-log-prob pass when it runs): only rows that can carry a gradient are computed."""
    from trl import GRPOTrainer

    forwarded = []
    original = GRPOTrainer._get_per_token_logps_and_entropies

    def counting(self, model, input_ids, *args, **kwargs):
        forwarded.append(input_ids.size(0))
        return original(self, model, input_ids, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", counting)
    trainer = make(tmp_path, max_sampling_rounds=1, max_steps=1, per_device_train_batch_size=16, num_iterations=2)
    with pytest.warns(UserWarning, match="max_sampling_rounds"):
        trainer.train()
    log = next(h for h in trainer.state.log_history if "sampling/padded_fraction" in h)
    assert 0.0 < log["sampling/padded_fraction"] < 1.0
    real = int((trainer.batches[0]["completion_mask"].sum(-1) > 0).sum())
    assert 0 < real < 16
    # num_iterations=2: TRL's old-log-prob pass over the 16-row batch, then one loss pass per micro-batch (2 × 8)
    assert forwarded[0] == real  # the old-log-prob pass: real rows only
    assert sum(forwarded[1:]) == real and len(forwarded) == 3  # the loss passes: real rows only
