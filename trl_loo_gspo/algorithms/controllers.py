"""Entropy feedback on the upper clip bound (method §5.1): a bounded integral controller, as pure functions.

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
