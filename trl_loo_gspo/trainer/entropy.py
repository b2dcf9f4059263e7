"""Entropy feedback on the upper clip bound (docs/method.md §5.1): a component the trainer owns.

The controller itself is the pure :func:`trl_loo_gspo.algorithms.controllers.entropy_controller_step`. After every
optimizer step the trainer passes the step's global token-weighted mean entropy to :meth:`EntropyFeedback.update`; k
moves towards the target H* (``entropy_feedback_target``, or the mean of the first ``entropy_calibration_steps``
steps) and the effective ``epsilon_high`` of the next step is ``epsilon_high + k``. TRL's clipped losses read the
same ``trainer.epsilon_high``, so the feedback works with them too.
"""

from __future__ import annotations

from typing import Any

from ..algorithms.controllers import EntropyControllerState, entropy_controller_step


class EntropyFeedback:
    """The controller's state between optimizer steps (checkpointed through :meth:`state_dict`)."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.on = bool(args.entropy_feedback)
        self.state = EntropyControllerState(k=args.entropy_k_init if self.on else 0.0)
        self.target: float | None = args.entropy_feedback_target  # H*; None until calibrated
        self.calibration: list[float] = []

    @property
    def k(self) -> float:
        """The current widening of ε_high (0 when the feedback is off)."""
        return self.state.k if self.on else 0.0

    def epsilon_high(self, base: float) -> float:
        """The ε_high the losses read (§5.1): the objective's ``base`` widened by k (``base`` when off). The one
        formula; the trainer sets ``trainer.epsilon_high`` from it at construction, each step's end and a resume."""
        return base + self.k

    def update(self, entropy: float) -> dict[str, float]:
        """After an optimizer step: move k (§5.1). Returns the metrics to log."""
        args = self.args
        if self.target is None:  # calibration: H* = the mean entropy of the first steps
            self.calibration.append(entropy)
            if len(self.calibration) >= args.entropy_calibration_steps:
                self.target = sum(self.calibration) / len(self.calibration)
        else:
            self.state = entropy_controller_step(
                self.state,
                entropy,
                self.target,
                args.entropy_step,
                args.entropy_k_max,
                args.entropy_ema,
                args.entropy_dead_band,
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
