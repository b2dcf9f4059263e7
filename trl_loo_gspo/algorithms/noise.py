"""Ratio noise at the first update of a generation round (docs/method.md, "Precision: what the clip sees").

Until the first optimizer step after a round was generated, the weights that compute the loss are the weights that
computed the round's old log-probabilities, so every sequence ratio ``s_i`` should be exactly 1. Any departure is
numerical: another batch composition, padding or kernel between the two passes (bf16 makes it visible). These
functions summarise it from the first update's answers: how far ``|log s_i|`` strays, and how many answers the clip
range already treats as moved. Pure functions over tensors; the trainer gathers the rows and logs the summary.
"""

from __future__ import annotations

import torch

#: Names of the logged summary (docs/metrics.md, "Ratio noise at the first update of a round").
NOISE_METRICS = (
    "noise/answers",
    "noise/clip_ratio",
    "noise/out_of_range",
    "noise/abs_log_ratio/median",
    "noise/abs_log_ratio/p90",
    "noise/abs_log_ratio/max",
)


def round_position(round_step: int, global_step: int) -> int:
    """Optimizer steps run since the round was generated at optimizer step ``round_step`` (``-1``: unknown, counted
    as off-policy): 0 on a fresh round, whose loss pass uses the weights of the old-log-prob pass (``s_i ≠ 1`` is
    then noise); the clip figures are tallied by it (docs/metrics.md, "Where the clip bites")."""
    return max(global_step - round_step, 0)


def fresh_round(round_step: int, global_step: int) -> bool:
    """True when no optimizer step has run since the round was generated (:func:`round_position` 0)."""
    return round_step == global_step


def noise_rows(
    log_ratio: torch.Tensor,
    clipped: torch.Tensor,
    valid: torch.Tensor,
    epsilon_low: float | None,
    epsilon_high: float | None,
) -> torch.Tensor:
    """``(N, 3)`` float64 rows ``[|log s_i|, clipped_i, out_of_range_i]``, NaN rows where ``valid`` is false (no
    host sync: masked, not indexed).

    ``clipped``: the loss's own decision (the zero-gradient branch, which depends on the sign of Â_i);
    ``out_of_range``: ``s_i`` outside ``[1 − ε_low, 1 + ε_high]``, what the clip would do to either sign (never, for a
    loss without a clip range: ``epsilon_low`` / ``epsilon_high`` ``None``).
    """
    log_ratio = log_ratio.detach().to(torch.float64)
    s = torch.exp(log_ratio)
    if epsilon_low is None or epsilon_high is None:
        out = torch.zeros_like(s, dtype=torch.bool)
    else:
        out = (s < 1.0 - epsilon_low) | (s > 1.0 + epsilon_high)
    rows = torch.stack([log_ratio.abs(), clipped.to(torch.float64), out.to(torch.float64)], dim=1)
    return torch.where(valid.unsqueeze(1), rows, torch.full_like(rows, torch.nan))


def noise_summary(rows: torch.Tensor) -> dict[str, float] | None:
    """The summary (:data:`NOISE_METRICS`) of gathered :func:`noise_rows` (NaN rows are not answers); ``None`` when
    there is no answer. Quantiles are torch's linear interpolation."""
    rows = rows[~torch.isnan(rows[:, 0])].to(torch.float64)
    if rows.numel() == 0:
        return None
    magnitude = rows[:, 0]
    return {
        "noise/answers": float(rows.shape[0]),
        "noise/clip_ratio": float(rows[:, 1].mean()),
        "noise/out_of_range": float(rows[:, 2].mean()),
        "noise/abs_log_ratio/median": float(torch.quantile(magnitude, 0.5)),
        "noise/abs_log_ratio/p90": float(torch.quantile(magnitude, 0.9)),
        "noise/abs_log_ratio/max": float(magnitude.max()),
    }
