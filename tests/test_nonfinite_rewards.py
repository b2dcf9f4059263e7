"""An infinite reward stops training at once with the reward function's name (with stock TRL the weights turn NaN
at step 1 and sampling fails at step 2, far from the cause). NaN stays what TRL makes of None: unscorable."""

import math

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.tiny import addition_dataset

from .helpers import base_kwargs, make_model_and_tokenizer

pytestmark = pytest.mark.slow


def overflowing_reward(completions, **_):
    return [math.inf if i == 3 else 1.0 for i in range(len(completions))]


@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_an_infinite_reward_fails_at_step_one_naming_the_function(tmp_path, dynamic_sampling):
    model, tokenizer = make_model_and_tokenizer()
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[overflowing_reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path), max_steps=3, dynamic_sampling=dynamic_sampling)),
        train_dataset=addition_dataset(32, seed=3),
        processing_class=tokenizer,
    )
    with pytest.raises(ValueError, match=r"reward function 'overflowing_reward' returned an infinite reward for 1 of"):
        trainer.train()
    assert trainer.state.global_step == 0  # before any update
    assert all(math.isfinite(p.detach().abs().sum().item()) for p in trainer.model.parameters())
