"""The run's ONE plan (:class:`RunPlan`): every LOO-GSPO setting the trainer's hooks, its components, the launch
checks, the model card and the registration record read, resolved from the config once, frozen.

* the objective (:func:`trl_loo_gspo.config.objective.resolve`: loss, advantages, ratio level, clip range);
* the sampling plan (:class:`~trl_loo_gspo.trainer.sampling_plan.SamplingPlan`, method §3.1);
* the budget of generated tokens: the config field ``rollout_token_budget`` and every
  :class:`~trl_loo_gspo.trainer.budget.RolloutTokenBudget` callback, folded into one figure (the smallest wins);
* the feedback settings (:class:`FeedbackPlan`: entropy feedback and the clip-range controller, method §5.1;
  process feedback, §6; the reference-KL measurement);
* what the records read (:class:`RecordsPlan`: registration, summary table, merged Hub push).

The trainer resolves the plan before TRL's constructor runs and folds the budget again when training starts (a
budget can arrive as a callback in between); nothing reads these fields from the config outside ``config/`` and this
module's constructors (tests/test_architecture.py enforces it), and ``experiment.json`` records the plan whole
(:meth:`RunPlan.to_dict`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..algorithms.group_filter import budget_reached
from ..config.objective import Objective
from .budget import RolloutTokenBudget
from .sampling_plan import SamplingPlan


@dataclass(frozen=True)
class EntropyFeedbackPlan:
    """Entropy feedback on ε_high (method §5.1; ``LooGspoConfig.entropy_*``)."""

    on: bool = False
    k_init: float = 0.0
    target: float | None = None  # H*; None: calibrated over the first calibration_steps steps
    calibration_steps: int = 5
    step: float = 0.0
    k_max: float = 0.0
    ema: float = 0.0
    dead_band: float = 0.0

    @classmethod
    def from_args(cls, args: Any) -> EntropyFeedbackPlan:
        return cls(
            on=bool(args.entropy_feedback),
            k_init=float(args.entropy_k_init),
            target=args.entropy_feedback_target,
            calibration_steps=int(args.entropy_calibration_steps),
            step=float(args.entropy_step),
            k_max=float(args.entropy_k_max),
            ema=float(args.entropy_ema),
            dead_band=float(args.entropy_dead_band),
        )


@dataclass(frozen=True)
class ClipControlPlan:
    """Where the clip bites and the clip-range controller (docs/method.md 'Choosing ε'; ``clip_*`` fields)."""

    target_fraction: float | None = None  # None: the objective's fixed range
    max_step: float = 0.5
    ema: float = 0.5
    bounds: tuple[float, float] = (1e-5, 0.5)
    steps_per_round: int = 1  # optimizer steps per generation round (the positions the controller pools)
    max_completion_length: int = 1  # the length thirds of clip/by_length/*

    @classmethod
    def from_args(cls, args: Any) -> ClipControlPlan:
        return cls(
            target_fraction=args.clip_target_fraction,
            max_step=float(args.clip_controller_max_step),
            ema=float(args.clip_controller_ema),
            bounds=tuple(float(b) for b in args.clip_epsilon_bounds),
            steps_per_round=args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps,
            max_completion_length=int(args.max_completion_length or 1),
        )


@dataclass(frozen=True)
class ProcessFeedbackPlan:
    """Process feedback (method §6; ``process_*`` fields): the coefficient (0 = off) and the divergence detector."""

    coef: float = 0.0
    window: int = 20
    margin: float = 0.0

    @property
    def on(self) -> bool:
        return self.coef > 0

    @classmethod
    def from_args(cls, args: Any) -> ProcessFeedbackPlan:
        return cls(
            coef=float(args.process_advantage_coef),
            window=int(args.process_divergence_window),
            margin=float(args.process_divergence_margin),
        )


@dataclass(frozen=True)
class FeedbackPlan:
    """The run's feedback settings: what moves or is measured between optimizer steps."""

    entropy: EntropyFeedbackPlan = EntropyFeedbackPlan()
    clip: ClipControlPlan = ClipControlPlan()
    process: ProcessFeedbackPlan = ProcessFeedbackPlan()
    reference_kl_logging_steps: int | None = None  # with beta = 0: measure the KL to the reference every N steps

    @classmethod
    def from_args(cls, args: Any) -> FeedbackPlan:
        return cls(
            entropy=EntropyFeedbackPlan.from_args(args),
            clip=ClipControlPlan.from_args(args),
            process=ProcessFeedbackPlan.from_args(args),
            reference_kl_logging_steps=args.reference_kl_logging_steps,
        )


@dataclass(frozen=True)
class RecordsPlan:
    """What the registration record, the summary table and a Hub push read (method §2)."""

    register_experiment: bool = False
    experiment_task: str | None = None
    summary_table: bool = False
    hub_merge_adapter: bool = False

    @classmethod
    def from_args(cls, args: Any) -> RecordsPlan:
        return cls(
            register_experiment=bool(args.register_experiment),
            experiment_task=args.experiment_task,
            summary_table=bool(args.summary_table),
            hub_merge_adapter=bool(args.hub_merge_adapter),
        )


@dataclass(frozen=True)
class RunPlan:
    """The resolved plan of one run.

    Attributes:
        rollout_token_budget: generated tokens after which training stops (every generated token counts, filtered
            groups included); ``None`` = no budget.
        configured_budget: the config field ``rollout_token_budget`` as given (the budget callbacks fold onto it).
        objective: the config's resolved objective (:func:`trl_loo_gspo.config.objective.resolve`): the trainer's
            hooks, the loss, the card and the registration record read this one.
        sampling: the sampling settings the sampler, the trainer's round metrics and the card read.
        feedback: entropy feedback, the clip-range controller, process feedback, the reference-KL measurement.
        records: registration, summary table, merged Hub push.
    """

    rollout_token_budget: int | None = None
    configured_budget: int | None = None  # the config field's own budget (callbacks are folded onto it)
    objective: Objective | None = None
    sampling: SamplingPlan | None = None
    feedback: FeedbackPlan | None = None
    records: RecordsPlan | None = None

    @classmethod
    def resolve(cls, args: Any, callbacks: Iterable[Any] = (), num_generations: int | None = None) -> RunPlan:
        """The plan of a run configured by ``args`` (a ``LooGspoConfig``) with ``callbacks`` installed: the budget
        (:meth:`folded_budget`); the resolved objective, the feedback and records settings; with
        ``num_generations`` (the trainer's K), the sampling plan. A namespace without the LOO-GSPO fields gives
        a plan with only the budget (what TRL's own tests build)."""
        full = hasattr(args, "entropy_feedback")
        configured = getattr(args, "rollout_token_budget", None)
        return cls(
            rollout_token_budget=cls.folded_budget(configured, callbacks),
            configured_budget=configured,
            objective=getattr(args, "objective", None),  # (a LooGspoConfig's one resolution)
            sampling=SamplingPlan.from_args(args, num_generations) if num_generations is not None else None,
            feedback=FeedbackPlan.from_args(args) if full else None,
            records=RecordsPlan.from_args(args) if full else None,
        )

    @staticmethod
    def folded_budget(configured: int | None, callbacks: Iterable[Any] = ()) -> int | None:
        """The smallest budget given: ``configured`` (the config field) and that of each ``RolloutTokenBudget``
        among ``callbacks``; ``None`` when none is."""
        given = [configured]
        given += [callback.budget for callback in callbacks if isinstance(callback, RolloutTokenBudget)]
        budgets = [int(budget) for budget in given if budget is not None]
        return min(budgets) if budgets else None

    def with_callbacks(self, callbacks: Iterable[Any]) -> RunPlan:
        """This plan with the budget folded again from the configured one and ``callbacks`` (when training starts:
        a budget can arrive as a callback after construction); everything else is kept as resolved."""
        return replace(self, rollout_token_budget=self.folded_budget(self.configured_budget, callbacks))

    def reached(self, generated_tokens: int) -> bool:
        """Whether ``generated_tokens`` spend the budget (never, without one)."""
        return budget_reached(generated_tokens, self.rollout_token_budget)

    def tokens_left(self, generated_tokens: int) -> int | None:
        """Tokens the run may still generate after ``generated_tokens`` (0 once spent); ``None`` without a budget."""
        if self.rollout_token_budget is None:
            return None
        return max(self.rollout_token_budget - generated_tokens, 0)

    def progress(self, generated_tokens: int) -> int:
        """``generated_tokens`` capped at the budget (for a progress bar)."""
        budget = self.rollout_token_budget
        return generated_tokens if budget is None else min(generated_tokens, budget)

    def flags(self) -> dict[str, Any]:
        """The plan's components under their ``LooGspoConfig`` field names, as resolved (what the model card's
        method paragraph and flag table show besides the objective's fields)."""
        flags: dict[str, Any] = {}
        if self.sampling is not None:
            sampling = self.sampling
            flags.update(
                dynamic_sampling=sampling.dynamic_sampling,
                group_filter=sampling.group_filter,
                probe_generations=sampling.probe_generations,
                adaptive_group_size=sampling.adaptive_group_size,
            )
        if self.feedback is not None:
            feedback = self.feedback
            flags.update(
                entropy_feedback=feedback.entropy.on,
                clip_target_fraction=feedback.clip.target_fraction,
                process_advantage_coef=feedback.process.coef,
            )
        flags["rollout_token_budget"] = self.rollout_token_budget
        return flags

    def to_dict(self) -> dict[str, Any]:
        """The whole plan as JSON-ready values (``experiment.json``'s ``run_plan``)."""
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
