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
    """The clip-range controller's state: ``log_epsilon`` = log ε_low (ε_high follows at the configured ratio),
    ``fraction`` the smoothed clipped fraction last used (NaN before any measurement), ``updates`` the measured steps
    so far."""

    log_epsilon: float
    fraction: float = math.nan
    updates: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> ClipControllerState:
        return cls(
            log_epsilon=float(state["log_epsilon"]), fraction=float(state["fraction"]), updates=int(state["updates"])
        )


def clip_controller_step(
    state: ClipControllerState,
    fraction: float,
    target: float,
    gain: float,
    max_step: float,
    bounds: tuple[float, float],
    ema: float = 0.0,
) -> ClipControllerState:
    """One optimizer step of the clip-range controller (docs/method.md, "Choosing ε: a clip range from the run").

    ``f̂ = ema·f̂_prev + (1 − ema)·fraction`` (the first measurement initialises it), then
    ``log ε ← clip(log ε + clip(gain·(f̂ − f*), −max_step, max_step), log ε_min, log ε_max)``: a clipped fraction
    above the target widens the range, below it narrows it, by at most ``max_step`` in log space per step and never
    outside ``bounds = (ε_min, ε_max)``. A non-finite fraction (a step without off-policy answers) leaves the state
    unchanged.
    """
    low, high = bounds
    if not (0.0 <= ema < 1.0) or gain < 0 or max_step < 0 or not 0.0 < target < 1.0 or not 0.0 < low <= high:
        raise ValueError("need 0 <= ema < 1, gain >= 0, max_step >= 0, 0 < target < 1 and 0 < ε_min <= ε_max")
    if not math.isfinite(fraction):
        return state
    smoothed = fraction if math.isnan(state.fraction) else ema * state.fraction + (1.0 - ema) * fraction
    # §5.1 clip range from the run: log ε += clip(gain·(f̂ − f*), ±max_step), kept inside [log ε_min, log ε_max]
    move = min(max(gain * (smoothed - target), -max_step), max_step)
    log_epsilon = min(max(state.log_epsilon + move, math.log(low)), math.log(high))
    return ClipControllerState(log_epsilon=log_epsilon, fraction=smoothed, updates=state.updates + 1)
