"""Entropy feedback on the upper clip bound (docs/method.md §5.1): the trainer side, as a mixin.

The controller itself is the pure :func:`trl_loo_gspo.controllers.entropy_controller_step`. After every optimizer
step the trainer passes the step's global token-weighted mean entropy here; k moves towards the target H*
(``entropy_feedback_target``, or the mean of the first ``entropy_calibration_steps`` steps) and the effective
``epsilon_high`` of the next step is ``epsilon_high + k``. TRL's clipped losses read the same ``self.epsilon_high``,
so the feedback works with them too.
"""

from __future__ import annotations

from typing import Any

from .controllers import EntropyControllerState, entropy_controller_step


class EntropyFeedbackMixin:
    """Mixed into ``LooGspoTrainer``."""

    def _init_entropy_feedback(self) -> None:
        args = self.args
        self._base_epsilon_high = self.epsilon_high
        self.entropy_state = EntropyControllerState(k=args.entropy_k_init if args.entropy_feedback else 0.0)
        self.entropy_target = args.entropy_feedback_target  # H*; None until calibrated
        self._entropy_calibration: list[float] = []
        if args.entropy_feedback:
            self.epsilon_high = self._base_epsilon_high + self.entropy_state.k

    def _update_entropy_feedback(self, entropy: float) -> None:
        """After an optimizer step: move k (§5.1) and set the effective ε_high of the next step."""
        args = self.args
        if self.entropy_target is None:  # calibration: H* = the mean entropy of the first steps
            self._entropy_calibration.append(entropy)
            if len(self._entropy_calibration) >= args.entropy_calibration_steps:
                self.entropy_target = sum(self._entropy_calibration) / len(self._entropy_calibration)
        else:
            self.entropy_state = entropy_controller_step(
                self.entropy_state,
                entropy,
                self.entropy_target,
                args.entropy_step,
                args.entropy_k_max,
                args.entropy_ema,
                args.entropy_dead_band,
            )
        self.epsilon_high = self._base_epsilon_high + self.entropy_state.k
        metrics = self._metrics["train"]
        metrics["entropy_feedback/entropy"].append(entropy)
        metrics["entropy_feedback/k"].append(self.entropy_state.k)
        metrics["entropy_feedback/epsilon_high"].append(self.epsilon_high)
        if self.entropy_target is not None:
            metrics["entropy_feedback/target"].append(self.entropy_target)

    def _entropy_feedback_state(self) -> dict[str, Any]:
        return {
            "state": self.entropy_state.to_dict(),
            "target": self.entropy_target,
            "calibration": self._entropy_calibration,
        }

    def _load_entropy_feedback_state(self, saved: dict[str, Any]) -> None:
        self.entropy_state = EntropyControllerState.from_dict(saved["state"])
        self.entropy_target = saved["target"]
        self._entropy_calibration = list(saved["calibration"])
        if self.args.entropy_feedback:
            self.epsilon_high = self._base_epsilon_high + self.entropy_state.k
