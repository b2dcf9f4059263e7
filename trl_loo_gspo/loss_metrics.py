"""Per-optimizer-step statistics of our loss (docs/metrics.md): accumulated per micro-batch without host syncs,
reduced across ranks once per step, logged as ``clip_ratio/*``, ``ratio/*``, ``entropy``, ``kl``, ``guard/*``."""

from __future__ import annotations

import math

import torch

from . import core
from .step_accounting import IDX


class LossMetricsMixin:
    """Mixed into ``LooGspoTrainer``; reads ``self._accounting`` (a :class:`StepAccounting`)."""

    def _log_loss_stats(self, mode: str, stats: torch.Tensor, extrema: torch.Tensor) -> None:
        s = {name: float(stats[i]) for name, i in IDX.items()}
        answers, tokens = max(s["answers"], 1.0), max(s["tokens"], 1.0)
        metrics = self._metrics[mode]
        metrics["clip_ratio/low_answers"].append(s["clip_low_answers"] / answers)
        metrics["clip_ratio/high_answers"].append(s["clip_high_answers"] / answers)
        metrics["clip_ratio/region_answers"].append((s["clip_low_answers"] + s["clip_high_answers"]) / answers)
        metrics["clip_ratio/low_tokens"].append(s["clip_low_tokens"] / tokens)
        metrics["clip_ratio/high_tokens"].append(s["clip_high_tokens"] / tokens)
        metrics["clip_ratio/region_tokens"].append((s["clip_low_tokens"] + s["clip_high_tokens"]) / tokens)
        metrics["ratio/mean"].append(s["ratio_sum"] / answers)
        if s["answers"] > 0:
            metrics["ratio/max"].append(float(extrema[0]))
            metrics["ratio/min"].append(-float(extrema[1]))
        metrics["entropy"].append(s["entropy_sum"] / tokens)
        if self.beta != 0.0:
            metrics["kl"].append(s["kl_sum"] / tokens)
        if self.args.log_ratio_clamp is not None:
            metrics["guard/trigger_fraction"].append(s["guard_answers"] / answers)

    @torch.no_grad()
    def _accumulate_stats(self, mode, s, advantages, lengths, fmask, entropies, per_token_kl, guard) -> None:
        """Add this micro-batch's sums to the step's statistics (no host sync: masked ops, no boolean indexing)."""
        valid = lengths > 0
        s = s.detach().to(torch.float64)
        low, high = core.clip_masks(s, advantages, self.epsilon_low, self.epsilon_high)
        low, high = low & valid, high & valid
        lengths = lengths.to(torch.float64)
        zero = torch.zeros((), dtype=torch.float64, device=s.device)
        values = [
            valid.sum(),
            lengths.sum(),
            low.sum(),
            high.sum(),
            (lengths * low).sum(),
            (lengths * high).sum(),
            (guard & valid).sum() if guard is not None else zero,
            torch.where(valid, s, zero).sum(),
            (entropies * fmask).sum(),
            (per_token_kl.detach() * fmask).sum() if per_token_kl is not None else zero,
        ]
        stats = torch.stack([v.to(torch.float64) for v in values])
        minus_inf = torch.full_like(s, -math.inf)
        extrema = torch.stack([torch.where(valid, s, minus_inf).amax(), torch.where(valid, -s, minus_inf).amax()])
        if mode == "train":
            self._accounting.add(stats, extrema)
        else:
            self._log_loss_stats(
                mode,
                self.accelerator.reduce(stats, reduction="sum"),
                self.accelerator.reduce(extrema, reduction="max"),
            )
