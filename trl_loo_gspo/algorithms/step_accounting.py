"""The loss denominator of one optimizer step (docs/method.md §3.3), as one small object with a pure schedule.

TRL generates one *round* of ``S = steps_per_generation`` micro-batch slices and trains on it ``num_iterations``
times; micro-step ``m`` uses slice ``m mod S`` of round ``⌊m / (S · num_iterations)⌋``. An optimizer step is ``n``
consecutive micro-steps (``n = gradient_accumulation_steps``, or fewer at the end of an epoch). The token-total
loss divides by ONE global count of valid tokens of the step's micro-batches:

* when all ``n`` micro-steps use the current round, the count is known when the step starts and is exact
  (:func:`step_denominator` returns it with ``provisional=False``);
* otherwise the later slices are not generated yet: the step runs on a provisional count and, once its last
  micro-batch is done, the gradients are multiplied by ``provisional / true`` (:meth:`StepAccounting.correction`),
  exact because gradients are linear in the loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

#: Per-optimizer-step sums, reduced across ranks once per step (index names of ``StepAccounting.stats``).
SUM_STATS = (
    "answers",  # answers with at least one valid token
    "tokens",  # valid completion tokens (the token-total denominator)
    "clip_low_answers",
    "clip_high_answers",
    "clip_low_tokens",
    "clip_high_tokens",
    "guard_answers",
    "ratio_sum",  # Σ s_i over valid answers
    "entropy_sum",  # Σ token entropy over valid tokens
    "kl_sum",  # Σ k3 KL over valid tokens (only when beta != 0)
)
IDX = {name: i for i, name in enumerate(SUM_STATS)}


def step_denominator(
    first: int, n: int, steps_per_generation: int, num_iterations: int, slice_counts: Sequence[float]
) -> tuple[float, bool]:
    """Denominator of the optimizer step made of micro-steps ``first .. first + n - 1``.

    Args:
        first: index of the step's first micro-step (TRL's ``self._step``).
        n: micro-steps in this optimizer step.
        steps_per_generation: ``S``, slices per generation round.
        num_iterations: passes over each round.
        slice_counts: the global count (tokens or answers) of each of the current round's ``S`` slices.

    Returns:
        ``(denominator, provisional)``: the exact count when every micro-step uses the current round
        (``provisional=False``); else the first slice's count times ``n`` (``provisional=True``), to be corrected
        with :meth:`StepAccounting.correction`. Never below 1.
    """
    if len(slice_counts) != steps_per_generation:
        raise ValueError(f"expected {steps_per_generation} slice counts, got {len(slice_counts)}")
    per_round = steps_per_generation * num_iterations
    if first // per_round == (first + n - 1) // per_round:
        # §3.3 denominator: global valid tokens of every micro-batch of this optimizer step
        total = sum(float(slice_counts[(first + k) % steps_per_generation]) for k in range(n))
        return max(total, 1.0), False
    return max(float(slice_counts[first % steps_per_generation]) * n, 1.0), True


class StepAccounting:
    """Everything one optimizer step accumulates: the denominator, the step's sums and ratio extrema, its loss."""

    def __init__(self, steps_per_generation: int, num_iterations: int, device: torch.device) -> None:
        self.steps_per_generation = steps_per_generation
        self.num_iterations = num_iterations
        self.slice_counts: torch.Tensor | None = None  # (S, 2): global [tokens, answers] of each slice of the round
        self.micro = 0  # micro-batches done in the current optimizer step
        self.denominator = 1.0
        self.stats = torch.zeros(len(SUM_STATS), dtype=torch.float64, device=device)
        self.extrema = torch.tensor([-math.inf, -math.inf], dtype=torch.float64, device=device)  # max s, max −s
        self.loss_sum: torch.Tensor | None = None  # Σ of the losses returned by the step's micro-batches
        self.update_time = 0.0  # seconds of forward/backward in the step (generation excluded)
        self.noise: list[torch.Tensor] = []  # algorithms.noise rows of the step's micro-batches of a fresh round
        self.noise_exact: bool | None = None  # fresh round: True without an old-log-prob pass (noise 0), else False
        self.clip_rows: list[torch.Tensor] = []  # algorithms.clip_stats rows of the step's micro-batches (our loss)

    def begin(self, first: int, n: int, column: int | None) -> None:
        """Start an optimizer step; ``column`` selects the denominator count (0 tokens, 1 answers; ``None``: the
        loss is TRL's and only the sums are kept)."""
        if column is not None:
            counts = self.slice_counts[:, column].tolist()
            self.denominator, _ = step_denominator(first, n, self.steps_per_generation, self.num_iterations, counts)
        self.stats.zero_()
        self.extrema.fill_(-math.inf)
        self.loss_sum = None
        self.update_time = 0.0
        self.noise = []
        self.noise_exact = None
        self.clip_rows = []

    def add(
        self, stats: torch.Tensor, extrema: torch.Tensor | None = None, clip_rows: torch.Tensor | None = None
    ) -> None:
        """A micro-batch's sums, ratio extrema and per-answer clip rows
        (:func:`~trl_loo_gspo.algorithms.clip_stats.clip_rows`; our loss only)."""
        self.stats += stats
        if extrema is not None:
            self.extrema = torch.maximum(self.extrema, extrema)
        if clip_rows is not None:
            self.clip_rows.append(clip_rows)

    def add_noise(self, rows: torch.Tensor | None) -> None:
        """A micro-batch of a fresh round: its noise rows, or ``None`` when its old log-probs were the loss pass's own
        (TRL skipped the old pass: the noise is 0 by construction, nothing to gather)."""
        self.noise_exact = rows is None
        if rows is not None:
            self.noise.append(rows)

    def add_loss(self, loss: torch.Tensor) -> None:
        self.micro += 1
        self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss

    def correction(self, true_denominator: float) -> float:
        """Factor for the step's gradients (and summed loss): ``provisional / true``; 1.0 when it was exact."""
        return self.denominator / max(true_denominator, 1.0)

    def end(self) -> None:
        self.micro = 0
