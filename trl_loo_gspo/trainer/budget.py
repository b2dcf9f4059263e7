"""One rollout-token budget stopper for every trainer that counts ``generated_tokens_total`` (``LooGspoTrainer``,
whatever its loss: the stock-TRL baseline is the same trainer): the trainer's ``rollout_token_budget`` and the
ablation runner use it. (The demo's own stopper also handles a wall-clock budget and its learning curve.)"""

from __future__ import annotations

from collections.abc import Callable

from transformers import TrainerCallback

from ..algorithms.group_filter import budget_reached


class RolloutTokenBudget(TrainerCallback):
    """Stop training cleanly at the end of the step in which ``budget`` generated tokens are reached.

    Args:
        trainer: read for ``generated_tokens_total``.
        budget: tokens; ``None`` reads ``trainer.args.rollout_token_budget`` at every step (``None`` there = off).
        progress: called with ``min(tokens, budget)`` after every step (e.g. a progress bar).
    The stopping step is logged, and saved when saving is on.
    """

    def __init__(self, trainer, budget: int | None = None, progress: Callable[[int], None] | None = None) -> None:
        self.trainer, self.budget, self.progress = trainer, budget, progress

    def _limit(self) -> int | None:
        return self.budget if self.budget is not None else getattr(self.trainer.args, "rollout_token_budget", None)

    @classmethod
    def limit_of(cls, trainer) -> int | None:
        """The budget of ``trainer``'s stopper (the ablation runner sets it on the callback), else ``None``."""
        for callback in trainer.callback_handler.callbacks:
            if isinstance(callback, cls):
                return callback._limit()
        return None

    def on_step_end(self, args, state, control, **kwargs):
        tokens, limit = self.trainer.generated_tokens_total, self._limit()
        if self.progress is not None:
            self.progress(tokens if limit is None else min(tokens, limit))
        if budget_reached(tokens, limit):
            control.should_training_stop = True
            control.should_log = True
            control.should_save = args.save_strategy != "no"
        return control
