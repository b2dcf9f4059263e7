"""A rollout function's extra per-row fields reach the reward functions in every dynamic-sampling round (full rounds,
the probe and its continuations, adaptive group sizes), as TRL passes them without dynamic sampling."""

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

from .helpers import base_kwargs, controlled_dataset, controlled_rollout, make_model_and_tokenizer

pytestmark = pytest.mark.slow
K = 4


def rollout_with_verdicts(tokenizer):
    """The controlled rollout plus an environment's verdict per row (what an env / OpenEnv-style rollout returns):
    p{i}= is always right for i % 3 == 0, never for i % 3 == 1, and right for even-length answers otherwise."""
    base = controlled_rollout(tokenizer, K)

    def rollout(prompts, trainer):
        out = base(prompts, trainer)
        verdicts = []
        for prompt, ids in zip(prompts, out["completion_ids"], strict=True):
            kind = int(prompt[1:-1]) % 3
            verdicts.append(1.0 if kind == 0 else 0.0 if kind == 1 else float((len(ids) - 1) % 2 == 0))
        out["verdict"] = verdicts
        out["env_name"] = "toy-env"  # a shared (non-list) field
        return out

    return rollout


def env_reward(completions, verdict, env_name, **_):
    assert set(env_name) == {"toy-env"}  # TRL hands every input column to rewards as one value per row
    return list(verdict)


@pytest.mark.parametrize(
    "sampling",
    [
        {},
        {"probe_generations": 2},
        {"probe_generations": 2, "adaptive_group_size": True, "min_generations": 2, "max_generations": 6},
    ],
    ids=["full-rounds", "probe", "adaptive"],
)
def test_rollout_extra_fields_reach_the_reward_in_every_round(tmp_path, sampling):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(str(tmp_path), num_generations=K, per_device_train_batch_size=8, dynamic_sampling=True)
    kwargs.update(max_steps=2, **sampling)
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=controlled_dataset(),
        processing_class=tokenizer,
        rollout_func=rollout_with_verdicts(tokenizer),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "sampling/rounds" in h]
    assert logs and all(h["sampling/padded_fraction"] == 0.0 for h in logs)  # groups with a signal were found
    assert all(h["rewards/frac_unscorable"] == 0.0 for h in logs)
    assert any(h["sampling/frac_filtered"] > 0.0 for h in logs)  # and the always/never prompts were filtered
