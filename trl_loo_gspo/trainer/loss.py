"""Our loss as one optimizer step's micro-batch computes it (docs/method.md §3.2–3.3, §5.1, §6): the trainer's
forward pass, the configured policy loss (:data:`~trl_loo_gspo.algorithms.losses.LOSSES`), per-token terms (vLLM
importance weights, β·KL), the aggregation over the step's global denominator
(:data:`~trl_loo_gspo.algorithms.aggregation.AGGREGATIONS`) and the step's statistics. A component of
``LooGspoTrainer``; its ``_compute_loss`` calls it when the objective uses our loss."""

from __future__ import annotations

from typing import Any

import torch

from ..algorithms.aggregation import agg_loss, row_losses
from ..algorithms.losses import LOSSES, ClipRange, k3_kl, sequence_log_ratio
from ..algorithms.noise import fresh_round, noise_rows
from .rows import loss_mask
from .step import log_loss_stats, loss_stats, rank_clip_fractions


class OwnLoss:
    """Callable on ``(model, inputs)`` like TRL's ``_compute_loss``; no state between calls (the step's sums live in
    the trainer's ``StepAccounting``)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def __call__(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        t = self.trainer
        mode = "train" if t.model.training else "eval"
        mask = loss_mask(inputs)
        per_token_logps, entropies, aux_loss = t._policy_logps(model, inputs)
        old_per_token_logps = inputs.get("old_per_token_logps")
        if old_per_token_logps is None:  # on-policy: TRL skips the extra forward pass
            old_per_token_logps = per_token_logps.detach()
        advantages = inputs["advantages"]
        if advantages.dim() != 1:
            raise ValueError(f"LooGspoTrainer expects advantages of shape (B,), got {tuple(advantages.shape)}")
        clip = ClipRange(t.epsilon_low, t.epsilon_high, t.objective.log_ratio_clamp)
        # §3.2 the configured policy loss (response-level clipped, §5.1 guard, §6 process advantages)
        policy = LOSSES[t.objective.policy_loss](
            per_token_logps, old_per_token_logps, advantages, mask, clip, inputs.get("process_advantages")
        )
        if mode == "train" and fresh_round(int(inputs.get("round_step", -1)), t.state.global_step):
            # same weights as the old-log-prob pass: s_i != 1 is numerical noise (metrics noise/*); without that
            # pass the old log-probs are these, detached, and the noise is 0 by construction (nothing to gather)
            t._accounting.noise_exact = inputs.get("old_per_token_logps") is None
            if not t._accounting.noise_exact:
                log_s = sequence_log_ratio(per_token_logps.detach(), old_per_token_logps, mask)
                clipped = policy.clipped_low | policy.clipped_high
                rows = noise_rows(log_s, clipped, mask.sum(-1) > 0, clip.epsilon_low, clip.epsilon_high)
                t._accounting.noise.append(rows)
        vllm_weights = t.use_vllm and t.vllm_importance_sampling_correction
        weights = inputs["importance_sampling_ratio"] if vllm_weights else None
        per_token_kl = None
        if t.beta != 0.0:
            per_token_kl = k3_kl(per_token_logps, inputs["ref_per_token_logps"])
            if t.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * policy.ratio.unsqueeze(1)
        terms = None if per_token_kl is None else t.beta * per_token_kl
        rows = row_losses(policy.losses, mask, policy.process_term, weights, terms)
        loss = self._aggregate(rows, mask, mode)
        if t.aux_loss_enabled:
            normalizer = t.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + t.router_aux_loss_coef * aux_loss / normalizer
            t._metrics[mode]["aux_loss"].append(t.accelerator.gather(aux_loss.detach()).mean().item())
        stats, extrema = loss_stats(policy, mask.sum(-1), mask.to(per_token_logps.dtype), entropies, per_token_kl)
        if mode == "train":
            t._accounting.add(stats, extrema)
        else:
            reduced = t.accelerator.reduce(stats, reduction="sum")
            extrema = t.accelerator.reduce(torch.cat([extrema, rank_clip_fractions(stats)]), reduction="max")
            log_loss_stats(t._metrics[mode], reduced, extrema, t.beta != 0.0, clip.log_ratio_clamp is not None)
        return loss

    def _aggregate(self, rows: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
        """This rank's share of the loss over the global denominator of the optimizer step (eval: of the batch)."""
        t = self.trainer
        lengths = mask.sum(-1)
        if mode == "train":
            denominator = t._accounting.denominator
        else:
            local = torch.stack([mask.sum(), (lengths > 0).sum()]).to(torch.float64)
            denominator = float(t.accelerator.reduce(local, reduction="sum")[t._count_column()])
        # Every rank contributes its share over the global denominator; DDP/FSDP average gradients (and the
        # eval loop averages losses) over ranks, hence the factor num_processes.
        scale = t.accelerator.num_processes
        # §3.3 this rank's share of Σ T_i ℓ_i / (global token count of the optimizer step)
        return agg_loss(rows, lengths, t.objective.loss_aggregation, denominator) * scale
