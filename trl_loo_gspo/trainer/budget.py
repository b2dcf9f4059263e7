"""The run's plan, with ONE owner, the trainer's :class:`RunPlan`: the objective the config resolves to (resolved once
per plan, not per step) and the stopping rule on rollout tokens.

A budget can be given two ways: the config field ``rollout_token_budget``, or a :class:`RolloutTokenBudget` callback
(``trainer.add_callback(RolloutTokenBudget(trainer, 300_000))``: what the ablation runner and the demo do). When
training starts the trainer resolves both into its one frozen :class:`RunPlan` (``trainer.run_plan``: the smallest
budget given wins), and every place that stops reads that plan: a dynamic-sampling round inside a step
(``DynamicSampler``), the step's end (these callbacks), the demo's progress and curve, the ablation runner. No place
keeps its own limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from transformers import TrainerCallback

from ..algorithms.group_filter import budget_reached
from ..config.objective import Objective
from .sampling_plan import SamplingPlan


@dataclass(frozen=True)
class RunPlan:
    """The resolved stopping rules of one run.

    Attributes:
        rollout_token_budget: generated tokens after which training stops (every generated token counts, filtered
            groups included); ``None`` = no budget.
        objective: the config's resolved objective (:func:`trl_loo_gspo.config.objective.resolve`), resolved with
            the plan: the trainer's hooks, the loss, the card and the registration record read this one.
        sampling: the sampling settings (:class:`~trl_loo_gspo.trainer.sampling_plan.SamplingPlan`) the sampler and
            the trainer's round metrics read.
    """

    rollout_token_budget: int | None = None
    objective: Objective | None = None
    sampling: SamplingPlan | None = None

    @classmethod
    def resolve(cls, args: Any, callbacks: Iterable[Any] = (), num_generations: int | None = None) -> RunPlan:
        """The plan of a run configured by ``args`` with ``callbacks`` installed: the budget
        (:meth:`folded_budget`); the resolved objective; with ``num_generations`` (the trainer's K), the sampling
        plan."""
        objective = getattr(args, "objective", None)  # (a LooGspoConfig's one resolution)
        sampling = SamplingPlan.from_args(args, num_generations) if num_generations is not None else None
        return cls(rollout_token_budget=cls.folded_budget(args, callbacks), objective=objective, sampling=sampling)

    @staticmethod
    def folded_budget(args: Any, callbacks: Iterable[Any] = ()) -> int | None:
        """The smallest budget given: ``args.rollout_token_budget`` and that of each :class:`RolloutTokenBudget`
        among ``callbacks``; ``None`` when none is."""
        given = [getattr(args, "rollout_token_budget", None)]
        given += [callback.budget for callback in callbacks if isinstance(callback, RolloutTokenBudget)]
        budgets = [int(budget) for budget in given if budget is not None]
        return min(budgets) if budgets else None

    def with_callbacks(self, args: Any, callbacks: Iterable[Any]) -> RunPlan:
        """This plan with the budget folded again from ``args`` and ``callbacks`` (when training starts: a budget
        can arrive as a callback after construction); the objective and the sampling plan are kept as resolved."""
        return replace(self, rollout_token_budget=self.folded_budget(args, callbacks))

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


class RolloutTokenBudget(TrainerCallback):
    """Stop training cleanly at the end of the step in which the run plan's budget of generated tokens is reached.

    The trainer installs one (no budget of its own: it enforces ``rollout_token_budget``); adding another with a
    ``budget`` gives the run that budget (the trainer folds it into its :class:`RunPlan` when training starts, so the
    sampling rounds inside a step stop at it too).

    Args:
        trainer: a ``LooGspoTrainer`` (read: ``run_plan`` and ``generated_tokens_total``).
        budget: tokens, or ``None`` to add no budget (the plan's is enforced either way).
        progress: called with the generated tokens capped at the plan's budget after every step (a progress bar).
    The stopping step is logged, and saved when saving is on.
    """

    def __init__(self, trainer, budget: int | None = None, progress: Callable[[int], None] | None = None) -> None:
        if budget is not None and budget <= 0:
            raise ValueError(f"a rollout-token budget must be > 0 or None, got {budget}.")
        self.trainer, self.budget, self.progress = trainer, budget, progress

    def on_step_end(self, args, state, control, **kwargs):
        plan, tokens = self.trainer.run_plan, self.trainer.generated_tokens_total
        if self.progress is not None:
            self.progress(plan.progress(tokens))
        if plan.reached(tokens):
            control.should_training_stop = True
            control.should_log = True
            control.should_save = args.save_strategy != "no"
        return control
