"""Which objective a :class:`~trl_loo_gspo.LooGspoConfig` selects, and the defaults that follow from it.

A ``LooGspoConfig`` accepts every ``GRPOConfig`` value. Two flags decide whose code computes what:

* ``loss_type``: ``"loo_gspo"`` (our response-level loss, ``docs/method.md`` §3.2–3.3) or any TRL loss type (TRL's
  own ``_compute_loss``). ``"dapo"`` with ``importance_sampling_level="sequence"`` *is* our token-total objective
  (TRL's sequence ratio, clipped per response, summed over tokens, divided by the token count), so it runs through
  our loss with its exact global denominator; TRL's loss options (``delta``, ``off_policy_mask_threshold``, ...)
  keep it on TRL's code.
* ``advantage_estimator``: one of :data:`trl_loo_gspo.core.ADVANTAGE_ESTIMATORS` (ours, over per-row group ids) or
  ``"trl"`` (TRL's advantages as TRL computes them: ``scale_rewards``, ``multi_objective_aggregation``).

Fields left at ``None`` are resolved here: with our loss they take the GSPO-scale values of the method, with a TRL
loss they take ``GRPOConfig``'s own defaults, so ``LooGspoConfig(loss_type="grpo")`` and
``GRPOConfig(loss_type="grpo")`` configure the same loss. Only truly contradictory combinations are refused, and the
message names both fields.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from trl import GRPOConfig

from .core import ADVANTAGE_ESTIMATORS

#: ``loss_type`` of our loss.
LOSS_TYPE = "loo_gspo"
#: TRL 1.16's loss types (``GRPOTrainer._compute_loss``).
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: ``advantage_estimator`` value that keeps TRL's advantages.
TRL_ADVANTAGES = "trl"
LOSS_AGGREGATIONS = ("token_total", "sequence_mean")

# GSPO's clip range for the length-normalised sequence ratio (docs/method.md §3.2).
GSPO_EPSILON_LOW, GSPO_EPSILON_HIGH = 3e-4, 4e-4

# Options of TRL's losses that ours does not have: setting one (away from its default) selects TRL's loss when
# `loss_type` is left unset.
_TRL_LOSS_OPTIONS = {
    "delta": lambda v: v is not None,
    "off_policy_mask_threshold": lambda v: v is not None,
    "top_entropy_quantile": lambda v: v < 1.0,
    "entropy_coef": lambda v: v != 0.0,
    "use_adaptive_entropy": bool,
    "importance_sampling_level": lambda v: v == "token",
}
# Loss types that do not read epsilon_high, which entropy feedback moves.
_NO_UPPER_CLIP = ("sapo", "vespo")


def trl_default(name: str) -> Any:
    """``GRPOConfig``'s default value of field ``name``."""
    for f in dataclasses.fields(GRPOConfig):
        if f.name == name:
            return f.default_factory() if f.default is dataclasses.MISSING else f.default
    raise KeyError(name)


def trl_loss_options(config: Any) -> list[str]:
    """The TRL-loss-only options that ``config`` sets, as ``field=value`` strings."""
    return [
        f"{name}={getattr(config, name)!r}"
        for name, is_set in _TRL_LOSS_OPTIONS.items()
        if is_set(getattr(config, name))
    ]


def uses_own_loss(config: Any) -> bool:
    """Whether our loss (``core.response_loss`` over the exact global denominator) computes the loss."""
    if config.loss_type == LOSS_TYPE:
        return True
    return (
        config.loss_type == "dapo" and config.importance_sampling_level == "sequence" and not trl_loss_options(config)
    )


def resolve(config: Any) -> None:
    """Fill the ``None`` fields of ``config`` (see the module docstring) and refuse contradictions, in place."""
    options = trl_loss_options(config)
    if config.loss_type is None:
        config.loss_type = trl_default("loss_type") if options else LOSS_TYPE
        if options:
            warnings.warn(
                f"{', '.join(options)} is an option of TRL's losses, so loss_type is TRL's default "
                f"{config.loss_type!r} (TRL computes the loss; our additions still apply). Set loss_type explicitly "
                "to silence this.",
                stacklevel=4,
            )
    if config.loss_type not in (LOSS_TYPE, *TRL_LOSS_TYPES):
        raise ValueError(f"loss_type={config.loss_type!r} is not one of {(LOSS_TYPE, *TRL_LOSS_TYPES)}.")
    ours = config.loss_type == LOSS_TYPE
    if ours and options:
        raise ValueError(
            f"loss_type={LOSS_TYPE!r} contradicts {options[0]}: that is an option of TRL's losses, which "
            f"{LOSS_TYPE!r} does not compute. Use a TRL loss_type (e.g. 'dapo' with importance_sampling_level="
            "'sequence', TRL's GSPO) or leave the option at its default."
        )

    # Clip range and ratio level: GSPO's scale with our loss, TRL's defaults with TRL's.
    if ours:
        if config.epsilon_high is None:
            config.epsilon_high = GSPO_EPSILON_HIGH if config.epsilon is None else config.epsilon
        if config.epsilon is None:
            config.epsilon = GSPO_EPSILON_LOW
        if config.importance_sampling_level is None:
            config.importance_sampling_level = "sequence"
    else:
        if config.epsilon is None:
            config.epsilon = trl_default("epsilon")
        if config.importance_sampling_level is None:
            config.importance_sampling_level = trl_default("importance_sampling_level")

    # Advantages: ours over group ids, or TRL's (scale_rewards, multi_objective_aggregation).
    scale_set = config.scale_rewards is not None
    if scale_set:
        config.scale_rewards = {True: "group", False: "none"}.get(config.scale_rewards, config.scale_rewards)
    else:
        config.scale_rewards = "none" if ours else trl_default("scale_rewards")
    normalize_then_sum = config.multi_objective_aggregation != trl_default("multi_objective_aggregation")
    if config.advantage_estimator is None:
        config.advantage_estimator = TRL_ADVANTAGES if (not ours or scale_set or normalize_then_sum) else "loo"
    known = (*ADVANTAGE_ESTIMATORS, TRL_ADVANTAGES)
    if config.advantage_estimator not in known:
        raise ValueError(f"advantage_estimator={config.advantage_estimator!r} is not one of {known}.")
    if config.advantage_estimator != TRL_ADVANTAGES:
        clash = None
        if scale_set and config.scale_rewards != "none":
            clash = f"scale_rewards={config.scale_rewards!r}"
        elif normalize_then_sum:
            clash = f"multi_objective_aggregation={config.multi_objective_aggregation!r}"
        if clash is not None:
            raise ValueError(
                f"advantage_estimator={config.advantage_estimator!r} contradicts {clash}: both define the advantages. "
                f"Set advantage_estimator={TRL_ADVANTAGES!r} for TRL's advantages, or leave {clash.split('=')[0]} "
                "unset ('grpo' is TRL's scale_rewards='group', 'group_mean' is scale_rewards='none')."
            )

    # Aggregation and the options only our loss has.
    own_loss = uses_own_loss(config)
    if own_loss:
        if config.loss_aggregation is None:
            config.loss_aggregation = "token_total"
        if not ours and config.loss_aggregation != "token_total":
            raise ValueError(
                f"loss_type='dapo' (token total) contradicts loss_aggregation={config.loss_aggregation!r}. Use "
                f"loss_type={LOSS_TYPE!r} for another aggregation."
            )
        if config.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation={config.loss_aggregation!r} is not one of {LOSS_AGGREGATIONS}.")
    else:
        for name, value, off in (
            ("loss_aggregation", config.loss_aggregation, None),
            ("log_ratio_clamp", config.log_ratio_clamp, None),
            ("process_advantage_coef", config.process_advantage_coef, 0.0),
        ):
            if value != off:
                raise ValueError(
                    f"{name}={value!r} needs our loss, but loss_type={config.loss_type!r} (with "
                    f"importance_sampling_level={config.importance_sampling_level!r}) is computed by TRL. Use "
                    f"loss_type={LOSS_TYPE!r}, or leave {name} unset."
                )
    if config.entropy_feedback and config.loss_type in _NO_UPPER_CLIP:
        raise ValueError(
            f"entropy_feedback moves epsilon_high, which loss_type={config.loss_type!r} does not use. Set "
            "entropy_feedback=False or choose a clipped loss type."
        )
    if config.adaptive_group_size and config.advantage_estimator == TRL_ADVANTAGES:
        raise ValueError(
            f"adaptive_group_size gives prompts groups of different sizes, but advantage_estimator={TRL_ADVANTAGES!r}"
            " (TRL's advantages) assumes groups of exactly num_generations rows. Choose one of "
            f"{tuple(ADVANTAGE_ESTIMATORS)} for advantage_estimator, or set adaptive_group_size=False."
        )
