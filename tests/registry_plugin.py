"""A user's own loss, aggregation and advantage estimator, registered from outside the package (as a user's module
would be: imported before the config is built; a recipe names it under ``plugins:``). Each records its calls; with
``REGISTRY_PLUGIN_CALLS`` set (a file path), the counts are written there at exit, for a subprocess run."""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter

import torch

from trl_loo_gspo.algorithms.advantages import loo_advantages, register_advantage_estimator
from trl_loo_gspo.algorithms.aggregation import register_aggregation
from trl_loo_gspo.algorithms.losses import PolicyLoss, register_loss, sequence_ratio

LOSS, AGGREGATION, ESTIMATOR = "user_unclipped", "user_answer_mean", "user_half_loo"
CALLS: Counter = Counter()


@register_loss(LOSS)
def unclipped_loss(logps, old_logps, advantages, mask, clip, process_advantages):
    """−s_i Â_i with GSPO's sequence ratio and no clipping."""
    CALLS[LOSS] += 1
    s = sequence_ratio(logps, old_logps, mask)
    never = torch.zeros_like(s, dtype=torch.bool)
    return PolicyLoss(-s * advantages, None, s, never, never.clone(), None)


@register_aggregation(AGGREGATION, count="answers")
def answer_mean(losses, lengths, total_answers=None):
    """Σ_{T_i>0} ℓ_i over the step's global count of answers."""
    CALLS[AGGREGATION] += 1
    valid = (lengths > 0).to(losses.dtype)
    denominator = valid.sum() if total_answers is None else total_answers
    return (valid * losses).sum() / max(float(denominator), 1.0)


@register_advantage_estimator(ESTIMATOR)
def half_loo(rewards, group_ids):
    """Half the leave-one-out advantage."""
    CALLS[ESTIMATOR] += 1
    return 0.5 * loo_advantages(rewards, group_ids)


def _write_calls() -> None:
    path = os.environ.get("REGISTRY_PLUGIN_CALLS")
    if path:
        with open(path, "w") as f:
            json.dump(dict(CALLS), f)


atexit.register(_write_calls)
