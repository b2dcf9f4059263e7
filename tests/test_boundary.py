"""The trainer's scoped swaps into TRL (trainer/boundary.py): set inside the block, undone after it, also when the
call inside raises."""

from types import SimpleNamespace

import pytest

from trl_loo_gspo.trainer.boundary import rolled_back, swapped


def test_a_swap_holds_inside_its_block_only():
    obj = SimpleNamespace(tools=["search"], rollout_func=None)
    with swapped(obj, tools=None, rollout_func=len) as inside:
        assert inside is obj and obj.tools is None and obj.rollout_func is len
    assert obj.tools == ["search"] and obj.rollout_func is None


def test_a_swap_is_undone_when_the_call_raises():
    obj = SimpleNamespace(_replay=None)
    with pytest.raises(RuntimeError), swapped(obj, _replay="batch"):
        raise RuntimeError("TRL failed")
    assert obj._replay is None


def test_a_rolled_back_round_leaves_the_per_batch_metrics_and_the_token_count_as_they_were():
    metrics = {"num_tokens": [10.0], "completions/mean_length": [3.0], "loss": [0.5]}
    state = SimpleNamespace(num_input_tokens_seen=100)
    with pytest.raises(ValueError), rolled_back(metrics, state):
        metrics["num_tokens"].append(20.0)
        metrics["completions/max_length"] = [7.0]
        metrics["loss"].append(0.4)  # not a per-batch generation metric: kept
        state.num_input_tokens_seen = 180
        raise ValueError
    assert metrics == {"num_tokens": [10.0], "completions/mean_length": [3.0], "loss": [0.5, 0.4]}
    assert state.num_input_tokens_seen == 100
