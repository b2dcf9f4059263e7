"""``LooGspoConfig``: TRL's ``GRPOConfig`` plus one flag per component of the LOO-GSPO method.

Every component is a flag so that it can be ablated (method §5.2). Invalid combinations fail at construction with a
``ValueError`` that names the field and the fix. ``docs/configuration.md`` lists every flag.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from trl import GRPOConfig

from ..algorithms.group_filter import GROUP_FILTERS
from . import objective
from .objective import LOSS_TYPE, TRL_LOSS_TYPES, Objective
from .precision import resolve_bf16

# The objective's fields GRPOConfig defines (TRL's constructor reads and checks these).
_TRL_OBJECTIVE_FIELDS = ("loss_type", "scale_rewards", "importance_sampling_level", "epsilon", "epsilon_high")


@dataclass
class LooGspoConfig(GRPOConfig):
    r"""Configuration for [`LooGspoTrainer`]: every argument of TRL's `GRPOConfig`, with GSPO-scale defaults, plus:

    Parameters:
        advantage_estimator (`str` or `None`, *optional*, defaults to `None` = `"loo"` with our loss, else `"trl"`):
            How the per-answer weight Â_i is computed from the group's rewards (method §2.2). `"loo"`: leave-one-out,
            R_i minus the mean of the *other* scorable answers of its group (keeps the reward scale). `"group_mean"`:
            R_i − R̄ (self-inclusive mean, = (K−1)/K · LOO). `"grpo"`: (R_i − R̄)/(std + 1e-4), TRL's default GRPO
            weights. `"trl"`: TRL's advantages (`scale_rewards`, `multi_objective_aggregation`). Unscorable answers
            (a reward function returned `None`) get 0 and stay out of the baseline.
        loss_aggregation (`str` or `None`, *optional*, defaults to `None` = `"token_total"` with our loss):
            How per-answer losses are combined (method §3.3). `"token_total"`: Σ T_i ℓ_i / Σ T_i with one global count
            of valid completion tokens per optimizer step (all processes and accumulation steps). `"sequence_mean"`:
            original GSPO, Σ ℓ_i / N with N the global count of answers with at least one valid token. Or any name
            registered with `register_aggregation`.
        policy_loss (`str` or `None`, *optional*, defaults to `None` = `"response_clip"` with our loss):
            The policy loss of our loss path (method §3.2), by name in `trl_loo_gspo.algorithms.losses.LOSSES`:
            `"response_clip"` (GSPO's response-level clipping), `"token_clip"` (per token; the default with
            `importance_sampling_level="token"`), `"response_unclipped"` (GSPO's sequence ratio with no clip range,
            ℓ_i = −s_i Â_i, bounded by `log_ratio_clamp` alone, which it requires; `epsilon`, `epsilon_high`,
            `clip_target_fraction` and `entropy_feedback` are refused with it; method §5.1), or one registered with
            `register_loss`.
        log_ratio_clamp (`float` or `None`, *optional*, defaults to `None`):
            Outer guard (method §5.1): clamp the sequence log-ratio log s_i to [−c, c] *before* `exp` and before the
            clipped loss; non-finite log-ratios are clamped too. Clamped answers get zero gradient. `None` turns it
            off. Must be wider than the clip range: c > max(log(1+ε_high), −log(1−ε_low)); with
            `policy_loss="response_unclipped"` it is required and any finite c > 0 (the loss's only parameter). The
            fraction of answers where it fired is logged as `guard/trigger_fraction`.
        signal_tolerance (`float`, *optional*, defaults to `1e-6`):
            A group carries a comparison signal when its scorable rewards spread by more than this (logged as
            `groups/frac_with_signal`). A tolerance, because floating-point noise gives constant groups a tiny
            non-zero spread.

    Objective-dependent defaults (resolved at construction, see :mod:`trl_loo_gspo.config.objective`): with the default
    `loss_type="loo_gspo"`, `epsilon=3e-4`, `epsilon_high=4e-4` (GSPO's published values, set for a 30B model and
    long answers: how far s_i moves per round depends on the run, so re-choose them, or set `clip_target_fraction`;
    docs/method.md, "Choosing ε"), `importance_sampling_level=
    "sequence"`, `scale_rewards="none"`, `advantage_estimator="loo"`, `loss_aggregation="token_total"`. With any TRL
    `loss_type` these fields take `GRPOConfig`'s defaults and TRL computes the loss and the advantages, so
    `LooGspoConfig(loss_type=X)` trains what `GRPOConfig(loss_type=X)` trains, plus the additions switched on here.
    TRL's `entropy_target` (its adaptive entropy bonus) is TRL's; our controller's target is
    `entropy_feedback_target`.
    """

    advantage_estimator: str | None = field(
        default=None,
        metadata={
            "help": "Per-answer weight (method §2.2): 'loo' (leave-one-out, keeps the reward scale), "
            "'group_mean' (R − group mean), 'grpo' ((R − mean)/(std + 1e-4)), or 'trl' (TRL's advantages: "
            "scale_rewards, multi_objective_aggregation). None = 'loo' with our loss, 'trl' with a TRL loss type or "
            "when scale_rewards / multi_objective_aggregation is set."
        },
    )
    loss_aggregation: str | None = field(
        default=None,
        metadata={
            "help": "Aggregation of our loss (method §3.3): 'token_total' (Σ T_i ℓ_i over one global count "
            "of valid tokens per optimizer step) or 'sequence_mean' (original GSPO: equal weight per answer). None = "
            "'token_total' with our loss; must stay None with a loss TRL computes. Any name registered with "
            "@register_aggregation (trl_loo_gspo.algorithms.aggregation) is accepted.",
        },
    )
    policy_loss: str | None = field(
        default=None,
        metadata={
            "help": "Policy loss of our loss path (method §3.2): a name in trl_loo_gspo.algorithms.losses.LOSSES "
            "('response_clip': GSPO's response-level clipping; 'token_clip': per-token clipping; "
            "'response_unclipped': GSPO's sequence ratio with no clip range, -s_i A_i, the 'no clip, outer guard "
            "only' arm of method §5.1: needs log_ratio_clamp, its only parameter, and refuses epsilon, epsilon_high, "
            "clip_target_fraction and entropy_feedback), or one registered with @register_loss. None = "
            "'response_clip' (with importance_sampling_level='token': 'token_clip'); must stay None with a loss TRL "
            "computes."
        },
    )
    log_ratio_clamp: float | None = field(
        default=None,
        metadata={
            "help": "Outer guard (method §5.1): clamp the sequence log-ratio to [-c, c] in the log domain before exp "
            "and before the clipped loss (non-finite values too; clamped answers get zero gradient). None = off. "
            "Must exceed max(log(1+epsilon_high), -log(1-epsilon)); required with policy_loss='response_unclipped' "
            "(no clip range), where any finite c > 0 is accepted."
        },
    )
    signal_tolerance: float = field(
        default=1e-6,
        metadata={
            "help": "A group has a comparison signal when its scorable rewards spread by more than this (logged as "
            "groups/frac_with_signal)."
        },
    )

    # Dynamic sampling (method §3.1) and the rollout-token budget (§5.2).
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "method §3.1: groups without a comparison signal never reach the loss; new prompts are drawn and "
            "generated until the generation batch is full (or max_sampling_rounds is hit)."
        },
    )
    group_filter: str = field(
        default="zero_variance",
        metadata={
            "help": "Which groups carry a signal: 'zero_variance' (rewards not all equal, up to signal_tolerance) "
            "or 'pass_rate_band' (mean reward strictly inside pass_rate_band; for non-binary rewards).",
            "choices": list(GROUP_FILTERS),
        },
    )
    pass_rate_band: list[float] = field(
        default_factory=lambda: [0.0, 1.0],
        metadata={"help": "[low, high] for group_filter='pass_rate_band': keep groups with low < mean < high."},
    )
    max_sampling_rounds: int = field(
        default=8,
        metadata={"help": "Cap on generation rounds per batch (method §3.1: cap the resampling budget)."},
    )
    on_sampling_exhausted: str = field(
        default="pad",
        metadata={
            "help": "When max_sampling_rounds is hit before the batch is full: 'pad' (train on the groups found; "
            "the rest of the batch is zero-weight rows that count in neither numerator nor denominator; warns "
            "once, logs sampling/padded_fraction) or 'error'.",
            "choices": ["pad", "error"],
        },
    )
    probe_generations: int | None = field(
        default=None,
        metadata={
            "help": "Two-stage sampling (method §3.1 variant; needs dynamic_sampling): generate this many answers per "
            "prompt first (e.g. 4 of 8), and the rest of the group only for prompts whose probe pass rate lies "
            "strictly inside probe_pass_rate_band; the probe answers stay members of the group. None = off."
        },
    )
    probe_pass_rate_band: list[float] = field(
        default_factory=lambda: [0.0, 1.0],
        metadata={"help": "[low, high]: a prompt is continued when low < probe mean reward < high (and it spreads)."},
    )
    adaptive_group_size: bool = field(
        default=False,
        metadata={
            "help": "method §3.1 (untested idea): after the probe, give prompts more answers the more informative "
            "their probe pass rate p is (p(1-p)), between min_generations and max_generations, at a fixed number of "
            "answers per batch (the generation batch). Needs probe_generations."
        },
    )
    min_generations: int | None = field(
        default=None,
        metadata={"help": "Smallest group with adaptive_group_size (>= probe_generations). None = probe_generations."},
    )
    max_generations: int | None = field(
        default=None,
        metadata={"help": "Largest group with adaptive_group_size. None = 2 * num_generations."},
    )
    recheck_filtered_every: int | None = field(
        default=None,
        metadata={
            "help": "Remember filtered prompts (dataset index, step, pass rate, all-correct/all-wrong), exclude them "
            "from refill draws, and re-admit those filtered at least N steps ago every N steps (through the probe "
            "when it is on). method §3.1: a prompt with pass rate 0.2 is all wrong in 4 tries in 41 of 100 cases. "
            "None = no registry (needs dynamic_sampling)."
        },
    )
    refill_seed: int | None = field(
        default=None,
        metadata={"help": "Seed of the refill prompt sampler (its own permutation and cursor). None = `seed`."},
    )
    rollout_token_budget: int | None = field(
        default=None,
        metadata={
            "help": "Stop training cleanly (checkpoint saved if saving is on, metrics logged) once the cumulative "
            "generated tokens reach this budget. Every generated token counts, filtered groups included; with "
            "dynamic_sampling, a batch that reaches it draws nothing new (at most one round over; with the probe, "
            "only the continuations of probes that already passed)."
        },
    )

    # Entropy feedback on the upper clip bound (method §5.1).
    entropy_feedback: bool = field(
        default=False,
        metadata={
            "help": "method §5.1: a bounded integral controller moves the upper clip bound: effective epsilon_high = "
            "epsilon_high + k, k in [0, entropy_k_max]; each optimizer step k += entropy_step * sign(H* - H), with H "
            "the global token-weighted mean entropy of the step's valid completion tokens."
        },
    )
    entropy_feedback_target: float | None = field(
        default=None,
        metadata={
            "help": "H* (nats per token). None = calibrate: the mean entropy of the first entropy_calibration_steps "
            "optimizer steps (k stays at its initial value meanwhile)."
        },
    )
    entropy_calibration_steps: int = field(
        default=5, metadata={"help": "Optimizer steps averaged to set H* when entropy_feedback_target is None."}
    )
    entropy_step: float = field(
        default=5e-5, metadata={"help": "Controller step δ added to or removed from k per optimizer step (>= 0)."}
    )
    entropy_k_max: float = field(
        default=4e-4, metadata={"help": "Upper bound of k: epsilon_high can widen to epsilon_high + entropy_k_max."}
    )
    entropy_k_init: float = field(default=0.0, metadata={"help": "Initial k, in [0, entropy_k_max]."})
    entropy_ema: float = field(
        default=0.0,
        metadata={"help": "EMA weight of the entropy estimate, in [0, 1): 0 = react to each step's entropy."},
    )
    entropy_dead_band: float = field(
        default=0.0, metadata={"help": "No change of k while |H* - H| <= this (nats per token)."}
    )

    # A clip range chosen from the run (docs/method.md, "Choosing ε").
    clip_target_fraction: float | None = field(
        default=None,
        metadata={
            "help": "Choose the sequence clip range from the run: after each optimizer step, the epsilon at which "
            "this fraction of the last round's off-policy answers with a non-zero advantage would have been on the "
            "clipped branch is estimated from their ratios (all processes), and epsilon / epsilon_high move towards "
            "it together (their ratio kept; the first estimate is taken whole). epsilon / epsilon_high are the "
            "starting point; entropy_feedback widens the controlled epsilon_high. In (0, 1), e.g. 0.15. None = off "
            "(a fixed clip range). Needs our loss with the sequence ratio and off-policy steps "
            "(steps_per_generation x num_iterations >= 2 x gradient_accumulation_steps)."
        },
    )
    clip_controller_max_step: float = field(
        default=0.5,
        metadata={
            "help": "Largest change of log(epsilon) per optimizer step after the first estimate (0.5: a factor of "
            "1.65)."
        },
    )
    clip_controller_ema: float = field(
        default=0.5,
        metadata={
            "help": "Smoothing of the clip-range controller, in [0, 1): log(epsilon) moves (1 - ema) of the way to "
            "the estimate per step. 0 = jump to each estimate (within clip_controller_max_step)."
        },
    )
    clip_epsilon_bounds: list[float] = field(
        default_factory=lambda: [1e-5, 0.5],
        metadata={
            "help": "[min, max] of the controlled epsilon (the lower bound; epsilon_high moves with it at the "
            "configured ratio). 0 < min <= epsilon <= max < 1."
        },
    )

    reference_kl_logging_steps: int | None = field(
        default=None,
        metadata={
            "help": "With beta = 0, measure KL(policy || reference) every N optimizer steps anyway (method §5.2: "
            "record it) and log it as `kl`: two extra forward passes on that step's batch; the reference is the "
            "disabled PEFT adapter for LoRA runs, else a frozen copy of the initial model (its memory). None = off."
        },
    )

    # Process feedback (method §6, extension).
    process_advantage_coef: float = field(
        default=0.0,
        metadata={
            "help": "α of the process advantages (method §6): Â_i,t = Â_i + α Â^proc_i,t, where Â^proc is a "
            "leave-one-out baseline of the verifiers' span signals across the group (like spans compared), "
            "broadcast to the tokens of each span. Needs a reward function that is a verifier with "
            "emit_spans=True. 0 = off = exactly the outcome-only objective (same code path)."
        },
    )
    process_divergence_window: int = field(
        default=20,
        metadata={
            "help": "Steps over which the trainer compares the process signal with the final pass rate; it warns "
            "(and logs process/divergence = 1) when the signal rises while the pass rate falls."
        },
    )
    process_divergence_margin: float = field(
        default=0.02,
        metadata={"help": "How much both halves of the window must differ for a divergence (absolute)."},
    )

    # Registration (method §2).
    register_experiment: bool = field(
        default=True,
        metadata={
            "help": "Write <output_dir>/experiment.json before training (base model and weights hash, data "
            "fingerprints, verifiers and versions, limits, sampling, optimizer, budget, seeds, full config, package "
            "versions, git commit) and refuse to start if eval_dataset shares prompts with train_dataset."
        },
    )
    experiment_task: str | None = field(
        default=None, metadata={"help": "A name for the task, recorded in experiment.json."}
    )

    # Output.
    hub_merge_adapter: bool = field(
        default=False,
        metadata={
            "help": "push_to_hub uploads the LoRA adapter merged into the base weights (a full model; the adapter "
            "goes to adapter/ in the same repo). Needs a LoRA run on one process or DDP (not FSDP/DeepSpeed)."
        },
    )
    summary_table: bool = field(
        default=True, metadata={"help": "Print a rich table of the run's key figures when training ends."}
    )

    # TRL fields whose default depends on the objective (resolved by `trl_loo_gspo.config.objective.resolve`).
    loss_type: str | None = field(
        default=None,
        metadata={
            "help": f"'{LOSS_TYPE}' (our response-level loss; the default) or any TRL loss type "
            f"{TRL_LOSS_TYPES}, computed by TRL ('dapo' with importance_sampling_level='sequence' is our token-total "
            "objective and runs through our loss). None = ours, unless a TRL loss option (delta, "
            "off_policy_mask_threshold, top_entropy_quantile, entropy_coef, use_adaptive_entropy, "
            "importance_sampling_level='token') is set: then TRL's default 'dapo'."
        },
    )
    epsilon: float | None = field(
        default=None,
        metadata={
            "help": "Lower clip bound ε_low (method §3.2). None = 3e-4 with our loss (GSPO's published value, set "
            "for a 30B model and answers of thousands of tokens: re-choose it for your run, or let "
            "clip_target_fraction choose it; docs/method.md, 'Choosing ε'), TRL's 0.2 otherwise."
        },
    )
    epsilon_high: float | None = field(
        default=None,
        metadata={
            "help": "Upper clip bound ε_high (method §3.2, §5.1). None = 4e-4 with our loss when epsilon is "
            "unset, else equal to epsilon (TRL's rule)."
        },
    )
    importance_sampling_level: str | None = field(
        default=None,
        metadata={
            "help": "'sequence' (GSPO's geometric-mean ratio) or 'token'. None = 'sequence' with our loss, TRL's "
            "'token' otherwise. With loss_type='loo_gspo' set, 'token' is our loss's token-level control (a ratio "
            "and a clip per token, TRL's epsilon 0.2 unless set; docs/method.md §3.2)."
        },
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "TRL's advantage scaling ('group', 'batch', 'none'), used by advantage_estimator='trl'. None = "
            "'none' with our loss, TRL's 'group' otherwise. Setting it (with our loss) selects TRL's advantages."
        },
    )

    def __post_init__(self) -> None:
        notice = objective.inferred_loss_notice(self)
        if notice is not None:
            warnings.warn(notice, objective.LooGspoConfigWarning, stacklevel=3)
        resolve_bf16(self)  # float32 instead of TRL's bf16 default where this machine cannot run bf16
        # TRL derives one of generation_batch_size / steps_per_generation from the other and then refuses both set:
        # accept both when they agree (a replaced or reloaded config), so that the config round-trips.
        given_batch = self.generation_batch_size if self.steps_per_generation is not None else None
        stated_batch = self.generation_batch_size if self.steps_per_generation is None else None  # set alone
        if given_batch is not None:
            self.generation_batch_size = None
        super().__post_init__()
        if given_batch is not None and given_batch != self.generation_batch_size:
            raise ValueError(
                f"generation_batch_size={given_batch} and steps_per_generation={self.steps_per_generation} disagree "
                f"(per_device_train_batch_size × processes × steps_per_generation = {self.generation_batch_size}): "
                "set only one of them."
            )
        self._validate(stated_batch)

    @property
    def objective(self) -> Objective:
        """The objective these fields select, resolved afresh (:func:`trl_loo_gspo.config.objective.resolve`):
        the fields keep the values the user gave, so ``dataclasses.replace`` and a reloaded config round-trip."""
        return objective.resolve(self)

    @contextmanager
    def resolved_for_trl(self) -> Iterator[LooGspoConfig]:
        """Within the block, TRL's fields of the objective (``loss_type``, ``scale_rewards``,
        ``importance_sampling_level``, ``epsilon``, ``epsilon_high``) hold the values that train, so that TRL's
        constructor validates and warns about what will run rather than about unset fields (``loss_type='vespo'``
        resolves ``importance_sampling_level`` to ``'token'``); restored afterwards, so the fields keep the values
        the user gave. With our loss TRL's loss-specific checks do not apply and nothing changes."""
        resolved = self.objective
        if resolved.uses_own_loss:
            yield self
            return
        values = {name: value for name, value in resolved.field_values().items() if name in _TRL_OBJECTIVE_FIELDS}
        saved = {name: getattr(self, name) for name in values}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                object.__setattr__(self, name, value)

    @classmethod
    def stock_trl(cls, **kwargs) -> LooGspoConfig:
        """TRL's own GRPO on ``LooGspoTrainer``: ``GRPOConfig``'s loss type and with it TRL's advantages and clip
        defaults (every other field as given). The equal-budget baseline of the demo and of ablations: one trainer,
        one code path, for baseline and variants."""
        kwargs.setdefault("loss_type", objective.trl_default("loss_type"))
        return cls(**kwargs)

    @property
    def uses_own_loss(self) -> bool:
        """Whether our loss computes the loss (``loss_type='loo_gspo'``, or TRL's GSPO form of ``'dapo'``)."""
        return self.objective.uses_own_loss

    @property
    def group_size_bounds(self) -> tuple[int, int]:
        """``(min_generations, max_generations)`` of adaptive group sizes, ``None`` fields resolved (probe
        size, twice ``num_generations``)."""
        low = self.probe_generations if self.min_generations is None else self.min_generations
        high = 2 * self.num_generations if self.max_generations is None else self.max_generations
        return low, high

    def _validate_clip_controller(self, resolved: Objective) -> None:
        """The clip-range controller's fields (docs/method.md, "Choosing ε")."""
        target = self.clip_target_fraction
        if target is None:
            return
        if not 0.0 < target < 1.0:
            raise ValueError(f"clip_target_fraction must be in (0, 1) (e.g. 0.15) or None, got {target}.")
        if not resolved.uses_own_loss or resolved.importance_sampling_level != "sequence":
            raise ValueError(
                "clip_target_fraction chooses the clip range of our loss's sequence ratio (loss_type='loo_gspo', "
                f"importance_sampling_level='sequence'); this config resolves to loss_type={resolved.loss_type!r}, "
                f"importance_sampling_level={resolved.importance_sampling_level!r}. Set clip_target_fraction=None, "
                "or use our loss."
            )
        if not self.clip_controller_max_step > 0:
            raise ValueError(f"clip_controller_max_step must be > 0, got {self.clip_controller_max_step}.")
        if not 0.0 <= self.clip_controller_ema < 1.0:
            raise ValueError(f"clip_controller_ema must be in [0, 1), got {self.clip_controller_ema}.")
        bounds = self.clip_epsilon_bounds
        if len(bounds) != 2 or not 0.0 < bounds[0] <= resolved.epsilon_low <= bounds[1] < 1.0:
            raise ValueError(
                f"clip_epsilon_bounds must be [min, max] with 0 < min <= epsilon ({resolved.epsilon_low:g}) <= max "
                f"< 1, got {bounds}."
            )
        steps_per_round = self.steps_per_generation * self.num_iterations // self.gradient_accumulation_steps
        if steps_per_round < 2:
            raise ValueError(
                "clip_target_fraction needs off-policy updates, but every optimizer step trains on a fresh generation "
                f"round (steps_per_generation={self.steps_per_generation} x num_iterations={self.num_iterations} / "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} < 2): the ratio is 1 and the clip "
                "never acts. Raise steps_per_generation or num_iterations, or set clip_target_fraction=None."
            )

    def _validate(self, stated_batch: int | None = None) -> None:
        """Reject invalid or unsupported combinations with a message naming the field and the fix. ``stated_batch``:
        ``generation_batch_size`` when it was set without ``steps_per_generation``."""
        resolved = objective.resolve(self)  # refuses contradictions of the objective's fields
        widening_notice = objective.entropy_widening_notice(self, resolved)
        if widening_notice is not None:
            warnings.warn(widening_notice, objective.LooGspoConfigWarning, stacklevel=4)
        if resolved.uses_own_loss and resolved.has_clip_range:
            if not 0.0 < resolved.epsilon_low < 1.0:
                raise ValueError(f"epsilon (ε_low) must satisfy 0 < epsilon < 1, got {resolved.epsilon_low}.")
            if not resolved.epsilon_high > 0.0:
                raise ValueError(f"epsilon_high must be > 0, got {resolved.epsilon_high}.")
        if self.entropy_feedback:
            if self.entropy_step < 0 or self.entropy_k_max < 0 or self.entropy_dead_band < 0:
                raise ValueError("entropy_step, entropy_k_max and entropy_dead_band must be >= 0.")
            if not 0.0 <= self.entropy_k_init <= self.entropy_k_max:
                raise ValueError(f"entropy_k_init must be in [0, entropy_k_max={self.entropy_k_max}].")
            if not 0.0 <= self.entropy_ema < 1.0:
                raise ValueError(f"entropy_ema must be in [0, 1), got {self.entropy_ema}.")
            if self.entropy_calibration_steps < 1:
                raise ValueError("entropy_calibration_steps must be >= 1.")
        if not self.process_advantage_coef >= 0:
            raise ValueError(f"process_advantage_coef must be >= 0, got {self.process_advantage_coef}.")
        if self.process_divergence_window < 2 or not self.process_divergence_margin >= 0:
            raise ValueError("process_divergence_window must be >= 2 and process_divergence_margin >= 0.")
        if self.reference_kl_logging_steps is not None and self.reference_kl_logging_steps < 1:
            raise ValueError(f"reference_kl_logging_steps must be >= 1, got {self.reference_kl_logging_steps}.")
        self._validate_clip_controller(resolved)
        widening = self.entropy_k_max if self.entropy_feedback else 0.0
        # (without a clip range the guard is the loss's only bound: any finite c > 0, checked by objective.resolve)
        if self.log_ratio_clamp is not None and resolved.uses_own_loss and resolved.has_clip_range:
            epsilon_low, epsilon_high = resolved.epsilon_low, resolved.epsilon_high
            if self.clip_target_fraction is not None:  # the controller may widen the range up to its bound
                widest_low = self.clip_epsilon_bounds[1]
                epsilon_low, epsilon_high = widest_low, epsilon_high * widest_low / epsilon_low
            widest = max(math.log1p(epsilon_high + widening), -math.log1p(-epsilon_low))
            if not self.log_ratio_clamp > widest:
                raise ValueError(
                    f"log_ratio_clamp={self.log_ratio_clamp} must be wider than the clip range in the log domain "
                    f"(> {widest:.6g} = max(log(1+epsilon_high+k_max), -log(1-epsilon)), k_max = entropy_k_max when "
                    "entropy_feedback is on, epsilon at the top of clip_epsilon_bounds when clip_target_fraction is "
                    "set), otherwise the guard would clip inside the clip range. Use a wide value such as 1.0, or "
                    "None to disable."
                )
        if self.group_filter not in GROUP_FILTERS:
            raise ValueError(f"group_filter={self.group_filter!r} is not one of {GROUP_FILTERS}.")
        if len(self.pass_rate_band) != 2 or not self.pass_rate_band[0] < self.pass_rate_band[1]:
            raise ValueError(f"pass_rate_band must be [low, high] with low < high, got {self.pass_rate_band}.")
        if len(self.probe_pass_rate_band) != 2 or not self.probe_pass_rate_band[0] < self.probe_pass_rate_band[1]:
            raise ValueError(
                f"probe_pass_rate_band must be [low, high] with low < high, got {self.probe_pass_rate_band}."
            )
        if self.probe_generations is not None:
            if not self.dynamic_sampling:
                raise ValueError(
                    "probe_generations needs dynamic_sampling=True (the probe is a way to filter groups)."
                )
            if not 2 <= self.probe_generations < self.num_generations:
                raise ValueError(
                    "probe_generations must satisfy 2 <= probe_generations < num_generations "
                    f"({self.num_generations}), got {self.probe_generations}."
                )
        if self.probe_generations is not None and self.max_sampling_rounds < 2:
            single_round_fits = self.adaptive_group_size and self.group_size_bounds[0] == self.probe_generations
            if not single_round_fits:
                raise ValueError(
                    f"probe_generations={self.probe_generations} needs max_sampling_rounds >= 2 (got "
                    f"{self.max_sampling_rounds}): a probed prompt is completed in the next round, so with one round "
                    "every probed group would be thrown away and the batch padded. Raise max_sampling_rounds, or "
                    "with adaptive_group_size set min_generations = probe_generations."
                )
        if self.adaptive_group_size:
            if self.probe_generations is None:
                raise ValueError("adaptive_group_size needs probe_generations (sizes follow the probe pass rates).")
            low, high = self.group_size_bounds
            if not self.probe_generations <= low <= high:
                raise ValueError(
                    "adaptive_group_size needs probe_generations <= min_generations <= max_generations, got "
                    f"{self.probe_generations}, {low}, {high}."
                )
            # A generation batch has generation_batch_size rows when that is set alone, whatever the number of
            # processes (TRL derives steps_per_generation from it); otherwise per_device_train_batch_size x
            # steps_per_generation x processes, and the run's processes are not known here: the sampler checks it.
            if stated_batch is not None and low > stated_batch:
                raise ValueError(
                    f"adaptive_group_size: min_generations={low} is larger than generation_batch_size={stated_batch}, "
                    "the rows of one generation batch (all processes): no group of min_generations answers fits in "
                    f"it, every probe that passed would be discarded and the batch padded. Set min_generations <= "
                    f"{stated_batch}, or raise generation_batch_size."
                )
        if self.recheck_filtered_every is not None:
            if not self.dynamic_sampling:
                raise ValueError("recheck_filtered_every needs dynamic_sampling=True.")
            if self.recheck_filtered_every < 1:
                raise ValueError(f"recheck_filtered_every must be >= 1, got {self.recheck_filtered_every}.")
        if self.max_sampling_rounds < 1:
            raise ValueError(f"max_sampling_rounds must be >= 1, got {self.max_sampling_rounds}.")
        if self.on_sampling_exhausted not in ("pad", "error"):
            raise ValueError(f"on_sampling_exhausted must be 'pad' or 'error', got {self.on_sampling_exhausted!r}.")
        if self.rollout_token_budget is not None and self.rollout_token_budget <= 0:
            raise ValueError(f"rollout_token_budget must be > 0 or None, got {self.rollout_token_budget}.")
        if self.signal_tolerance < 0:
            raise ValueError(f"signal_tolerance must be >= 0, got {self.signal_tolerance}.")
