"""The stopping rule on rollout tokens, as a callback that holds values (the run plan's reader and the token count),
never the trainer.

A budget can be given two ways: the config field ``rollout_token_budget``, or a :class:`RolloutTokenBudget` callback
(``trainer.add_callback(RolloutTokenBudget(300_000))``: what the ablation runner and the demo do). When training
starts the trainer folds both into its one frozen :class:`~trl_loo_gspo.trainer.run_plan.RunPlan`
(``trainer.run_plan``: the smallest budget given wins) and binds every budget callback to that plan; every place that
stops reads the plan: a dynamic-sampling round inside a step (``DynamicSampler``), the step's end (these
callbacks), the demo's progress and curve, the ablation runner. No place keeps its own limit.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback


class RolloutTokenBudget(TrainerCallback):
    """Stop training cleanly at the end of the step in which the run plan's budget of generated tokens is reached.

    Args:
        budget: tokens, or ``None`` to add no budget (the plan's is enforced either way).
        progress: called with the generated tokens capped at the plan's budget after every step (a progress bar).

    Added to a ``LooGspoTrainer`` (``trainer.add_callback(RolloutTokenBudget(60_000))``), its budget joins the
    trainer's run plan when training starts, so the sampling rounds inside a step stop at it too; the trainer binds
    it (:meth:`bind`) to the plan and its token counter. The stopping step is logged, and saved when saving is on.
    (``RolloutTokenBudget(trainer, budget, progress)``, the 0.x form, still works and warns: the trainer argument
    is not needed.)
    """

    def __init__(self, budget: Any = None, progress: Any = None, *legacy: Any) -> None:
        legacy_trainer = budget is not None and not isinstance(budget, numbers.Real)
        if legacy_trainer or (progress is not None and isinstance(progress, numbers.Real)):  # the 0.x form
            warnings.warn(
                "RolloutTokenBudget(trainer, budget, progress) is deprecated: pass RolloutTokenBudget(budget, "
                "progress) (the trainer binds the callback to its run plan when training starts).",
                FutureWarning,
                stacklevel=2,
            )
            budget, progress = progress, (legacy[0] if legacy else None)
        if budget is not None and (isinstance(budget, bool) or budget <= 0 or int(budget) != budget):
            raise ValueError(f"a rollout-token budget must be a whole number > 0 or None, got {budget!r}.")
        budget = None if budget is None else int(budget)
        self.budget: int | None = budget
        self.progress: Callable[[int], None] | None = progress
        self._plan: Callable[[], Any] | None = None
        self._generated: Callable[[], int] | None = None

    def bind(self, plan: Callable[[], Any], generated: Callable[[], int]) -> RolloutTokenBudget:
        """Read the run plan (``plan()``: a :class:`~trl_loo_gspo.trainer.run_plan.RunPlan`) and the run's generated
        tokens (``generated()``) at each step's end."""
        self._plan, self._generated = plan, generated
        return self

    def on_step_end(self, args, state, control, **kwargs):
        if self._plan is None:  # not bound: added to a trainer that is not a LooGspoTrainer
            return control
        plan, tokens = self._plan(), self._generated()
        if self.progress is not None:
            self.progress(plan.progress(tokens))
        if plan.reached(tokens):
            control.should_training_stop = True
            control.should_log = True
            control.should_save = args.save_strategy != "no"
        return control


class PlanBudget(RolloutTokenBudget):
    """The budget callback the trainer installs for the plan's own budget (``rollout_token_budget``); a class of its
    own so that a user's ``RolloutTokenBudget`` is not "already there" for Transformers' callback handler."""
