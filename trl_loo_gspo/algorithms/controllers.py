"""Controllers of the clip range, as pure functions: entropy feedback on the upper bound (method §5.1) and the
clip-range controller that follows a target clipped fraction (docs/method.md, "Choosing ε").

Entropy feedback (method §5.1): a bounded integral controller.

MAI's controller moves the *upper clip bound* with a bounded state: entropy below target → widen gradually; above →
tighten. State k ∈ [0, k_max]; the effective bound is ε_high + k. This transplants a token-level idea onto a
response-level objective, so the entropy estimate, the target and the speed are configuration to test (§5.1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EntropyControllerState:
    """k: the widening of ε_high; entropy: the (optionally smoothed) entropy estimate last used (NaN before any)."""

    k: float = 0.0
    entropy: float = math.nan

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> EntropyControllerState:
        return cls(k=float(state["k"]), entropy=float(state["entropy"]))


def entropy_controller_step(
    state: EntropyControllerState,
    entropy: float,
    target: float,
    step: float,
    k_max: float,
    ema: float = 0.0,
    dead_band: float = 0.0,
) -> EntropyControllerState:
    """One optimizer step of the controller (method §5.1).

    ``Ĥ = ema·Ĥ_prev + (1 − ema)·entropy`` (the first measurement initialises it), then, unless
    ``|H* − Ĥ| ≤ dead_band``: ``k ← clip(k + step·sign(H* − Ĥ), 0, k_max)``. A non-finite entropy leaves the state
    unchanged.
    """
    if not (0.0 <= ema < 1.0) or step < 0 or k_max < 0 or dead_band < 0:
        raise ValueError("need 0 <= ema < 1 and step, k_max, dead_band >= 0")
    if not math.isfinite(entropy):
        return state
    smoothed = entropy if math.isnan(state.entropy) else ema * state.entropy + (1.0 - ema) * entropy
    error = target - smoothed
    k = state.k
    if abs(error) > dead_band:
        # §5.1 bounded integral controller: widen below target, tighten above, k ∈ [0, k_max]
        k = min(max(k + step * math.copysign(1.0, error), 0.0), k_max)
    return EntropyControllerState(k=k, entropy=smoothed)


@dataclass(frozen=True)
class ClipControllerState:
    """The clip-range controller's state: ``log_epsilon`` = log ε_low (ε_high follows at the configured ratio) and
    ``updates``, the estimates acted on so far (0: still the configured range)."""

    log_epsilon: float
    updates: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> ClipControllerState:
        return cls(log_epsilon=float(state["log_epsilon"]), updates=int(state["updates"]))


def clip_controller_step(
    state: ClipControllerState,
    estimate: float,
    max_step: float,
    bounds: tuple[float, float],
    ema: float = 0.0,
) -> ClipControllerState:
    """One update of the clip-range controller towards ``estimate``, the ε_low at which the measured answers would
    have been clipped at the target fraction (:func:`~trl_loo_gspo.algorithms.clip_stats.epsilon_for_fraction`;
    docs/method.md, "Choosing ε").

    The first finite estimate calibrates: ``log ε ← log ε̂`` (within ``bounds``). Later ones smooth in log space,
    ``log ε ← log ε + clip((1 − ema)·(log ε̂ − log ε), −max_step, max_step)``, within ``bounds = (ε_min, ε_max)``.
    A non-finite estimate (no off-policy answer, or fewer answers moved towards their advantage than the target: no
    ε clips that many) leaves the state unchanged.
    """
    low, high = bounds
    if not (0.0 <= ema < 1.0) or max_step < 0 or not 0.0 < low <= high:
        raise ValueError("need 0 <= ema < 1, max_step >= 0 and 0 < ε_min <= ε_max")
    if not (math.isfinite(estimate) and estimate > 0):
        return state
    wanted = math.log(estimate)
    if state.updates == 0:  # calibration: the first estimate is taken whole
        log_epsilon = wanted
    else:
        # §5.1 clip range from the run: log ε moves (1 − ema) of the way to log ε̂, by at most max_step
        log_epsilon = state.log_epsilon + min(max((1.0 - ema) * (wanted - state.log_epsilon), -max_step), max_step)
    log_epsilon = min(max(log_epsilon, math.log(low)), math.log(high))
    return ClipControllerState(log_epsilon=log_epsilon, updates=state.updates + 1)
