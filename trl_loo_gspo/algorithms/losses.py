"""Policy losses (method §3.2, §5.1, §6): pure functions over tensors, and a registry with one signature.

A policy loss maps ``(logps, old_logps, advantages, mask, clip, process_advantages)`` to a :class:`PolicyLoss`:
the per-answer loss and the clip statistics it implies, so the trainer never re-derives them. Adding a loss is one
decorated function (here, or in any module imported before the config is built) plus ``policy_loss="name"``, which
selects it (:mod:`trl_loo_gspo.config.objective`). A loss registered with ``clip_range=False``
(:data:`UNCLIPPED_LOSSES`) has no clip range: ε does not apply to it and the §5.1 outer guard is its only bound.

Conventions: ``N`` answers (rows), ``T`` completion positions; ``mask`` is 1 on valid generated tokens (no prompt,
no padding, no tool output); ``T_i = mask[i].sum()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ClipRange:
    """The clip range of a policy loss: ``[1 − epsilon_low, 1 + epsilon_high]`` and the optional §5.1 guard.

    ``epsilon_low`` / ``epsilon_high`` are ``None`` for a loss without a clip range (:data:`UNCLIPPED_LOSSES`, which
    reads only ``log_ratio_clamp``)."""

    epsilon_low: float | None
    epsilon_high: float | None
    log_ratio_clamp: float | None = None


@dataclass(frozen=True)
class PolicyLoss:
    """What a policy loss returns for ``N`` answers.

    Attributes:
        losses: ``(N,)`` response-level loss ℓ_i (to minimise).
        process_term: ``(N, T)`` per-token ℓ_i,t − ℓ_i of token-level advantages (§6), or ``None``.
        ratio: ``(N,)`` the importance ratio of the loss (GSPO's ``s_i``: the ratio it clipped, for a clipped loss).
        clipped_low: ``(N,)`` bool, answers on the lower clipped (zero-gradient) branch (a token-level loss: answers
            with at least one token on it).
        clipped_high: ``(N,)`` bool, answers on the upper clipped branch (likewise).
        guard: ``(N,)`` bool where the §5.1 guard fired, or ``None`` when it is off.
        token_clipped_low, token_clipped_high: ``(N, T)`` bool, tokens on the clipped branches, for a loss that
            clips per token; ``None`` for a response-level loss (every valid token of a clipped answer counts).
    """

    losses: torch.Tensor
    process_term: torch.Tensor | None
    ratio: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor
    guard: torch.Tensor | None
    token_clipped_low: torch.Tensor | None = None
    token_clipped_high: torch.Tensor | None = None


LossFunction = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, ClipRange, "torch.Tensor | None"], PolicyLoss
]
#: Policy losses by name, one signature: ``f(logps, old_logps, advantages, mask, clip, process_advantages)``.
LOSSES: dict[str, LossFunction] = {}
#: Names in :data:`LOSSES` of the losses without a clip range (``register_loss(name, clip_range=False)``): the config
#: refuses ε and the controllers that move it with them, and requires the outer guard ``log_ratio_clamp`` (§5.1).
UNCLIPPED_LOSSES: set[str] = set()


def register_loss(name: str, *, clip_range: bool = True) -> Callable[[LossFunction], LossFunction]:
    """Decorator: add a policy loss to :data:`LOSSES` under ``name``; ``clip_range=False`` for a loss that reads no
    ε (its only bound is the §5.1 outer guard; :data:`UNCLIPPED_LOSSES`)."""

    def register(function: LossFunction) -> LossFunction:
        if name in LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        LOSSES[name] = function
        if not clip_range:
            UNCLIPPED_LOSSES.add(name)
        return function

    return register


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


def guarded_sequence_ratio(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, log_ratio_clamp: float | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GSPO's ``s_i`` after the optional outer guard (method §3.2, §5.1): :func:`sequence_log_ratio`, clamped by
    :func:`clamp_log_ratio` when ``log_ratio_clamp`` is set, then one ``exp``.

    Returns:
        ``(s, guard)``: ``(N,)`` ratios and the bool mask of rows where the guard fired (``None`` when it is off).
    """
    log_s = sequence_log_ratio(logps, old_logps, mask)
    guard = None
    if log_ratio_clamp is not None:
        log_s, guard = clamp_log_ratio(log_s, log_ratio_clamp)
    return torch.exp(log_s), guard


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


def unclipped_loss(s: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Loss to minimise with no clip range (method §5.1, the "no clip, outer guard only" arm): ``ℓ_i = −s_i Â_i``.

    ``s`` and ``advantages`` broadcast: ``(N,)`` and ``(N,)``, or ``(N, 1)`` and per-token ``(N, T)`` (§6).
    """
    # §5.1 guard-only arm: ℓ_i = −s_i Â_i, no clip range (log s_i bounded by the outer guard alone)
    return -s * advantages


def response_process_term(
    s: torch.Tensor,
    advantages: torch.Tensor,
    process_advantages: torch.Tensor | None,
    losses: torch.Tensor,
    token_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor | None:
    """The ``(N, T)`` per-token term ``ℓ_{i,t} − ℓ_i`` of a response-level loss with process advantages (method §6):
    per-token advantages under the answer's one ratio ``s_i``; ``token_loss(s, token_advantages)`` is the loss's
    ``ℓ_{i,t}``, ``losses`` its ``ℓ_i``.

    ``None`` for a batch without any process advantage: the outcome-only path, the same loss and gradient bit for
    bit (the per-token route would only reorder float sums).
    """
    if process_advantages is None or not bool(process_advantages.any()):
        return None
    # §6 response-level ratio with per-token advantages Â_i,t = Â_i + α Â^proc_i,t
    token_advantages = advantages.unsqueeze(1) + process_advantages
    return token_loss(s, token_advantages) - losses.unsqueeze(1)


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): ``exp(ref − logp) − (ref − logp) − 1`` (method §5.1)."""
    delta = ref_logps - logps
    # §5.1 reference KL, k3 estimator per token
    return torch.exp(delta) - delta - 1.0


@register_loss("response_clip")
def response_clip_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: ClipRange,
    process_advantages: torch.Tensor | None = None,
) -> PolicyLoss:
    """GSPO's sequence ratio clipped per response (§3.2), after the optional outer guard (§5.1); with process
    advantages, per-token advantages under the same response-level ratio (§6; :func:`response_process_term`).
    """
    if clip.epsilon_low is None or clip.epsilon_high is None:
        raise ValueError("policy loss 'response_clip' needs a clip range: epsilon_low and epsilon_high")
    epsilon_low, epsilon_high = clip.epsilon_low, clip.epsilon_high
    s, guard = guarded_sequence_ratio(logps, old_logps, mask, clip.log_ratio_clamp)
    # §3.2 response-level clipped loss on s_i (after the optional §5.1 guard)
    losses = response_loss(s, advantages, epsilon_low, epsilon_high)
    process_term = response_process_term(
        s, advantages, process_advantages, losses, lambda s, a: token_response_loss(s, a, epsilon_low, epsilon_high)
    )
    low, high = clip_masks(s.detach(), advantages, epsilon_low, epsilon_high)
    return PolicyLoss(losses, process_term, s, low, high, guard)


@register_loss("response_unclipped", clip_range=False)
def response_unclipped_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: ClipRange,
    process_advantages: torch.Tensor | None = None,
) -> PolicyLoss:
    """GSPO's sequence ratio with no clip range, ``ℓ_i = −s_i Â_i`` (:func:`unclipped_loss`): the "no clip, outer
    guard only" arm of an ablation (method §5.1). The guard ``clip.log_ratio_clamp`` is required and is the only
    bound on ``s_i`` (answers it clamps get zero gradient); ε is not read. With process advantages, per-token
    advantages under the same ratio (§6; :func:`response_process_term`). Nothing is ever on a clipped branch.
    """
    if clip.log_ratio_clamp is None:
        raise ValueError(
            "policy loss 'response_unclipped' needs the outer guard log_ratio_clamp: it is the only bound on s_i"
        )
    s, guard = guarded_sequence_ratio(logps, old_logps, mask, clip.log_ratio_clamp)
    # §5.1 no clip range: −s_i Â_i on s_i after the required guard
    losses = unclipped_loss(s, advantages)
    process_term = response_process_term(
        s, advantages, process_advantages, losses, lambda s, a: unclipped_loss(s.unsqueeze(-1), a)
    )
    never = torch.zeros_like(s, dtype=torch.bool)
    return PolicyLoss(losses, process_term, s, never, never.clone(), guard)


@register_loss("token_clip")
def token_clip_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: ClipRange,
    process_advantages: torch.Tensor | None = None,
) -> PolicyLoss:
    """The token-level control of §3.2 on our loss path: PPO/DAPO's per-token ratio ``r_{i,t}``, clipped per token
    (after the optional outer guard, per token in the log domain), with our advantages and aggregation.

    ``ℓ_{i,t} = −min(r_{i,t} Â_{i,t}, clip(r_{i,t}, 1−ε_low, 1+ε_high) Â_{i,t})`` and ``ℓ_i`` is its mean over the
    answer's valid tokens, so that ``T_i ℓ_i = Σ_t ℓ_{i,t}``: token-total aggregation then gives DAPO's token-level
    loss exactly, and the process term carries each token's own loss (per-token factors such as vLLM's importance
    weights multiply ``ℓ_{i,t}``, not ``ℓ_i``). ``ratio`` is the geometric mean of the token ratios (for the logs).
    """
    if clip.epsilon_low is None or clip.epsilon_high is None:
        raise ValueError("policy loss 'token_clip' needs a clip range: epsilon_low and epsilon_high")
    fmask = mask.to(logps.dtype)
    log_r = logps - old_logps
    guard = None
    if clip.log_ratio_clamp is not None:
        log_r, fired = clamp_log_ratio(log_r, clip.log_ratio_clamp)
        guard = (fired & mask.bool()).any(-1)
    r = torch.exp(log_r)
    token_advantages = advantages.unsqueeze(1).expand_as(r)
    if process_advantages is not None:
        token_advantages = token_advantages + process_advantages
    clipped = torch.clamp(r, 1.0 - clip.epsilon_low, 1.0 + clip.epsilon_high)
    # §3.2 control: token-level clipped surrogate (one clipping decision per token)
    token_losses = -torch.minimum(r * token_advantages, clipped * token_advantages)
    losses = (token_losses * fmask).sum(-1) / fmask.sum(-1).clamp(min=1.0)
    low, high = clip_masks(r.detach(), token_advantages, clip.epsilon_low, clip.epsilon_high)
    valid = mask.bool()
    low, high = low & valid, high & valid
    ratio = torch.exp((log_r.detach() * fmask).sum(-1) / fmask.sum(-1).clamp(min=1.0))
    return PolicyLoss(losses, token_losses - losses.unsqueeze(1), ratio, low.any(-1), high.any(-1), guard, low, high)
