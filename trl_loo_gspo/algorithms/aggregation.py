"""Loss aggregation (method §3.3): how per-answer losses become one scalar over a global count, as a registry.

An aggregation maps ``(rows (N,), lengths (N,), denominator)`` to this micro-batch's share of the step's loss;
its ``count`` names the global count it divides by (``"tokens"`` or ``"answers"``), which the trainer's step
accounting (:mod:`trl_loo_gspo.algorithms.step_accounting`) gathers over processes and accumulation steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def _at_least_one(denominator: torch.Tensor | float, dtype: torch.dtype) -> torch.Tensor | float:
    """A count used as a denominator, never below 1 (an empty step divides by 1, not 0)."""
    if isinstance(denominator, torch.Tensor):
        return denominator.to(dtype).clamp(min=1.0)
    return max(float(denominator), 1.0)


def token_total_aggregate(
    losses: torch.Tensor, lengths: torch.Tensor, total_tokens: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Aggregate per-answer losses by the total count of valid tokens (method §3.3).

    ``L = Σ_i T_i ℓ_i / total_tokens``, with ``total_tokens = Σ_i T_i`` by default. In training, ``total_tokens``
    is the *global* count of valid tokens of the optimizer step (all processes, all accumulation micro-batches), so
    the sum of the per-micro-batch, per-process values of this function is §3.3's ``L``.
    """
    lengths = lengths.to(losses.dtype)
    denominator = _at_least_one(lengths.sum() if total_tokens is None else total_tokens, losses.dtype)
    # §3.3 L = Σ T_i ℓ_i / Σ T_i
    return (lengths * losses).sum() / denominator


def sequence_mean_aggregate(
    losses: torch.Tensor, lengths: torch.Tensor, total_sequences: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Original GSPO aggregation: equal weight per valid answer, ``Σ_{T_i>0} ℓ_i / N_valid`` (method §3.3, control).

    Answers with no valid token (``T_i = 0``) count in neither the numerator nor the denominator.
    """
    valid = (lengths > 0).to(losses.dtype)
    denominator = _at_least_one(valid.sum() if total_sequences is None else total_sequences, losses.dtype)
    # §3.3 control (original GSPO): equal weight per answer
    return (valid * losses).sum() / denominator


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


@dataclass(frozen=True)
class Aggregation:
    """An aggregation function and the global count it divides by (``"tokens"`` or ``"answers"``)."""

    function: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | float | None], torch.Tensor]
    count: str


#: Aggregations by name (``LooGspoConfig.loss_aggregation``).
AGGREGATIONS: dict[str, Aggregation] = {
    "token_total": Aggregation(token_total_aggregate, "tokens"),
    "sequence_mean": Aggregation(sequence_mean_aggregate, "answers"),
}


def register_aggregation(name: str, count: str) -> Callable:
    """Decorator: add an aggregation ``f(rows, lengths, denominator)`` dividing by the global ``count``."""
    if count not in ("tokens", "answers"):
        raise ValueError(f"count must be 'tokens' or 'answers', got {count!r}")

    def register(function: Callable) -> Callable:
        if name in AGGREGATIONS:
            raise ValueError(f"aggregation {name!r} is already registered")
        AGGREGATIONS[name] = Aggregation(function, count)
        return function

    return register


def agg_loss(rows: torch.Tensor, lengths: torch.Tensor, mode: str, denominator: torch.Tensor | float) -> torch.Tensor:
    """This micro-batch's share of the loss under aggregation ``mode`` (a name in :data:`AGGREGATIONS`) over the
    global ``denominator``."""
    aggregation = AGGREGATIONS.get(mode)
    if aggregation is None:
        raise ValueError(
            f"unknown aggregation {mode!r}; registered: {sorted(AGGREGATIONS)} (add one with @register_aggregation)"
        )
    return aggregation.function(rows, lengths, denominator)
