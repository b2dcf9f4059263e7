"""The rollout-token budget counts the same tokens for the stock baseline and for the method: the policy's own
tokens, not tool or environment output (``env_mask`` / ``tool_mask`` = 0). The baseline is the same trainer with
TRL's loss (``LooGspoConfig.stock_trl``), so one counter serves both."""

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

from .helpers import base_kwargs, make_model_and_tokenizer, make_rollout, parity_reward, train_dataset

pytestmark = pytest.mark.slow


def rollout_with_env_output(tokenizer, num_generations):
    """The deterministic rollout, with the second half of every completion marked as environment output."""
    base = make_rollout(tokenizer, num_generations)

    def rollout(prompts, trainer):
        out = base(prompts, trainer)
        out["env_mask"] = [[1] * (len(ids) - len(ids) // 2) + [0] * (len(ids) // 2) for ids in out["completion_ids"]]
        trainer.expected_policy_tokens = getattr(trainer, "expected_policy_tokens", 0) + sum(
            sum(mask) for mask in out["env_mask"]
        )
        return out

    return rollout


def run(tmp_path, make_config):
    model, tokenizer = make_model_and_tokenizer()
    args = make_config(**base_kwargs(str(tmp_path), max_steps=2))
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[parity_reward],
        args=args,
        train_dataset=train_dataset(),
        processing_class=tokenizer,
        rollout_func=rollout_with_env_output(tokenizer, args.num_generations),
    )
    trainer.train()
    return trainer


def test_budget_counts_only_policy_tokens_for_baseline_and_method(tmp_path):
    method = run(tmp_path / "method", LooGspoConfig)
    baseline = run(tmp_path / "baseline", LooGspoConfig.stock_trl)
    assert not baseline.args.uses_own_loss and method.args.uses_own_loss
    assert method.generated_tokens_total == method.expected_policy_tokens > 0
    assert baseline.generated_tokens_total == baseline.expected_policy_tokens == method.generated_tokens_total
