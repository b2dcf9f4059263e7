"""Unit tests of the pure functions in trl_loo_gspo.algorithms (no model), golden numbers in float64."""

from fractions import Fraction

import pytest
import torch

from trl_loo_gspo.algorithms import advantages, aggregation
from trl_loo_gspo.algorithms import losses as loss_fns

F64 = torch.float64


def spec_example():
    """method §2.2 / §4: one prompt, four answers, scores [1,1,0,0], lengths [2,4,2,4], token ratios per answer."""
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=F64)
    group_ids = torch.zeros(4, dtype=torch.long)
    lengths = torch.tensor([2, 4, 2, 4])
    ratios = torch.tensor([1.1, 1.3, 0.9, 0.7], dtype=F64)
    mask = (torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)).long()
    old_logps = torch.randn(4, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    logps = old_logps + torch.log(ratios).unsqueeze(1)  # constant token ratio within each answer
    logps = torch.where(mask.bool(), logps, torch.full_like(logps, 123.0))  # garbage on padding must not matter
    return rewards, group_ids, lengths, mask, logps, old_logps


def test_spec_worked_example_float64():
    rewards, group_ids, lengths, mask, logps, old_logps = spec_example()
    adv = advantages.loo_advantages(rewards, group_ids)
    torch.testing.assert_close(adv, torch.tensor([2 / 3, 2 / 3, -2 / 3, -2 / 3], dtype=F64), rtol=0, atol=1e-15)

    s = loss_fns.sequence_ratio(logps, old_logps, mask)
    torch.testing.assert_close(s, torch.tensor([1.1, 1.3, 0.9, 0.7], dtype=F64), rtol=0, atol=1e-14)

    losses = loss_fns.response_loss(s, adv, epsilon_low=0.2, epsilon_high=0.3)
    expected = torch.tensor([-11 / 15, -13 / 15, 3 / 5, 8 / 15], dtype=F64)
    torch.testing.assert_close(losses, expected, rtol=0, atol=1e-14)

    total = aggregation.token_total_aggregate(losses, lengths)
    assert abs(total.item() - (-2 / 15)) < 1e-15
    # the same with the hand formula in exact arithmetic
    exact = (2 * Fraction(-11, 15) + 4 * Fraction(-13, 15) + 2 * Fraction(3, 5) + 4 * Fraction(8, 15)) / 12
    assert exact == Fraction(-2, 15)


def test_fourth_answer_is_on_the_clipped_branch():
    # §4: raw term 0.7·(−2/3) = −7/15, clipped 0.8·(−2/3) = −8/15, ℓ_4 = 8/15
    s = torch.tensor([0.7], dtype=F64)
    a = torch.tensor([-2 / 3], dtype=F64)
    assert loss_fns.response_loss(s, a, 0.2, 0.3).item() == pytest.approx(8 / 15, abs=1e-15)
    low, high = loss_fns.clip_masks(s, a, 0.2, 0.3)
    assert low.tolist() == [True] and high.tolist() == [False]


def test_explicit_total_tokens_is_the_denominator():
    losses = torch.tensor([1.0, 2.0], dtype=F64)
    lengths = torch.tensor([3, 1])
    assert aggregation.token_total_aggregate(losses, lengths, total_tokens=10).item() == pytest.approx(0.5)
    assert aggregation.token_total_aggregate(losses, lengths, torch.tensor(10.0)).item() == pytest.approx(0.5)
    # per-process shares over one global denominator add up to the global value
    a = aggregation.token_total_aggregate(losses[:1], lengths[:1], 4)
    b = aggregation.token_total_aggregate(losses[1:], lengths[1:], 4)
    assert (a + b).item() == pytest.approx(aggregation.token_total_aggregate(losses, lengths).item())


def test_sequence_mean_ignores_empty_answers():
    losses = torch.tensor([1.0, 3.0, 100.0], dtype=F64)
    lengths = torch.tensor([2, 5, 0])
    assert aggregation.sequence_mean_aggregate(losses, lengths).item() == pytest.approx(2.0)


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_loo_is_k_over_k_minus_1_times_group_mean(k):
    gen = torch.Generator().manual_seed(k)
    rewards = torch.rand(5 * k, dtype=F64, generator=gen)
    group_ids = torch.arange(5 * k) // k
    loo = advantages.loo_advantages(rewards, group_ids)
    mean = advantages.group_mean_advantages(rewards, group_ids)
    torch.testing.assert_close(loo, k / (k - 1) * mean, rtol=0, atol=1e-14)
    # and the definition: R_i − mean of the others
    r = rewards.view(-1, k)
    others = (r.sum(1, keepdim=True) - r) / (k - 1)
    torch.testing.assert_close(loo, (r - others).flatten(), rtol=0, atol=1e-14)


def test_loo_nan_rows_are_zero_and_out_of_the_baseline():
    nan = float("nan")
    rewards = torch.tensor([1.0, nan, 0.0, 0.5], dtype=F64)
    adv = advantages.loo_advantages(rewards, torch.zeros(4, dtype=torch.long))
    # scorable: [1, 0, 0.5]: K = 3
    expected = torch.tensor([1 - 0.25, 0.0, 0 - 0.75, 0.5 - 0.5], dtype=F64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-15)
    assert not torch.isnan(adv).any()


def test_loo_singleton_and_single_scorable_groups_get_zero():
    nan = float("nan")
    rewards = torch.tensor([1.0, 0.3, nan, 0.7, nan, nan], dtype=F64)
    group_ids = torch.tensor([0, 1, 1, 2, 2, 2])  # group 0: singleton; 1: one scorable; 2: one scorable
    adv = advantages.loo_advantages(rewards, group_ids)
    assert adv.tolist() == [0.0] * 6


def test_loo_mixed_group_sizes_and_unsorted_ids():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 3.0, 1.0], dtype=F64)
    group_ids = torch.tensor([7, 7, 2, 2, 2, 7, 2])  # group 7: [1, 0, 3]; group 2: [1, 0, 0, 1]
    adv = advantages.loo_advantages(rewards, group_ids)
    g7 = {0: 1 - 1.5, 1: 0 - 2.0, 5: 3 - 0.5}
    g2 = {2: 1 - 1 / 3, 3: 0 - 2 / 3, 4: 0 - 2 / 3, 6: 1 - 1 / 3}
    expected = torch.tensor([{**g7, **g2}[i] for i in range(7)], dtype=F64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-15)


def test_loo_keeps_reward_scale():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)
    ids = torch.zeros(4, dtype=torch.long)
    torch.testing.assert_close(
        advantages.loo_advantages(10 * rewards, ids), 10 * advantages.loo_advantages(rewards, ids)
    )
    # GRPO's std scaling removes the scale (the control the method moves away from)
    torch.testing.assert_close(
        advantages.grpo_advantages(10 * rewards, ids), advantages.grpo_advantages(rewards, ids), atol=1e-3, rtol=1e-3
    )


def test_grpo_advantages_match_trl_group_scaling():
    from trl.trainer.utils import nanstd

    gen = torch.Generator().manual_seed(3)
    rewards = torch.rand(12, dtype=torch.float32, generator=gen)
    rewards[5] = float("nan")
    grouped = rewards.view(-1, 4)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(4)
    std = nanstd(grouped, dim=1).repeat_interleave(4)
    trl_adv = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    ours = advantages.grpo_advantages(rewards, torch.arange(12) // 4)
    torch.testing.assert_close(ours, trl_adv, rtol=1e-5, atol=1e-6)


def test_group_has_signal_uses_a_tolerance():
    nan = float("nan")
    rewards = torch.tensor([1.0, 1.0 + 1e-9, 0.0, 1.0, nan, 0.5, 0.2], dtype=F64)
    ids = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert advantages.group_has_signal(rewards, ids).tolist() == [False, True, False, False]


def test_sequence_ratio_is_geometric_mean_in_log_domain():
    # huge per-token log-ratios whose mean is moderate: a product of ratios would overflow, the log domain does not
    logps = torch.tensor([[400.0, -399.0, 0.0]], dtype=F64)
    old = torch.zeros(1, 3, dtype=F64)
    mask = torch.tensor([[1, 1, 0]])
    assert loss_fns.sequence_ratio(logps, old, mask).item() == pytest.approx(torch.exp(torch.tensor(0.5)).item())
    # a row with no valid token gets ratio 1
    assert loss_fns.sequence_ratio(logps, old, torch.zeros(1, 3)).item() == 1.0


def test_clamp_log_ratio_counts_and_blocks_gradient():
    x = torch.tensor([0.1, 5.0, -5.0, float("inf"), float("-inf"), float("nan")], dtype=F64, requires_grad=True)
    clamped, triggered = loss_fns.clamp_log_ratio(x, 2.0)
    assert triggered.tolist() == [False, True, True, True, True, True]
    assert clamped.tolist() == [0.1, 2.0, -2.0, 2.0, -2.0, 0.0]
    clamped.sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        loss_fns.clamp_log_ratio(x, 0.0)


def test_gradient_unclipped_and_clipped_branches():
    """∂L/∂log π_{i,t} = −Â_i s_i / N on the unclipped branch and exactly 0 on the clipped branch (autograd)."""
    rewards, group_ids, lengths, mask, logps, old_logps = spec_example()
    logps = logps.clone().requires_grad_(True)
    adv = advantages.loo_advantages(rewards, group_ids)
    s = loss_fns.sequence_ratio(logps, old_logps, mask)
    loss = aggregation.token_total_aggregate(loss_fns.response_loss(s, adv, 0.2, 0.3), lengths)
    loss.backward()
    n = lengths.sum().item()
    # answers 1..3 are unclipped (1.1 ≤ 1.3, 1.3 ≤ 1.3 at the boundary counts as unclipped, 0.9 ≥ 0.8); 4 is clipped
    for i in range(4):
        for t in range(4):
            got = logps.grad[i, t].item()
            if t >= lengths[i]:
                assert got == 0.0  # padding gets nothing
            elif i == 3:
                assert got == 0.0  # clipped branch: exactly zero
            else:
                assert got == pytest.approx(-adv[i].item() * s[i].item() / n, rel=1e-12, abs=1e-15)


def test_gradient_check_against_finite_differences():
    gen = torch.Generator().manual_seed(1)
    logps = (torch.randn(3, 5, dtype=F64, generator=gen) * 0.01).requires_grad_(True)
    old = torch.zeros(3, 5, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=F64)

    def objective(x):
        s = loss_fns.sequence_ratio(x, old, mask)
        return aggregation.token_total_aggregate(loss_fns.response_loss(s, adv, 0.2, 0.3), mask.sum(-1))

    assert torch.autograd.gradcheck(objective, (logps,))


def test_k3_kl_is_zero_at_reference_and_positive_elsewhere():
    x = torch.tensor([0.0, 0.5, -0.5], dtype=F64)
    assert loss_fns.k3_kl(x, x).tolist() == [0.0, 0.0, 0.0]
    assert (loss_fns.k3_kl(x, torch.zeros(3, dtype=F64))[1:] > 0).all()


def test_token_clip_loss_by_hand_float64():
    """The token-level control (token_clip): one clip decision per token. Two answers, advantages [+1, −1], token
    ratios [1.1, 1.5] (valid) and [0.5, 0.9, pad]; ε = 0.2: token losses [−1.1, −1.2] and [0.8, 0.9], so
    ℓ = [−1.15, 0.85]; the second token of answer 1 (1.5 > 1.2, Â > 0) and the first of answer 2 (0.5 < 0.8, Â < 0)
    are clipped; token-total aggregation gives DAPO's (−1.1 − 1.2 + 0.8 + 0.9) / 4 = −0.15."""
    old = torch.zeros(2, 3, dtype=torch.float64)
    logps = torch.log(torch.tensor([[1.1, 1.5, 1.0], [0.5, 0.9, 1.0]], dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.float64)
    out = loss_fns.LOSSES["token_clip"](logps, old, torch.tensor([1.0, -1.0], dtype=torch.float64), mask,
                                        loss_fns.ClipRange(0.2, 0.2))  # fmt: skip
    torch.testing.assert_close(out.losses, torch.tensor([-1.15, 0.85], dtype=torch.float64))
    assert out.token_clipped_high.tolist() == [[False, True, False], [False, False, False]]
    assert out.token_clipped_low.tolist() == [[False, False, False], [True, False, False]]
    assert out.clipped_high.tolist() == [True, False] and out.clipped_low.tolist() == [False, True]
    rows = aggregation.row_losses(out.losses, mask, out.process_term)
    total = aggregation.agg_loss(rows, mask.sum(-1), "token_total", mask.sum())
    assert abs(total.item() - (-0.15)) < 1e-12
    total.backward()
    # d/d logp of −r·Â = −r·Â on unclipped tokens, 0 on clipped ones; divided by the 4 tokens
    expected = torch.tensor([[-1.1, 0.0, 0.0], [0.0, 0.9, 0.0]], dtype=torch.float64) / 4
    torch.testing.assert_close(logps.grad, expected)


def test_token_clip_per_token_weights_multiply_each_tokens_own_loss():
    """With per-token factors (vLLM's importance weights) the row is Σ_t w_t ℓ_{i,t} / T_i, not ℓ_i · mean w."""
    old = torch.zeros(1, 2, dtype=torch.float64)
    logps = torch.log(torch.tensor([[1.1, 0.9]], dtype=torch.float64))
    mask = torch.ones(1, 2, dtype=torch.float64)
    out = loss_fns.LOSSES["token_clip"](logps, old, torch.tensor([1.0], dtype=torch.float64), mask,
                                        loss_fns.ClipRange(0.2, 0.2))  # fmt: skip
    weights = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    row = aggregation.row_losses(out.losses, mask, out.process_term, token_weights=weights)
    torch.testing.assert_close(row, torch.tensor([2.0 * -1.1 / 2], dtype=torch.float64))
