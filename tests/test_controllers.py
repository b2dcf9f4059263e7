"""The entropy controller on ε_high as a pure function (method §5.1)."""

import math

import pytest

from trl_loo_gspo.algorithms.controllers import EntropyControllerState
from trl_loo_gspo.algorithms.controllers import entropy_controller_step as step

S0 = EntropyControllerState()


def test_widens_below_target_and_tightens_above():
    s = step(S0, entropy=1.0, target=2.0, step=0.1, k_max=1.0)
    assert s.k == pytest.approx(0.1) and s.entropy == 1.0
    s = step(s, entropy=3.0, target=2.0, step=0.1, k_max=1.0)
    assert s.k == pytest.approx(0.0)


def test_bounds_hold():
    s = S0
    for _ in range(50):
        s = step(s, entropy=0.0, target=1.0, step=0.3, k_max=1.0)
        assert 0.0 <= s.k <= 1.0
    assert s.k == 1.0
    for _ in range(50):
        s = step(s, entropy=5.0, target=1.0, step=0.3, k_max=1.0)
    assert s.k == 0.0


def test_dead_band_holds_k():
    s = EntropyControllerState(k=0.5)
    assert step(s, entropy=1.05, target=1.0, step=0.1, k_max=1.0, dead_band=0.1).k == 0.5
    assert step(s, entropy=1.2, target=1.0, step=0.1, k_max=1.0, dead_band=0.1).k == pytest.approx(0.4)


def test_ema_slows_the_response():
    fast = slow = EntropyControllerState(k=0.5, entropy=3.0)  # was well above target
    fast = step(fast, entropy=1.0, target=2.0, step=0.1, k_max=1.0, ema=0.0)
    slow = step(slow, entropy=1.0, target=2.0, step=0.1, k_max=1.0, ema=0.9)
    assert fast.k == pytest.approx(0.6)  # reacts at once: widen
    assert slow.entropy == pytest.approx(0.9 * 3.0 + 0.1 * 1.0) and slow.k == pytest.approx(0.4)  # still above


def test_first_measurement_initialises_the_ema_and_nan_is_ignored():
    s = step(S0, entropy=1.5, target=1.0, step=0.1, k_max=1.0, ema=0.9)
    assert s.entropy == 1.5
    assert step(s, entropy=math.nan, target=1.0, step=0.1, k_max=1.0) == s


def test_state_round_trip_and_validation():
    s = EntropyControllerState(k=0.25, entropy=1.5)
    assert EntropyControllerState.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError):
        step(S0, 1.0, 1.0, step=0.1, k_max=1.0, ema=1.0)
