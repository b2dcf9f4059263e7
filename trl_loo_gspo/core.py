"""Pure tensor functions for the LOO-GSPO objective.

Every formula of the method (``docs/method.md``) that the trainer uses lives here, once, as a function of tensors
with no model, no process group and no trainer state. The trainer (:mod:`trl_loo_gspo.trainer`) only wires these
functions in. Each function names the section of ``docs/method.md`` it implements; that page maps each formula to
its function.

Conventions: ``N`` answers (rows), ``T`` completion positions; ``mask`` is 1 on valid generated tokens (no prompt,
no padding, no tool output) and 0 elsewhere; ``T_i = mask[i].sum()``. Rewards use NaN for "unscorable".
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


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "register_advantage_estimator",
    "clip_masks",
    "clamp_log_ratio",
    "group_has_signal",
    "frac_rows_without_signal",
    "group_mean_advantages",
    "grpo_advantages",
    "k3_kl",
    "loo_advantages",
    "response_loss",
    "row_losses",
    "sequence_log_ratio",
    "sequence_mean_aggregate",
    "sequence_ratio",
    "token_total_aggregate",
]


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


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean token log-ratio ``(1/T_i) Σ_t log r_{i,t}``: the log of GSPO's ``s_i`` (method §3.2).

    Rows with no valid token get 0 (``s_i = 1``). Inputs ``(N, T)``, output ``(N,)``.
    """
    mask = mask.to(logps.dtype)
    lengths = mask.sum(-1)
    # §3.2: log s_i = (1/T_i) Σ_t (log π_θ − log π_old), masked
    return ((logps - old_logps) * mask).sum(-1) / lengths.clamp(min=1.0)


def sequence_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's geometric-mean sequence ratio ``s_i = exp((1/T_i) Σ_t log r_{i,t})`` (method §3.2).

    Computed in the log domain (the mean of log-ratios is exponentiated once). Inputs ``(N, T)``, output ``(N,)``.
    """
    # §3.2 s_i = exp(mean log-ratio): one exp of the log-domain mean
    return torch.exp(sequence_log_ratio(logps, old_logps, mask))


def clamp_log_ratio(log_ratio: torch.Tensor, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Outer guard on the sequence log-ratio, applied in the log domain before ``exp`` (method §5.1).

    Clamps ``log s_i`` to ``[−bound, bound]``; ``±inf`` go to ``±bound`` and NaN to 0 (``s_i = 1``). Clamped entries
    get zero gradient (§5.1's "zero-gradient regions"; dropping the sample would be a different update).

    Returns:
        ``(clamped, triggered)``: the clamped log-ratio and a bool mask of rows where the guard fired (outside the
        interval or non-finite).
    """
    if not bound > 0:
        raise ValueError(f"log_ratio_clamp bound must be > 0, got {bound}")
    finite = torch.isfinite(log_ratio)
    triggered = ~finite | (log_ratio.abs() > bound)
    # NaN carries no direction: treat it as ratio 1 with no gradient; ±inf are clamped below.
    safe = torch.where(torch.isnan(log_ratio), torch.zeros_like(log_ratio), log_ratio)
    # §5.1 outer guard: clamp log s_i to [−bound, bound] before exp
    return safe.clamp(-bound, bound), triggered


def response_loss(s: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float) -> torch.Tensor:
    """Per-answer clipped loss to minimise (method §3.2).

    ``ℓ_i = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)``: the whole answer shares one clipping decision.
    """
    clipped = torch.clamp(s, 1.0 - epsilon_low, 1.0 + epsilon_high)
    # §3.2 response-level clipped surrogate
    return -torch.minimum(s * advantages, clipped * advantages)


def clip_masks(
    s: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows on the clipped (constant, zero-gradient) branch of :func:`response_loss`, split by side (method §3.2).

    Returns:
        ``(low, high)`` bool masks: ``s_i < 1−ε_low`` with ``Â_i < 0``, and ``s_i > 1+ε_high`` with ``Â_i > 0``.
    """
    # §3.2 clipped branch (constant in θ): below 1−ε_low with Â<0, above 1+ε_high with Â>0
    low = (s < 1.0 - epsilon_low) & (advantages < 0)
    high = (s > 1.0 + epsilon_high) & (advantages > 0)
    return low, high


def token_total_aggregate(
    losses: torch.Tensor, lengths: torch.Tensor, total_tokens: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Aggregate per-answer losses by the total count of valid tokens (method §3.3).

    ``L = Σ_i T_i ℓ_i / total_tokens``, with ``total_tokens = Σ_i T_i`` by default. In training, ``total_tokens``
    is the *global* count of valid tokens of the optimizer step (all processes, all accumulation micro-batches), so
    the sum of the per-micro-batch, per-process values of this function is §3.3's ``L``.
    """
    lengths = lengths.to(losses.dtype)
    denominator = lengths.sum() if total_tokens is None else total_tokens
    if isinstance(denominator, torch.Tensor):
        denominator = denominator.to(losses.dtype).clamp(min=1.0)
    else:
        denominator = max(float(denominator), 1.0)
    # §3.3 L = Σ T_i ℓ_i / Σ T_i
    return (lengths * losses).sum() / denominator


def sequence_mean_aggregate(
    losses: torch.Tensor, lengths: torch.Tensor, total_sequences: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Original GSPO aggregation: equal weight per valid answer, ``Σ_{T_i>0} ℓ_i / N_valid`` (method §3.3, control).

    Answers with no valid token (``T_i = 0``) count in neither the numerator nor the denominator.
    """
    valid = (lengths > 0).to(losses.dtype)
    denominator = valid.sum() if total_sequences is None else total_sequences
    if isinstance(denominator, torch.Tensor):
        denominator = denominator.to(losses.dtype).clamp(min=1.0)
    else:
        denominator = max(float(denominator), 1.0)
    # §3.3 control (original GSPO): equal weight per answer
    return (valid * losses).sum() / denominator


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): ``exp(ref − logp) − (ref − logp) − 1`` (method §5.1)."""
    delta = ref_logps - logps
    # §5.1 reference KL, k3 estimator per token
    return torch.exp(delta) - delta - 1.0


def token_response_loss(
    s: torch.Tensor, token_advantages: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> torch.Tensor:
    """Per-token clipped loss with one response-level ratio and per-token advantages (method §6 extension).

    ``ℓ_{i,t} = −min(s_i Â_{i,t}, clip(s_i, 1−ε_low, 1+ε_high) Â_{i,t})``; ``s`` is ``(B,)``, ``token_advantages``
    ``(B, T)``. With ``Â_{i,t} = Â_i`` for every t this is :func:`response_loss` broadcast over the tokens.
    """
    s = s.unsqueeze(-1)
    clipped = torch.clamp(s, 1.0 - epsilon_low, 1.0 + epsilon_high)
    # §6 response-level ratio, token-level advantages
    return -torch.minimum(s * token_advantages, clipped * token_advantages)


def row_losses(
    losses: torch.Tensor,
    mask: torch.Tensor,
    process_term: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
    token_terms: torch.Tensor | None = None,
) -> torch.Tensor:
    """One loss per answer, such that ``T_i · row_i`` is the answer's token sum of every per-token term.

    Args:
        losses: ``(N,)`` the response-level ℓ_i.
        mask: ``(N, T)`` valid tokens.
        process_term: ``(N, T)`` ℓ_i,t − ℓ_i of process feedback (§6), or ``None``.
        token_weights: ``(N, T)`` or ``(N, 1)`` per-token factors of the loss (vLLM importance-sampling weights).
        token_terms: ``(N, T)`` per-token additions after the weights (β · KL).

    Without per-token factors or additions this is ``ℓ_i`` (plus the row mean of the process term) exactly, so the
    outcome-only path gives the same numbers bit for bit.
    """
    fmask = mask.to(losses.dtype)
    lengths = mask.sum(-1).clamp(min=1).to(losses.dtype)
    if token_weights is None and token_terms is None:
        if process_term is None:
            return losses
        return losses + (process_term * fmask).sum(-1) / lengths
    per_token = losses.unsqueeze(1) if process_term is None else losses.unsqueeze(1) + process_term
    if token_weights is not None:
        per_token = per_token * token_weights
    if token_terms is not None:
        per_token = per_token + token_terms
    return (per_token * fmask).sum(-1) / lengths
