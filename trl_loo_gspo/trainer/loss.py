"""Our loss as one micro-batch of an optimizer step computes it (docs/method.md §3.2–3.3, §5.1, §6), as a function of
one value: :class:`LossStep` holds everything the loss reads (the objective's choices, the clip range, β, the step's
global denominator, the world size and the batch tensors), built in one place (:meth:`LossStep.of_batch`, called by
:func:`batch_loss`: the config's objective, the trainer's scalars for the step, the batch); :func:`own_loss` returns
a :class:`LossOutput` the trainer records. None of them holds the trainer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms.aggregation import agg_loss, row_losses
from ..algorithms.clip_stats import clip_rows
from ..algorithms.losses import LOSSES, ClipRange, PolicyLoss, k3_kl, sequence_log_ratio
from ..algorithms.noise import noise_rows
from ..config.objective import Objective, resolve
from .rows import loss_mask
from .step import loss_stats


@dataclass(frozen=True)
class LossStep:
    """What the loss needs for one micro-batch: frozen, built once per micro-batch by the trainer.

    ``denominator`` is the global count (tokens, or answers for a per-answer aggregation) of the optimizer step in
    training, of the batch in evaluation; ``world_size`` the number of processes sharing it. ``measure_noise``: the
    micro-batch belongs to a fresh round and the old log-probs came from their own pass with the same weights (its
    sequence ratios are numerical noise, metrics ``noise/*``); ``round_position`` the optimizer steps since the
    micro-batch's generation round (0 on its first step; docs/metrics.md, "Where the clip bites")."""

    policy_loss: str
    loss_aggregation: str
    clip: ClipRange
    beta: float
    bias_correction_kl: bool
    denominator: float
    world_size: int
    measure_noise: bool
    per_token_logps: torch.Tensor
    old_per_token_logps: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    entropies: torch.Tensor
    process_advantages: torch.Tensor | None = None
    importance_weights: torch.Tensor | None = None
    ref_per_token_logps: torch.Tensor | None = None
    round_position: int = 0

    @classmethod
    def of_batch(
        cls,
        objective: Objective,
        inputs: dict[str, Any],
        per_token_logps: torch.Tensor,
        entropies: torch.Tensor,
        *,
        vllm_weights: bool,
        epsilon_low: float | None,
        epsilon_high: float | None,
        **step: Any,
    ) -> LossStep:
        """The value for ``inputs`` (TRL's micro-batch) and the forward pass's outputs under ``objective`` (its policy
        loss, aggregation and outer log-ratio guard); ``epsilon_low``/``epsilon_high`` are the step's clip range
        (entropy feedback moves the upper one; ``None`` for a policy loss without one), ``step`` holds the other
        scalar fields, ``vllm_weights`` whether vLLM's importance weights apply. On-policy (TRL skipped the
        old-log-prob pass) the old log-probs are these, detached."""
        advantages = inputs["advantages"]
        if advantages.dim() != 1:
            raise ValueError(f"LooGspoTrainer expects advantages of shape (B,), got {tuple(advantages.shape)}")
        if not objective.uses_own_loss:
            raise ValueError(f"loss_type={objective.loss_type!r} is computed by TRL's loss, not by own_loss")
        old = inputs.get("old_per_token_logps")
        return cls(
            policy_loss=objective.policy_loss,
            loss_aggregation=objective.loss_aggregation,
            clip=ClipRange(epsilon_low, epsilon_high, objective.log_ratio_clamp),
            per_token_logps=per_token_logps,
            old_per_token_logps=per_token_logps.detach() if old is None else old,
            advantages=advantages,
            mask=loss_mask(inputs),
            entropies=entropies,
            process_advantages=inputs.get("process_advantages"),
            importance_weights=inputs["importance_sampling_ratio"] if vllm_weights else None,
            ref_per_token_logps=inputs.get("ref_per_token_logps") if step["beta"] != 0.0 else None,
            **step,
        )


@dataclass(frozen=True)
class LossOutput:
    """The loss of one micro-batch (this rank's share over the global denominator, times the world size) and what
    the step records: the sums and ratio extrema (:func:`~trl_loo_gspo.trainer.step.loss_stats`), the per-answer
    :func:`~trl_loo_gspo.algorithms.clip_stats.clip_rows` and, when ``measure_noise``, the
    :func:`~trl_loo_gspo.algorithms.noise.noise_rows`."""

    loss: torch.Tensor
    stats: torch.Tensor
    extrema: torch.Tensor
    noise: torch.Tensor | None
    clip_rows: torch.Tensor | None = None


def own_loss(step: LossStep) -> LossOutput:
    """The configured policy loss, per-token terms (vLLM importance weights, β·KL) and the aggregation."""
    mask, clip = step.mask, step.clip
    # §3.2 the configured policy loss (response-level clipped, §5.1 guard, §6 process advantages)
    policy = LOSSES[step.policy_loss](
        step.per_token_logps, step.old_per_token_logps, step.advantages, mask, clip, step.process_advantages
    )
    noise = None
    if step.measure_noise:  # same weights as the old-log-prob pass: s_i != 1 is numerical noise
        log_s = sequence_log_ratio(step.per_token_logps.detach(), step.old_per_token_logps, mask)
        clipped = policy.clipped_low | policy.clipped_high
        noise = noise_rows(log_s, clipped, mask.sum(-1) > 0, clip.epsilon_low, clip.epsilon_high)
    per_token_kl = None
    if step.beta != 0.0:
        per_token_kl = k3_kl(step.per_token_logps, step.ref_per_token_logps)
        if step.bias_correction_kl:
            per_token_kl = per_token_kl * policy.ratio.unsqueeze(1)
    terms = None if per_token_kl is None else step.beta * per_token_kl
    rows = row_losses(policy.losses, mask, policy.process_term, step.importance_weights, terms)
    lengths = mask.sum(-1)
    # Every rank contributes its share over the global denominator; DDP/FSDP average gradients (and the eval loop
    # averages losses) over ranks, hence the factor world_size.
    # §3.3 this rank's share of Σ T_i ℓ_i / (global token count of the optimizer step)
    loss = agg_loss(rows, lengths, step.loss_aggregation, step.denominator) * step.world_size
    stats, extrema = loss_stats(policy, lengths, mask.to(step.per_token_logps.dtype), step.entropies, per_token_kl)
    rows_of_answers = answer_clip_rows(policy, step.advantages, mask, step.round_position)
    return LossOutput(loss, stats, extrema, noise, rows_of_answers)


@torch.no_grad()
def answer_clip_rows(policy: PolicyLoss, advantages: torch.Tensor, mask: torch.Tensor, position: int) -> torch.Tensor:
    """The micro-batch's :func:`~trl_loo_gspo.algorithms.clip_stats.clip_rows`: the ratio the loss clipped and its
    own clip decisions (a per-token loss: the answer's clipped tokens). With a response-level ratio an answer the
    outer guard clamped has no gradient either (§5.1): its tokens count as on a constant branch (so it carries no
    gradient in ``clip/gradient_*``), not as clipped."""
    lengths = mask.sum(-1).to(torch.float64)
    if policy.token_clipped_low is None:  # one decision per answer: all or none of its tokens
        constant = policy.clipped_low | policy.clipped_high
        if policy.guard is not None:  # log s_i clamped: the loss is constant in θ
            constant = constant | policy.guard
        clipped_tokens = lengths * constant
    else:
        clipped_tokens = ((policy.token_clipped_low | policy.token_clipped_high) & mask.bool()).sum(-1)
    # the log of the ratio the loss clipped (s_i after the optional guard); an under- or overflowed s_i stays finite
    log_ratio = torch.log(policy.ratio.detach().to(torch.float64).clamp(1e-300, 1e300))
    return clip_rows(log_ratio, advantages, lengths, policy.clipped_low, policy.clipped_high, clipped_tokens, position)


def batch_loss(
    config: Any, inputs: dict[str, Any], per_token_logps: torch.Tensor, entropies: torch.Tensor, **step: Any
) -> LossOutput:
    """Our loss of one micro-batch under ``config`` (a :class:`~trl_loo_gspo.LooGspoConfig`, or the
    :class:`~trl_loo_gspo.config.Objective` it resolved to, as the trainer hands its run plan's): the objective
    (:func:`~trl_loo_gspo.config.objective.resolve` of a config), the micro-batch's
    :class:`LossStep` (:meth:`LossStep.of_batch` with the step's scalars ``step``) and :func:`own_loss` of it."""
    objective = config if isinstance(config, Objective) else resolve(config)
    loss_step = LossStep.of_batch(objective, inputs, per_token_logps, entropies, **step)
    return own_loss(loss_step)


def eval_denominator(mask: torch.Tensor, reduce: Callable[..., torch.Tensor], column: int) -> float:
    """An evaluation batch's global denominator: ``[tokens, answers][column]`` summed over processes (``reduce``:
    ``accelerator.reduce``)."""
    local = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum()]).to(torch.float64)
    return float(reduce(local, reduction="sum")[column])
