"""Advantage estimators (method §2.2) and the comparison-signal test (§3.1): pure, NaN-aware, vectorised.

Conventions: ``N`` answers (rows); rewards use NaN for "unscorable"; ``group_ids`` are any integers (groups may
differ in size, need not be contiguous or sorted). Adding an estimator is one decorated function here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: Advantage estimators by name: ``f(rewards (N,), group_ids (N,)) -> advantages (N,)``, pure and NaN-aware
#: (unscorable rows get 0). ``LooGspoConfig.advantage_estimator`` chooses one; adding one touches only this registry.
ADVANTAGE_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}


def register_advantage_estimator(name: str) -> Callable:
    """Decorator: add a pure advantage function to :data:`ADVANTAGE_ESTIMATORS` under ``name``."""

    def register(function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
        if name in ADVANTAGE_ESTIMATORS or name == "trl":
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = function
        return function

    return register


def _group_sums(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row sum and count of the *scorable* (non-NaN) values of the row's group, plus the scorable mask.

    Group ids may be any integers (not necessarily contiguous or sorted); groups may have different sizes.
    """
    if values.dim() != 1 or group_ids.shape != values.shape:
        raise ValueError(
            f"expected rewards and group_ids of the same shape (N,), got {tuple(values.shape)} and "
            f"{tuple(group_ids.shape)}"
        )
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    scorable = ~torch.isnan(values)
    filled = torch.where(scorable, values, torch.zeros_like(values))
    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, filled)
    counts = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, inverse, scorable.to(values.dtype)
    )
    return sums[inverse], counts[inverse], scorable


@register_advantage_estimator("loo")
def loo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Leave-one-out advantages that keep the reward scale.

    method §2.2: ``Â_i^LOO = R_i − (1/(K−1)) Σ_{j≠i} R_j``, with the sum and ``K`` taken over the *scorable* answers
    of the group of row ``i``. Unscorable rows (NaN reward) and groups with fewer than two scorable answers get 0.

    Args:
        rewards: ``(N,)`` float rewards, NaN where the answer could not be scored.
        group_ids: ``(N,)`` integer id of the prompt group of each row; groups may differ in size.

    Returns:
        ``(N,)`` advantages in the dtype of ``rewards`` (stop-gradient: the result carries no graph).
    """
    rewards = rewards.detach()
    sums, counts, scorable = _group_sums(rewards, group_ids)
    others = counts - 1
    valid = scorable & (others >= 1)
    # §2.2 LOO: R_i minus the mean of the other scorable answers of the group
    advantages = rewards - (sums - torch.where(scorable, rewards, torch.zeros_like(rewards))) / others.clamp(min=1)
    return torch.where(valid, advantages, torch.zeros_like(rewards))


@register_advantage_estimator("group_mean")
def group_mean_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Self-inclusive group-mean advantages ``Â_i^mean = R_i − R̄`` (method §2.2), NaN-aware.

    Equal to ``(K−1)/K · Â^LOO`` for a group with ``K`` scorable answers. Unscorable rows and groups with fewer than
    two scorable answers get 0.
    """
    rewards = rewards.detach()
    sums, counts, scorable = _group_sums(rewards, group_ids)
    valid = scorable & (counts >= 2)
    # §2.2 group mean: R_i − R̄
    advantages = rewards - sums / counts.clamp(min=1)
    return torch.where(valid, advantages, torch.zeros_like(rewards))


@register_advantage_estimator("grpo")
def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantages ``(R_i − R̄) / (std + eps)`` with the unbiased group std (TRL's ``scale_rewards="group"``).

    The control the method moves away from (§1 question 2: dividing by the within-group std changes the weights).
    NaN-aware; unscorable rows and groups with fewer than two scorable answers get 0.
    """
    rewards = rewards.detach()
    centred = group_mean_advantages(rewards, group_ids)
    squares = torch.where(torch.isnan(rewards), rewards, centred**2)  # keep NaN rows unscorable
    sq_sums, counts, scorable = _group_sums(squares, group_ids)
    std = torch.sqrt(sq_sums / (counts - 1).clamp(min=1))
    valid = scorable & (counts >= 2)
    # §1 q2 control (GRPO): (R_i − R̄) / (std + eps)
    return torch.where(valid, centred / (std + eps), torch.zeros_like(rewards))


def group_has_signal(rewards: torch.Tensor, group_ids: torch.Tensor, atol: float = 1e-6) -> torch.Tensor:
    """Whether each group carries a comparison signal (method §1 question 1, §3.1).

    A group has a signal when it has at least two scorable answers whose rewards are not all equal (up to ``atol``,
    since floating-point noise gives constant groups a tiny non-zero spread).

    Returns:
        ``(G,)`` bool, one entry per distinct group id in ascending id order.
    """
    ids, inverse = torch.unique(group_ids, return_inverse=True)
    scorable = ~torch.isnan(rewards)
    inf = torch.full_like(rewards, float("inf"))
    high = torch.full((ids.numel(),), -float("inf"), dtype=rewards.dtype, device=rewards.device)
    low = torch.full((ids.numel(),), float("inf"), dtype=rewards.dtype, device=rewards.device)
    high = high.scatter_reduce(0, inverse, torch.where(scorable, rewards, -inf), reduce="amax")
    low = low.scatter_reduce(0, inverse, torch.where(scorable, rewards, inf), reduce="amin")
    counts = torch.zeros(ids.numel(), dtype=torch.long, device=rewards.device).index_add_(0, inverse, scorable.long())
    # §3.1 comparison signal: ≥ 2 scorable answers that are not all equal
    return (counts >= 2) & ((high - low) > atol)


def frac_rows_without_signal(
    rewards: torch.Tensor, group_ids: torch.Tensor, atol: float = 1e-6, rows: torch.Tensor | None = None
) -> float:
    """Fraction of rows whose group carries no comparison signal (TRL's ``frac_reward_zero_std``, but over the
    actual groups, which may differ in size), among ``rows`` (a bool mask; default all)."""
    signal = group_has_signal(rewards, group_ids, atol)
    _, row_group = torch.unique(group_ids, return_inverse=True)
    flat = ~signal[row_group]
    rows = torch.ones_like(flat) if rows is None else rows.to(flat.device)
    return (flat & rows).sum().item() / max(int(rows.sum()), 1)
