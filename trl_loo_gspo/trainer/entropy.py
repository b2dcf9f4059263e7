"""Entropy feedback on the upper clip bound (docs/method.md §5.1): a component the trainer owns.

The controller itself is the pure :func:`trl_loo_gspo.algorithms.controllers.entropy_controller_step`. After every
optimizer step the trainer passes the step's global token-weighted mean entropy to :meth:`EntropyFeedback.update`; k
moves towards the target H* (the run plan's ``EntropyFeedbackPlan.target``, from ``entropy_feedback_target``, or the
mean of the first ``calibration_steps`` steps) and the effective ``epsilon_high`` of the next step is
``epsilon_high + k``. TRL's clipped losses read the
same ``trainer.epsilon_high``, so the feedback works with them too.
"""

from __future__ import annotations

from typing import Any

import torch

from ..algorithms.controllers import EntropyControllerState, entropy_controller_step
from ..algorithms.step_accounting import IDX
from .run_plan import EntropyFeedbackPlan


class EntropyFeedback:
    """The controller's state between optimizer steps (checkpointed through :meth:`state_dict`)."""

    def __init__(self, plan: EntropyFeedbackPlan) -> None:
        self.plan = plan
        self.on = plan.on
        self.state = EntropyControllerState(k=plan.k_init if self.on else 0.0)
        self.target: float | None = plan.target  # H*; None until calibrated
        self.calibration: list[float] = []

    @property
    def k(self) -> float:
        """The current widening of ε_high (0 when the feedback is off)."""
        return self.state.k if self.on else 0.0

    def epsilon_high(self, base: float) -> float:
        """The ε_high the losses read (§5.1): the objective's ``base`` widened by k (``base`` when off). The one
        formula; the trainer sets ``trainer.epsilon_high`` from it at construction, each step's end and a resume."""
        return base + self.k

    def close_step(self, metrics: dict[str, list], stats: torch.Tensor) -> None:
        """An optimizer step's end (when on): the step's global token-weighted mean entropy, from its reduced sums
        ``stats`` (:data:`~trl_loo_gspo.algorithms.step_accounting.IDX`), moves k (:meth:`update`); logged."""
        if not self.on:
            return
        entropy = float(stats[IDX["entropy_sum"]]) / max(float(stats[IDX["tokens"]]), 1.0)
        for name, value in self.update(entropy).items():
            metrics[name].append(value)

    def update(self, entropy: float) -> dict[str, float]:
        """After an optimizer step: move k (§5.1). Returns the metrics to log."""
        plan = self.plan
        if self.target is None:  # calibration: H* = the mean entropy of the first steps
            self.calibration.append(entropy)
            if len(self.calibration) >= plan.calibration_steps:
                self.target = sum(self.calibration) / len(self.calibration)
        else:
            self.state = entropy_controller_step(
                self.state,
                entropy,
                self.target,
                plan.step,
                plan.k_max,
                plan.ema,
                plan.dead_band,
            )
        logged = {"entropy_feedback/entropy": entropy, "entropy_feedback/k": self.state.k}
        if self.target is not None:
            logged["entropy_feedback/target"] = self.target
        return logged

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state.to_dict(), "target": self.target, "calibration": list(self.calibration)}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.state = EntropyControllerState.from_dict(saved["state"])
        self.target = saved["target"]
        self.calibration = list(saved["calibration"])
