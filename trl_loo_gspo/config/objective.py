"""Which objective a :class:`~trl_loo_gspo.LooGspoConfig` selects, and the defaults that follow from it.

A ``LooGspoConfig`` accepts every ``GRPOConfig`` value. Two flags decide whose code computes what:

* ``loss_type``: ``"loo_gspo"`` (our response-level loss, ``docs/method.md`` §3.2–3.3) or any TRL loss type (TRL's
  own ``_compute_loss``). ``"dapo"`` with ``importance_sampling_level="sequence"`` *is* our token-total objective
  (TRL's sequence ratio, clipped per response, summed over tokens, divided by the token count), so it runs through
  our loss with its exact global denominator; TRL's loss options (``delta``, ``off_policy_mask_threshold``, ...)
  keep it on TRL's code.
* ``advantage_estimator``: one of :data:`trl_loo_gspo.algorithms.advantages.ADVANTAGE_ESTIMATORS` (ours, over
  per-row group ids) or ``"trl"`` (TRL's advantages as TRL computes them: ``scale_rewards``,
  ``multi_objective_aggregation``).
* ``policy_loss`` and ``loss_aggregation`` (our loss only): names in :data:`trl_loo_gspo.algorithms.losses.LOSSES`
  and :data:`trl_loo_gspo.algorithms.aggregation.AGGREGATIONS`. A policy loss without a clip range
  (:data:`~trl_loo_gspo.algorithms.losses.UNCLIPPED_LOSSES`, e.g. ``"response_unclipped"``) resolves ``epsilon`` /
  ``epsilon_high`` to ``None``, refuses them and the controllers that move them, and requires ``log_ratio_clamp``.

The three names are checked against the registries as they are when the config is resolved, so a loss, an
aggregation or an estimator registered with the decorators of :mod:`trl_loo_gspo.algorithms` before the config is
built can be selected by name (from Python, or from a recipe through its ``plugins`` modules:
:mod:`trl_loo_gspo.experiment.build`).

Fields left at ``None`` are resolved here, into a frozen :class:`Objective` (the config's fields stay as the user
wrote them, so ``dataclasses.replace`` and a reloaded config resolve afresh): with our loss they take the GSPO-scale
values of the method, with a TRL loss they take ``GRPOConfig``'s own defaults, so
``LooGspoConfig(loss_type="grpo")`` and ``GRPOConfig(loss_type="grpo")`` configure the same loss. Only truly
contradictory combinations are refused, and the message names both fields.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from trl import GRPOConfig

from ..algorithms.advantages import ADVANTAGE_ESTIMATORS
from ..algorithms.aggregation import AGGREGATIONS
from ..algorithms.losses import LOSSES, UNCLIPPED_LOSSES


class LooGspoConfigWarning(UserWarning):
    """A warning about a :class:`~trl_loo_gspo.LooGspoConfig`'s fields (its category names the package: the warning
    is raised while the config is built, so the line Python prints is the caller's, often TRL's argument parser)."""


#: ``loss_type`` of our loss.
LOSS_TYPE = "loo_gspo"
#: TRL 1.16's loss types (``GRPOTrainer._compute_loss``).
TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: ``advantage_estimator`` value that keeps TRL's advantages.
TRL_ADVANTAGES = "trl"
#: The policy loss (:data:`trl_loo_gspo.algorithms.losses.LOSSES`) our loss uses at each importance-ratio level:
#: GSPO's response-level clipping, or (``loss_type="loo_gspo"`` with ``importance_sampling_level="token"``) the
#: token-level control clipped per token.
POLICY_LOSS_BY_LEVEL = {"sequence": "response_clip", "token": "token_clip"}
OWN_POLICY_LOSS = POLICY_LOSS_BY_LEVEL["sequence"]
#: The ratio level of each of our built-in policy losses: ``policy_loss="token_clip"`` alone selects the token level
#: (and its clip range), so the token-level variant of our loss is one field; ``"response_unclipped"`` (no clip range,
#: method §5.1) is GSPO's sequence ratio.
LEVEL_BY_POLICY_LOSS = {
    **{loss: level for level, loss in POLICY_LOSS_BY_LEVEL.items()},
    "response_unclipped": "sequence",
}

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
# Loss types that read epsilon_high as an absolute cap on the ratio (not a range around 1).
_ABSOLUTE_UPPER_CLIP = ("cispo",)
#: The most that epsilon_high and epsilon (ε_low) of a clip range around 1 may differ by, as a factor: asymmetric
#: ranges differ by less (DAPO's clip-higher 0.28 / 0.2 = 1.4, GSPO's 4e-4 / 3e-4 = 1.33); a wider gap is two bounds
#: on different scales, such as a partial override of a recipe's pair (``--epsilon 0.2`` over ``epsilon_high:
#: 4e-4`` trains [1 - 0.2, 1 + 4e-4]).
CLIP_SCALE_FACTOR = 10.0


@functools.cache
def _grpo_fields() -> dict[str, dataclasses.Field]:
    """``GRPOConfig``'s fields by name (read once: :func:`resolve` runs for every read of an objective)."""
    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


def trl_default(name: str) -> Any:
    """``GRPOConfig``'s default value of field ``name`` (a fresh object for a field with a default factory)."""
    f = _grpo_fields()[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def trl_loss_options(config: Any) -> list[str]:
    """The TRL-loss-only options that ``config`` sets, as ``field=value`` strings. A token-level ratio is one only
    when nothing asks for our loss: with ``loss_type="loo_gspo"`` or a ``policy_loss`` (an option of our loss alone)
    our loss computes it (the ``token_clip`` policy loss)."""
    ours = config.loss_type == LOSS_TYPE or config.policy_loss is not None
    return [
        f"{name}={getattr(config, name)!r}"
        for name, is_set in _TRL_LOSS_OPTIONS.items()
        if is_set(getattr(config, name)) and not (ours and name == "importance_sampling_level")
    ]


@dataclass(frozen=True)
class Objective:
    """The objective a config trains, resolved once (TRL's convention: the config keeps the user's fields; the
    trainer, the model card and the logs read this).

    Attributes:
        loss_type: ``"loo_gspo"`` or a TRL loss type.
        uses_own_loss: our loss (``policy_loss`` over the exact global denominator) computes the loss.
        policy_loss: name in :data:`trl_loo_gspo.algorithms.losses.LOSSES`, or ``None`` with TRL's loss.
        loss_aggregation: name in :data:`trl_loo_gspo.algorithms.aggregation.AGGREGATIONS`, ``None`` with TRL's loss.
        advantage_estimator: name in ``ADVANTAGE_ESTIMATORS`` or ``"trl"`` (TRL's advantages).
        importance_sampling_level: ``"sequence"`` or ``"token"``.
        epsilon_low, epsilon_high: the clip range as the loss reads it (before entropy feedback widens ε_high);
            ``None`` for a policy loss without one (:data:`~trl_loo_gspo.algorithms.losses.UNCLIPPED_LOSSES`).
        scale_rewards: TRL's advantage scaling (read by TRL's advantages only).
        log_ratio_clamp: the §5.1 guard of our loss, or ``None``.
    """

    loss_type: str
    uses_own_loss: bool
    policy_loss: str | None
    loss_aggregation: str | None
    advantage_estimator: str
    importance_sampling_level: str
    epsilon_low: float | None
    epsilon_high: float | None
    scale_rewards: str
    log_ratio_clamp: float | None = None

    @property
    def has_clip_range(self) -> bool:
        """Whether the loss reads a clip range: every loss but our loss with an unclipped policy loss (§5.1)."""
        return self.epsilon_low is not None

    @property
    def denominator_count(self) -> str | None:
        """The global count our loss divides by (``"tokens"`` or ``"answers"``); ``None`` with TRL's loss."""
        return None if self.loss_aggregation is None else AGGREGATIONS[self.loss_aggregation].count

    @property
    def count_column(self) -> int | None:
        """Column of a slice's ``[tokens, answers]`` counts that is our loss's denominator; ``None`` with TRL's
        loss."""
        count = self.denominator_count
        return None if count is None else (0 if count == "tokens" else 1)

    @property
    def trl_advantages(self) -> bool:
        return self.advantage_estimator == TRL_ADVANTAGES

    def field_values(self) -> dict[str, Any]:
        """The value that trains of every config field this objective resolves, by field name (:data:`FIELDS`)."""
        return {name: getattr(self, attribute) for name, attribute in FIELDS.items()}


#: Config field -> :class:`Objective` attribute, for every field :func:`resolve` reads and may resolve from ``None``:
#: the one list the model card's table (``records/card.py``) and the stock baseline of a recipe ablation
#: (``experiment/ablation/plan.py``, which leaves these at TRL's defaults) read.
FIELDS = {
    "loss_type": "loss_type",
    "advantage_estimator": "advantage_estimator",
    "scale_rewards": "scale_rewards",
    "importance_sampling_level": "importance_sampling_level",
    "policy_loss": "policy_loss",
    "loss_aggregation": "loss_aggregation",
    "epsilon": "epsilon_low",
    "epsilon_high": "epsilon_high",
    "log_ratio_clamp": "log_ratio_clamp",
}


def inferred_loss_notice(config: Any) -> str | None:
    """The notice for a ``loss_type`` left unset while a TRL-loss-only option is set (``None`` otherwise)."""
    options = trl_loss_options(config)
    if config.loss_type is not None or not options:
        return None
    notice = (
        f"{', '.join(options)} is an option of TRL's losses, so loss_type is TRL's default "
        f"{trl_default('loss_type')!r} (TRL computes the loss; our additions still apply). Set loss_type explicitly "
        "to silence this."
    )
    if "importance_sampling_level='token'" in options:
        notice += (
            f" For trl-loo-gspo's own loss with a token-level ratio (clipped per token over the exact global "
            f"denominator, the variant the chain study measured) set policy_loss='{POLICY_LOSS_BY_LEVEL['token']}' "
            f"(or loss_type={LOSS_TYPE!r}) instead; for TRL's token-level loss set loss_type="
            f"{trl_default('loss_type')!r}."
        )
    return notice


#: Below this share of ε_high, entropy feedback's widening k ≤ ``entropy_k_max`` is too small to move a clip
#: decision: in the fair study (docs/results/fair-study) k_max = 4e-4 on ε_high = 8.67e-3 (4.6%) reached its bound and
#: left runs bit-identical to the runs without feedback.
ENTROPY_WIDENING_SHARE = 0.1


def entropy_widening_notice(config: Any, objective: Objective) -> str | None:
    """The notice for entropy feedback whose bound ``entropy_k_max`` is under :data:`ENTROPY_WIDENING_SHARE` of the
    fixed ε_high it widens (method §5.1; ``None`` otherwise, and with ``clip_target_fraction``: ε_high moves)."""
    if not config.entropy_feedback or not objective.has_clip_range or config.clip_target_fraction is not None:
        return None
    epsilon_high, k_max = objective.epsilon_high, config.entropy_k_max
    if k_max >= ENTROPY_WIDENING_SHARE * epsilon_high:
        return None
    return (
        f"entropy_feedback can widen epsilon_high={epsilon_high:g} by at most entropy_k_max={k_max:g} "
        f"({k_max / epsilon_high:.1%} of it): likely too little to change any clip decision (in the fair study, "
        "docs/results/fair-study, 4e-4 on epsilon_high 8.67e-3 reached its bound and left runs bit-identical to the "
        "runs without feedback). The defaults are at GSPO's scale (epsilon_high 4e-4); scale them with your "
        "epsilon_high, e.g. "
        f"entropy_k_max={epsilon_high:.2g}, entropy_step={epsilon_high / 8:.2g}."
    )


def _unknown(field: str, value: Any, registry: Any, decorator: str, extra: tuple[str, ...] = ()) -> ValueError:
    """The error for a name no registry holds: the field, the names registered now, and how to add one."""
    names = (*registry, *extra)
    return ValueError(
        f"{field}={value!r} is not a registered name; registered: {', '.join(map(repr, names))}. Register one with "
        f"@{decorator} (trl_loo_gspo.algorithms) before the config is built."
    )


def _scale_rewards(value: Any) -> str | None:
    return {True: "group", False: "none"}.get(value, value)


def _check_clip_scales(config: Any, epsilon_low: float, epsilon_high: float) -> None:
    """Refuse a clip range around 1 whose bounds differ by more than :data:`CLIP_SCALE_FACTOR`, naming both values
    and which of them the config set (the other is the default that followed)."""
    if not (epsilon_low > 0 and epsilon_high > 0):
        return  # out-of-range values are refused by the config's own checks, with their own message
    factor = max(epsilon_low, epsilon_high) / min(epsilon_low, epsilon_high)
    if factor <= CLIP_SCALE_FACTOR:
        return

    def source(name: str) -> str:
        return "set" if getattr(config, name) is not None else "the default for this objective"

    raise ValueError(
        f"epsilon={epsilon_low:g} ({source('epsilon')}) and epsilon_high={epsilon_high:g} ({source('epsilon_high')}) "
        f"are {factor:.0f}x apart: the clip range would be [1 - {epsilon_low:g}, 1 + {epsilon_high:g}], its two "
        "bounds on different scales. Asymmetric ranges differ by a small factor (DAPO 0.2 / 0.28, GSPO 3e-4 / 4e-4); "
        "a gap this wide is usually a partial override, e.g. --epsilon on the command line over a recipe's "
        "epsilon_high. Set both epsilon and epsilon_high (docs/method.md, 'Choosing ε'), or clip_target_fraction to "
        f"choose the range from the run (more than {CLIP_SCALE_FACTOR:g}x apart is refused)."
    )


def _check_unclipped(config: Any, policy_loss: str) -> None:
    """Refuse what a policy loss without a clip range (``UNCLIPPED_LOSSES``) cannot take, naming the field: a clip
    range (``epsilon``, ``epsilon_high``), the controllers that move one (``clip_target_fraction``,
    ``entropy_feedback``), and a missing or unbounded outer guard (``log_ratio_clamp``, its only bound; §5.1)."""
    for name in ("epsilon", "epsilon_high"):
        if getattr(config, name) is not None:
            raise ValueError(
                f"{name}={getattr(config, name)!r} does not apply to policy_loss={policy_loss!r}: it has no clip "
                "range, its only bound is the outer guard log_ratio_clamp (docs/method.md §5.1). Leave epsilon and "
                "epsilon_high unset (null in a recipe), or use policy_loss='response_clip'."
            )
    for name, is_on, off in (
        ("clip_target_fraction", config.clip_target_fraction is not None, None),
        ("entropy_feedback", bool(config.entropy_feedback), False),
    ):
        if is_on:
            raise ValueError(
                f"{name}={getattr(config, name)!r} moves the clip range, but policy_loss={policy_loss!r} has none. "
                f"Set {name}={off}, or use policy_loss='response_clip'."
            )
    clamp = config.log_ratio_clamp
    if clamp is None:
        raise ValueError(
            f"policy_loss={policy_loss!r} needs log_ratio_clamp: without a clip range the outer guard is the only "
            "bound on the importance weight s_i, which is otherwise unbounded (docs/method.md §5.1). Set "
            "log_ratio_clamp to c > 0 (s_i stays in [exp(-c), exp(c)]), e.g. 0.2."
        )
    if not (clamp > 0 and math.isfinite(clamp)):
        raise ValueError(
            f"log_ratio_clamp={clamp!r} must be finite and > 0 with policy_loss={policy_loss!r}: it is the only bound "
            "on s_i."
        )


def resolve(config: Any) -> Objective:
    """The :class:`Objective` of ``config`` (see the module docstring). Pure: reads the fields, never writes them;
    refuses contradictions with a ``ValueError`` naming the fields the user set."""
    options = trl_loss_options(config)
    loss_type = config.loss_type
    if loss_type is None:
        loss_type = trl_default("loss_type") if options else LOSS_TYPE
    if loss_type not in (LOSS_TYPE, *TRL_LOSS_TYPES):
        raise ValueError(f"loss_type={loss_type!r} is not one of {(LOSS_TYPE, *TRL_LOSS_TYPES)}.")
    ours = loss_type == LOSS_TYPE
    if ours and options:
        raise ValueError(
            f"loss_type={LOSS_TYPE!r} contradicts {options[0]}: that is an option of TRL's losses, which "
            f"{LOSS_TYPE!r} does not compute. Use a TRL loss_type (e.g. 'dapo' with importance_sampling_level="
            "'sequence', TRL's GSPO) or leave the option at its default."
        )

    # Clip range and ratio level: GSPO's scale with our loss, TRL's defaults (and TRL's epsilon_high rule) with TRL's.
    if ours:
        level = config.importance_sampling_level
        implied = LEVEL_BY_POLICY_LOSS.get(config.policy_loss)  # token_clip clips the token ratio, response_clip s_i
        if level is None:
            level = implied or "sequence"
        elif implied is not None and implied != level:
            raise ValueError(
                f"policy_loss={config.policy_loss!r} contradicts importance_sampling_level={level!r}: it uses the "
                f"{implied}-level ratio. Set policy_loss={POLICY_LOSS_BY_LEVEL[level]!r} for the {level}-level ratio, "
                "or leave importance_sampling_level unset (the policy loss then sets it)."
            )
        if level not in POLICY_LOSS_BY_LEVEL:
            raise ValueError(f"importance_sampling_level={level!r} is not one of {tuple(POLICY_LOSS_BY_LEVEL)}.")
        if config.policy_loss in UNCLIPPED_LOSSES:  # no clip range: ε is refused (_check_unclipped), never resolved
            epsilon_low = epsilon_high = None
        else:
            # a token ratio is not length-normalised: unset, its clip range is TRL's (0.2), not GSPO's 3e-4 / 4e-4
            default_low, default_high = (GSPO_EPSILON_LOW, GSPO_EPSILON_HIGH) if level == "sequence" else (None, None)
            if default_low is None:
                default_low = default_high = trl_default("epsilon")
            epsilon_low = default_low if config.epsilon is None else config.epsilon
            if config.epsilon_high is not None:
                epsilon_high = config.epsilon_high
            else:
                epsilon_high = default_high if config.epsilon is None else config.epsilon
    else:
        epsilon_low = trl_default("epsilon") if config.epsilon is None else config.epsilon
        epsilon_high = epsilon_low if config.epsilon_high is None else config.epsilon_high
        level = config.importance_sampling_level or trl_default("importance_sampling_level")
    own_loss = ours or (loss_type == "dapo" and level == "sequence" and not options)
    if loss_type not in (*_NO_UPPER_CLIP, *_ABSOLUTE_UPPER_CLIP) and epsilon_low is not None:
        _check_clip_scales(config, epsilon_low, epsilon_high)

    # Advantages: ours over group ids, or TRL's (scale_rewards, multi_objective_aggregation). Only values that
    # define advantages differently from ours ('group', 'batch', normalize_then_sum) select TRL's; 'none' is ours.
    scale = _scale_rewards(config.scale_rewards)
    trl_scaling = scale is not None and scale != "none"
    normalize_then_sum = config.multi_objective_aggregation != trl_default("multi_objective_aggregation")
    estimator = config.advantage_estimator
    if estimator is None:
        estimator = TRL_ADVANTAGES if (not ours or trl_scaling or normalize_then_sum) else "loo"
    if scale is None:
        scale = "none" if estimator != TRL_ADVANTAGES or ours else trl_default("scale_rewards")
    if estimator not in ADVANTAGE_ESTIMATORS and estimator != TRL_ADVANTAGES:
        raise _unknown(
            "advantage_estimator", estimator, ADVANTAGE_ESTIMATORS, "register_advantage_estimator", (TRL_ADVANTAGES,)
        )
    if estimator != TRL_ADVANTAGES:
        clash = None
        if trl_scaling:
            clash = f"scale_rewards={config.scale_rewards!r}"
        elif normalize_then_sum:
            clash = f"multi_objective_aggregation={config.multi_objective_aggregation!r}"
        if clash is not None:
            raise ValueError(
                f"advantage_estimator={estimator!r} contradicts {clash}: both define the advantages. "
                f"Set advantage_estimator={TRL_ADVANTAGES!r} for TRL's advantages, or leave {clash.split('=')[0]} "
                "unset ('grpo' is TRL's scale_rewards='group', 'group_mean' is scale_rewards='none')."
            )

    # Aggregation and the options only our loss has.
    aggregation = config.loss_aggregation
    if own_loss:
        if aggregation is None:
            aggregation = "token_total"
        if not ours and aggregation != "token_total":
            raise ValueError(
                f"loss_type='dapo' (token total) contradicts loss_aggregation={aggregation!r}. Use "
                f"loss_type={LOSS_TYPE!r} for another aggregation."
            )
        if aggregation not in AGGREGATIONS:
            raise _unknown("loss_aggregation", aggregation, AGGREGATIONS, "register_aggregation")
        policy_loss = POLICY_LOSS_BY_LEVEL[level] if config.policy_loss is None else config.policy_loss
        if not ours and policy_loss != OWN_POLICY_LOSS:
            raise ValueError(
                f"loss_type='dapo' (GSPO's response clipping) contradicts policy_loss={policy_loss!r}. Use "
                f"loss_type={LOSS_TYPE!r} for another policy loss."
            )
        if policy_loss not in LOSSES:
            raise _unknown("policy_loss", policy_loss, LOSSES, "register_loss")
        if policy_loss in UNCLIPPED_LOSSES:
            _check_unclipped(config, policy_loss)
    else:
        policy_loss = None
        for name, value, off in (
            ("policy_loss", config.policy_loss, None),
            ("loss_aggregation", config.loss_aggregation, None),
            ("log_ratio_clamp", config.log_ratio_clamp, None),
            ("process_advantage_coef", config.process_advantage_coef, 0.0),
        ):
            if value != off:
                raise ValueError(
                    f"{name}={value!r} needs our loss, but loss_type={loss_type!r} (with "
                    f"importance_sampling_level={level!r}) is computed by TRL. Use "
                    f"loss_type={LOSS_TYPE!r}, or leave {name} unset."
                )
    if config.entropy_feedback and loss_type in _NO_UPPER_CLIP:
        raise ValueError(
            f"entropy_feedback moves epsilon_high, which loss_type={loss_type!r} does not use. Set "
            "entropy_feedback=False or choose a clipped loss type."
        )
    if config.entropy_feedback and loss_type in _ABSOLUTE_UPPER_CLIP:
        raise ValueError(
            "entropy_feedback widens the clip range 1+epsilon_high by k <= entropy_k_max, but "
            f"loss_type={loss_type!r} reads epsilon_high as an absolute truncation cap on the ratio (TRL recommends "
            "~5), where adding k does nothing. Set entropy_feedback=False or choose a loss type with a clip range "
            "around 1."
        )
    if config.adaptive_group_size and estimator == TRL_ADVANTAGES:
        raise ValueError(
            f"adaptive_group_size gives prompts groups of different sizes, but advantage_estimator={TRL_ADVANTAGES!r}"
            " (TRL's advantages) assumes groups of exactly num_generations rows. Choose one of "
            f"{tuple(ADVANTAGE_ESTIMATORS)} for advantage_estimator, or set adaptive_group_size=False."
        )
    return Objective(
        loss_type=loss_type,
        uses_own_loss=own_loss,
        policy_loss=policy_loss,
        loss_aggregation=aggregation if own_loss else None,
        advantage_estimator=estimator,
        importance_sampling_level=level,
        epsilon_low=None if epsilon_low is None else float(epsilon_low),
        epsilon_high=None if epsilon_high is None else float(epsilon_high),
        scale_rewards=scale,
        log_ratio_clamp=config.log_ratio_clamp if own_loss else None,
    )
