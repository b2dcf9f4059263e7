"""The clip range of a run (docs/method.md, "Choosing ε"): where it bites, measured every optimizer step, and, with
``clip_target_fraction``, a range chosen from the run. A component the trainer owns (``state_dict`` /
``load_state_dict``, checkpointed with the run state).

Every micro-batch of our loss hands its per-answer rows (:func:`~trl_loo_gspo.algorithms.clip_stats.clip_rows`) to
the step's accounting; when the optimizer step closes, :meth:`ClipControl.close_step` gathers the rows of all
processes (two collectives, the same on every process), logs the step's figures, adds them to the run's tally, moves
the controller (:func:`~trl_loo_gspo.algorithms.controllers.clip_controller_step`) towards the ε that would have
clipped the target fraction of the last round's off-policy answers (all processes), and warns once when the
measurements show a clip that zeroes most off-policy answers or almost none."""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

import torch

from ..algorithms.clip_stats import (
    clip_margins,
    epsilon_for_fraction,
    length_edges,
    step_clip_summary,
    tally_step,
    tally_summary,
)
from ..algorithms.controllers import ClipControllerState, clip_controller_step
from .run_plan import ClipControlPlan

logger = logging.getLogger(__name__)

#: Off-policy steps pooled by the clip warning, and the answers they must hold between them.
WARNING_WINDOW = 5
WARNING_MIN_ANSWERS = 50
#: Pooled off-policy clipped fractions above / below which the run warns (once each).
MOST_CLIPPED = 0.5
ALMOST_NONE_CLIPPED = 0.01


def clip_warning(
    window: list[dict[str, float]], epsilon_low: float, epsilon_high: float, controlled: bool
) -> str | None:
    """The warning for the last :data:`WARNING_WINDOW` off-policy steps (their ``clip/offpolicy_*`` figures), or
    ``None``: the pooled clipped fraction is above :data:`MOST_CLIPPED` (most off-policy answers carry no gradient)
    or below :data:`ALMOST_NONE_CLIPPED` (the clip is inactive). ``controlled``: the controller is on and pinned at a
    bound of its range in every step of the window (it warns then only, since it is otherwise moving the range)."""
    if len(window) < WARNING_WINDOW:
        return None
    answers = sum(step["clip/offpolicy_answers"] for step in window)
    if answers < WARNING_MIN_ANSWERS:
        return None
    fraction = sum(step["clip/offpolicy_fraction"] * step["clip/offpolicy_answers"] for step in window) / answers
    p50 = sorted(step["clip/offpolicy_abs_log_p50"] for step in window)[len(window) // 2]
    p90 = sorted(step["clip/offpolicy_abs_log_p90"] for step in window)[len(window) // 2]
    measured = (
        f"over the last {len(window)} off-policy optimizer steps, {fraction:.0%} of {int(answers)} off-policy answers "
        f"with a non-zero advantage were on the clipped (zero-gradient) branch of the clip range "
        f"[1 - {epsilon_low:.3g}, 1 + {epsilon_high:.3g}] (|log s_i| of off-policy answers: median {p50:.2e}, "
        f"p90 {p90:.2e}; metrics clip/offpolicy_fraction, ratio/abs_log/*)"
    )
    at_bound = (
        " The clip-range controller is at a bound of clip_epsilon_bounds and cannot reach its target."
        if (controlled)
        else ""
    )
    if fraction > MOST_CLIPPED:
        return (
            f"The clip zeroes most off-policy answers: {measured}.{at_bound} The policy moves further per generation "
            f"round than epsilon allows, so most of each round's later steps learn nothing. Widen epsilon / "
            f"epsilon_high towards the measured |log s_i| (e.g. epsilon about {p50:.2g}), lower the learning rate or "
            "steps_per_generation, or set clip_target_fraction (e.g. 0.15) to choose the range from the run "
            "(docs/method.md, 'Choosing ε')."
        )
    if fraction < ALMOST_NONE_CLIPPED:
        return (
            f"The clip acts on almost no off-policy answer: {measured}.{at_bound} The clip range is wider than the "
            "policy moves per round, so it bounds nothing: the run is an unclipped policy gradient. If that is not "
            f"intended, narrow epsilon / epsilon_high towards the measured |log s_i| (p90 {p90:.2g}), or set "
            "clip_target_fraction (docs/method.md, 'Choosing ε')."
        )
    return None


class ClipControl:
    """The run's clip range and its measurements.

    ``base_low`` / ``base_high``: the objective's fixed range, or the controller's current one (the ratio
    ``base_high / base_low`` is kept); entropy feedback widens the upper bound on top (:meth:`epsilons`).

    ``epsilon_low`` / ``epsilon_high`` ``None``: the policy loss has no clip range (``response_unclipped``, method
    §5.1; the config refuses the controller and entropy feedback with it). The answers are still measured (nothing is
    clipped, ``|log s_i|`` is what the outer guard bounds); no range is logged and the clip warnings stay silent."""

    def __init__(
        self, plan: ClipControlPlan, epsilon_low: float | None, epsilon_high: float | None, accelerator: Any
    ) -> None:
        self.accelerator = accelerator
        self.target: float | None = plan.target_fraction
        self.max_step, self.ema = plan.max_step, plan.ema
        self.bounds = tuple(plan.bounds)
        # the controller pools the margins of one round's off-policy steps: every position of the round, once
        steps_per_round = plan.steps_per_round
        self.recent: deque[dict[str, Any]] = deque(maxlen=max(steps_per_round - 1, 1))
        self.widening = 0.0  # entropy feedback's k in the range last set (it widens the upper bound)
        self.start_low, self.start_high = epsilon_low, epsilon_high
        self.has_range = epsilon_low is not None and epsilon_high is not None
        ranged = self.has_range and epsilon_low > 0
        self.high_per_low = epsilon_high / epsilon_low if ranged else 1.0
        self.edges = length_edges(plan.max_completion_length)
        self.state = ClipControllerState(log_epsilon=math.log(epsilon_low) if ranged else 0.0)
        self.tally: dict[str, dict[str, Any]] = {}
        self.window: deque[dict[str, float]] = deque(maxlen=WARNING_WINDOW)
        self.pinned: deque[bool] = deque(maxlen=WARNING_WINDOW)
        self.warned: set[str] = set()
        self.measured = False  # a step measured since the range was last logged

    @property
    def controlled(self) -> bool:
        return self.target is not None

    @property
    def base(self) -> tuple[float | None, float | None]:
        """``(ε_low, ε_high)`` before entropy feedback: the objective's (``None`` without a clip range), or the
        controller's current range."""
        if not self.controlled or self.state.updates == 0:  # (exactly the configured range until the first move)
            return self.start_low, self.start_high
        low = math.exp(self.state.log_epsilon)
        return low, low * self.high_per_low

    def close_step(self, metrics: dict[str, list], local_rows: list[torch.Tensor], step: int) -> None:
        """The optimizer step's end: gather the rows (every process calls this on the same steps), log, tally, move
        the controller, warn."""
        local = torch.cat(local_rows) if local_rows else torch.empty(0, 7, dtype=torch.float64)
        local = local.to(self.accelerator.device)
        padded = self.accelerator.pad_across_processes(local, dim=0, pad_index=math.nan)
        rows = self.accelerator.gather(padded).cpu()  # one transfer: the figures below are read on the host
        summary = step_clip_summary(rows, self.edges)
        self.measured = True
        for name, value in summary.items():
            if not math.isnan(value):
                metrics[name].append(value)
        tally_step(self.tally, rows, self.edges)
        fraction = summary["clip/offpolicy_fraction"]
        if self.controlled:
            self._control(metrics, rows, summary)
        if not math.isnan(fraction):
            self.window.append({k: v for k, v in summary.items() if k.startswith("clip/offpolicy")})
            low = math.exp(self.state.log_epsilon)
            self.pinned.append(min(abs(low - b) / b for b in self.bounds) < 1e-9)
            self._warn(step)

    def _control(self, metrics: dict[str, list], rows: torch.Tensor, summary: dict[str, float]) -> None:
        """Move the controlled range: the ε_low at which the target fraction of the last round's off-policy answers
        (this step's and the previous ones', up to one of each position) would have been clipped, estimated from
        every process's rows, then :func:`clip_controller_step`."""
        answers = summary["clip/offpolicy_answers"]
        if answers > 0:
            margins = clip_margins(rows, self.high_per_low, self.widening)
            clipped = summary["clip/offpolicy_fraction"] * answers
            self.recent.append({"margins": margins, "clipped": clipped, "answers": answers})
        metrics["clip/target_fraction"].append(self.target)
        if not self.recent:
            return
        pooled = torch.cat([entry["margins"] for entry in self.recent])
        # §5.1 the estimate is global: the margins of all processes and micro-batches of the round's off-policy steps
        estimate = epsilon_for_fraction(pooled, self.target)
        if answers > 0:
            self.state = clip_controller_step(self.state, estimate, self.max_step, self.bounds, self.ema)
        metrics["clip/measured_fraction"].append(
            sum(entry["clipped"] for entry in self.recent) / sum(entry["answers"] for entry in self.recent)
        )
        if not math.isnan(estimate):
            metrics["clip/epsilon_estimate"].append(estimate)

    def epsilons(self, feedback: Any, metrics: dict[str, list] | None = None) -> tuple[float | None, float | None]:
        """``(ε_low, ε_high)`` the next step trains with (the losses, TRL's too, read the trainer's
        ``epsilon_low`` / ``epsilon_high``, set from this alone: at construction, each step's end, a resume): the
        configured or controlled range (:attr:`base`), ε_high widened by entropy feedback (``feedback``, an
        :class:`~trl_loo_gspo.trainer.entropy.EntropyFeedback`; §5.1). At a step's end (``metrics``) it logs them:
        ``entropy_feedback/epsilon_high`` with the feedback on, ``clip/epsilon_*`` after a measured step. Without a
        clip range: ``(None, None)``, nothing logged."""
        if not self.has_range:
            self.measured = False
            return None, None
        low, base_high = self.base
        high = feedback.epsilon_high(base_high)
        self.widening = high - base_high
        if metrics is not None:
            if feedback.on:
                metrics["entropy_feedback/epsilon_high"].append(high)
            if self.measured:
                metrics["clip/epsilon_low"].append(low)
                metrics["clip/epsilon_high"].append(high)
            self.measured = False
        return low, high

    def _warn(self, step: int) -> None:
        if not self.has_range:  # no clip: "clips almost nothing" is the design, not a symptom
            return
        controlled_at_bound = self.controlled and len(self.pinned) == WARNING_WINDOW and all(self.pinned)
        if self.controlled and not controlled_at_bound:
            return
        low, high = self.base
        warning = clip_warning(list(self.window), low, high, controlled_at_bound)
        if warning is None:
            return
        kind = "most" if "zeroes most" in warning else "none"
        if kind in self.warned:
            return
        self.warned.add(kind)
        if self.accelerator.is_main_process:
            logger.warning("At optimizer step %d: %s", step, warning)

    def summary(self) -> dict[str, Any]:
        """The run's clip figures (:func:`~trl_loo_gspo.algorithms.clip_stats.tally_summary`) and the final range."""
        low, high = self.base
        out = tally_summary(self.tally)
        out.update(
            epsilon_low=low,
            epsilon_high=high,
            target_fraction=self.target,
            controller_updates=self.state.updates,
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "controller": self.state.to_dict(),
            "recent": [{**entry, "margins": entry["margins"].tolist()} for entry in self.recent],
            "widening": self.widening,
            "tally": self.tally,
            "window": list(self.window),
            "pinned": list(self.pinned),
            "warned": sorted(self.warned),
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.state = ClipControllerState.from_dict(saved["controller"])
        self.recent = deque(
            [{**entry, "margins": torch.tensor(entry["margins"], dtype=torch.float64)} for entry in saved["recent"]],
            maxlen=self.recent.maxlen,
        )
        self.widening = float(saved["widening"])
        self.tally = {k: dict(v) for k, v in saved["tally"].items()}
        self.window = deque(saved["window"], maxlen=WARNING_WINDOW)
        self.pinned = deque(saved["pinned"], maxlen=WARNING_WINDOW)
        self.warned = set(saved["warned"])
