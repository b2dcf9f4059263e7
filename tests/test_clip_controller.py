"""The clip-range controller as a pure function (docs/method.md, "Choosing ε"): on synthetic ratio streams it reaches
the target band from GSPO's 3e-4 and from a token-scale 0.3, stays inside its bounds, ignores a step without
off-policy answers, and continues the same sequence of ε after a checkpoint round trip."""

import json
import math

import pytest
import torch

from trl_loo_gspo.algorithms.controllers import ClipControllerState, clip_controller_step

TARGET, GAIN, MAX_STEP, EMA, BOUNDS = 0.15, 2.0, 0.5, 0.5, (1e-5, 0.5)


class RatioStream:
    """A synthetic run: each optimizer step, 64 off-policy answers whose |log s_i| is log-normal around ``median``
    (the policy's move per round), moving in the direction of their advantage with probability 0.8; an answer is
    clipped when it moved favourably beyond ε (the loss's clipped branch). Seeded: the same stream every time."""

    def __init__(self, median: float = 6e-3, spread: float = 1.0, seed: int = 0) -> None:
        self.median, self.spread = median, spread
        self.generator = torch.Generator().manual_seed(seed)

    def fraction(self, epsilon: float, answers: int = 64) -> float:
        size = torch.exp(math.log(self.median) + self.spread * torch.randn(answers, generator=self.generator))
        favourable = torch.rand(answers, generator=self.generator) < 0.8
        return float((favourable & (size > epsilon)).double().mean())

    def expected(self, epsilon: float) -> float:
        """The stream's clipped fraction in expectation at ``epsilon``."""
        z = (math.log(epsilon) - math.log(self.median)) / self.spread
        return 0.8 * 0.5 * math.erfc(z / math.sqrt(2))


def run(stream: RatioStream, start: float, steps: int, state: ClipControllerState | None = None):
    state = state or ClipControllerState(log_epsilon=math.log(start))
    epsilons = []
    for _ in range(steps):
        fraction = stream.fraction(math.exp(state.log_epsilon))
        state = clip_controller_step(state, fraction, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
        epsilons.append(math.exp(state.log_epsilon))
    return state, epsilons


@pytest.mark.parametrize("start", [3e-4, 0.3], ids=["from-gspo-3e-4", "from-token-0.3"])
def test_reaches_the_target_band_and_stays_bounded(start):
    stream = RatioStream()
    state, epsilons = run(stream, start, 60)
    assert all(BOUNDS[0] <= e <= BOUNDS[1] for e in epsilons)
    # within 20 steps the range is where the stream clips 10–20% in expectation, and it stays there
    settled = epsilons[20:]
    assert all(0.10 <= stream.expected(e) <= 0.20 for e in settled), [round(stream.expected(e), 3) for e in settled]
    assert 0.10 <= state.fraction <= 0.20
    # from 3e-4 the stream clipped most answers at first: the range had to widen ~20-fold
    assert 3e-3 < settled[-1] < 3e-2


def test_moves_at_most_max_step_per_update_in_log_space():
    stream = RatioStream()
    _, epsilons = run(stream, 3e-4, 10)
    steps = [abs(math.log(b / a)) for a, b in zip([3e-4, *epsilons], epsilons, strict=False)]
    assert max(steps) == pytest.approx(MAX_STEP)  # far from the target: the bounded step
    assert all(step <= MAX_STEP + 1e-12 for step in steps)


def test_never_leaves_its_bounds():
    state = ClipControllerState(log_epsilon=math.log(0.4))
    for _ in range(20):  # everything clipped: widen, up to the upper bound
        state = clip_controller_step(state, 1.0, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
    assert math.exp(state.log_epsilon) == pytest.approx(BOUNDS[1])
    for _ in range(100):  # nothing clipped: narrow, down to the lower bound
        state = clip_controller_step(state, 0.0, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
    assert math.exp(state.log_epsilon) == pytest.approx(BOUNDS[0])


def test_a_step_without_off_policy_answers_leaves_the_state_unchanged():
    stream = RatioStream()
    state, _ = run(stream, 3e-4, 5)
    for missing in (math.nan, math.inf, -math.inf):
        assert clip_controller_step(state, missing, TARGET, GAIN, MAX_STEP, BOUNDS, EMA) == state
    # and the stream goes on from there as if the NaN step had not happened
    after_nan = clip_controller_step(state, math.nan, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
    assert clip_controller_step(after_nan, 0.3, TARGET, GAIN, MAX_STEP, BOUNDS, EMA) == clip_controller_step(
        state, 0.3, TARGET, GAIN, MAX_STEP, BOUNDS, EMA
    )


def test_first_measurement_initialises_the_smoothing_and_the_ema_slows_the_response():
    state = ClipControllerState(log_epsilon=math.log(0.01))
    first = clip_controller_step(state, 0.65, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
    assert first.fraction == 0.65 and first.updates == 1
    assert first.log_epsilon == pytest.approx(math.log(0.01) + 0.5)  # 2 * (0.65 - 0.15) = 1.0, bounded to 0.5
    second = clip_controller_step(first, 0.15, TARGET, GAIN, MAX_STEP, BOUNDS, EMA)
    assert second.fraction == pytest.approx(0.5 * 0.65 + 0.5 * 0.15)  # still above target: keeps widening
    assert second.log_epsilon == pytest.approx(first.log_epsilon + 2.0 * (0.4 - 0.15))


def test_a_checkpoint_round_trip_continues_the_same_sequence():
    uninterrupted, epsilons = run(RatioStream(seed=3), 3e-4, 30)
    stream = RatioStream(seed=3)
    halfway, first = run(stream, 3e-4, 12)
    restored = ClipControllerState.from_dict(json.loads(json.dumps(halfway.to_dict())))  # as in trainer_state.json
    assert restored == halfway
    final, second = run(stream, 3e-4, 18, state=restored)
    assert first + second == epsilons and final == uninterrupted


def test_invalid_settings_are_refused():
    state = ClipControllerState(log_epsilon=math.log(0.01))
    for kwargs in (dict(ema=1.0), dict(gain=-1.0), dict(max_step=-0.1), dict(target=0.0), dict(bounds=(0.1, 0.01))):
        settings = dict(target=TARGET, gain=GAIN, max_step=MAX_STEP, bounds=BOUNDS, ema=EMA) | kwargs
        with pytest.raises(ValueError):
            clip_controller_step(state, 0.2, **settings)
