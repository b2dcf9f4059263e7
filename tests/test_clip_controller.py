"""The clip-range controller as pure functions (docs/method.md, "Choosing ε"): the ε at which a target fraction of
the measured answers would be clipped, and the bounded, smoothed move towards it. On synthetic ratio streams it
reaches the target band from GSPO's 3e-4 and from a token-scale 0.3, follows a drifting stream, stays inside its
bounds, ignores a step without off-policy answers, and continues the same sequence of ε after a checkpoint."""

import json
import math

import pytest
import torch

from trl_loo_gspo.algorithms.clip_stats import COL, clip_margins, epsilon_for_fraction
from trl_loo_gspo.algorithms.controllers import ClipControllerState, clip_controller_step

TARGET, MAX_STEP, EMA, BOUNDS, RATIO = 0.15, 0.5, 0.5, (1e-5, 0.5), 4 / 3
F64 = torch.float64


class RatioStream:
    """A synthetic run: each optimizer step, 64 off-policy answers with Â = ±1 whose |log s_i| is log-normal around
    ``median`` (the policy's move per round, ``drift``-fold per step), moving in the direction of their advantage
    with probability 0.8. Seeded: the same stream every time."""

    def __init__(self, median: float = 6e-3, spread: float = 1.0, drift: float = 1.0, seed: int = 0) -> None:
        self.median, self.spread, self.drift = median, spread, drift
        self.generator = torch.Generator().manual_seed(seed)

    def rows(self, answers: int = 64) -> torch.Tensor:
        """The step's :func:`clip_rows` (position 1); the stream's median moves by ``drift`` after each step."""
        size = torch.exp(math.log(self.median) + self.spread * torch.randn(answers, generator=self.generator))
        advantage = torch.where(torch.rand(answers, generator=self.generator) < 0.5, 1.0, -1.0).to(F64)
        favourable = torch.rand(answers, generator=self.generator) < 0.8
        log_s = torch.where(favourable, 1.0, -1.0) * advantage * size.to(F64)
        rows = torch.zeros(answers, len(COL), dtype=F64)
        rows[:, COL["log_ratio"]], rows[:, COL["advantage"]] = log_s, advantage
        rows[:, COL["length"]], rows[:, COL["position"]] = 10.0, 1.0
        self.median *= self.drift
        return rows

    def expected(self, epsilon: float) -> float:
        """The stream's clipped fraction in expectation at ε_low = ``epsilon`` (ε_high = RATIO · ε_low)."""

        def beyond(bound: float) -> float:  # P(|log s| > bound)
            z = (math.log(bound) - math.log(self.median)) / self.spread
            return 0.5 * math.erfc(z / math.sqrt(2))

        return 0.8 * 0.5 * (beyond(math.log1p(RATIO * epsilon)) + beyond(-math.log1p(-epsilon)))


def run(stream: RatioStream, start: float, steps: int, state: ClipControllerState | None = None, window=None):
    """The trainer's loop: each step's margins join the last round's (3 off-policy steps of a 4-step round)."""
    state = state or ClipControllerState(log_epsilon=math.log(start))
    window = [] if window is None else window
    epsilons, expected = [], []
    for _ in range(steps):
        window[:] = [*window[-2:], clip_margins(stream.rows(), RATIO)]
        estimate = epsilon_for_fraction(torch.cat(window), TARGET)
        state = clip_controller_step(state, estimate, MAX_STEP, BOUNDS, EMA)
        epsilons.append(math.exp(state.log_epsilon))
        expected.append(stream.expected(epsilons[-1]))
    return state, epsilons, expected


def test_the_estimate_is_the_epsilon_that_clips_the_target_fraction_of_the_measured_answers():
    log_s = torch.log(torch.tensor([1.1, 1.3, 0.9, 0.7, 1.05], dtype=F64))
    rows = torch.zeros(5, len(COL), dtype=F64)
    rows[:, COL["log_ratio"]], rows[:, COL["length"]], rows[:, COL["position"]] = log_s, 4.0, 1.0
    rows[:, COL["advantage"]] = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0], dtype=F64)
    # Â > 0: clipped while s > 1 + 2 ε (ratio 2) -> margin (s − 1)/2; Â < 0: while s < 1 − ε -> margin 1 − s;
    # the fifth moved against its advantage: never clipped (margin −0.05)
    margins = clip_margins(rows, high_per_low=2.0)
    torch.testing.assert_close(margins, torch.tensor([0.05, 0.15, 0.1, 0.3, -0.05], dtype=F64), rtol=0, atol=1e-12)
    assert clip_margins(rows, high_per_low=2.0, widening=0.02)[:2].tolist() == pytest.approx([0.04, 0.14])
    # 40% of the answers clipped: ε̂ = the 0.6 quantile of the margins (linear interpolation), and it does clip 40%
    estimate = epsilon_for_fraction(margins, 0.4)
    assert estimate == pytest.approx(0.1 + 0.4 * (0.15 - 0.1))
    assert float((margins > estimate).double().mean()) == pytest.approx(0.4)
    rows[0, COL["position"]], rows[1, COL["advantage"]] = 0.0, 0.0  # a fresh round's answer, an Â = 0 answer: out
    assert clip_margins(rows, 2.0).tolist() == pytest.approx([0.1, 0.3, -0.05])
    assert math.isnan(epsilon_for_fraction(torch.tensor([-0.1, -0.2, 0.3], dtype=F64), 0.5))  # only 1 of 3 movable
    assert math.isnan(epsilon_for_fraction(torch.zeros(0, dtype=F64), 0.15))


@pytest.mark.parametrize("start", [3e-4, 0.3], ids=["from-gspo-3e-4", "from-token-0.3"])
def test_reaches_the_target_band_at_once_and_stays_there(start):
    stream = RatioStream()
    _, epsilons, expected = run(stream, start, 40)
    assert all(BOUNDS[0] <= e <= BOUNDS[1] for e in epsilons)
    # the first estimate calibrates: from the first step on, the range clips 10–20% in expectation
    assert all(0.10 <= f <= 0.20 for f in expected), [round(f, 3) for f in expected]
    assert 5e-3 < epsilons[-1] < 3e-2  # from 3e-4: about 50-fold wider


def test_follows_a_drifting_stream():
    stream = RatioStream(median=2e-3, drift=1.05)  # the policy moves 5% further every step: 7-fold over 40 steps
    _, epsilons, expected = run(stream, 3e-4, 40)
    assert epsilons[-1] > 5 * epsilons[0]
    # it trails the drift by the window and the smoothing (about 2 steps: 10% too narrow), so it clips a little more
    assert all(0.10 <= f <= 0.25 for f in expected), [round(f, 3) for f in expected]


def test_after_the_calibration_it_moves_at_most_max_step_and_a_share_of_the_way():
    state = ClipControllerState(log_epsilon=math.log(3e-4))
    state = clip_controller_step(state, 0.02, MAX_STEP, BOUNDS, EMA)  # calibration: the whole way
    assert math.exp(state.log_epsilon) == pytest.approx(0.02) and state.updates == 1
    half = clip_controller_step(state, 0.02 * math.exp(0.6), MAX_STEP, BOUNDS, EMA)
    assert half.log_epsilon - state.log_epsilon == pytest.approx(0.3)  # (1 − ema) of log 1.82
    far = clip_controller_step(state, 0.5, MAX_STEP, BOUNDS, EMA)
    assert far.log_epsilon - state.log_epsilon == pytest.approx(MAX_STEP)  # bounded


def test_never_leaves_its_bounds():
    state = clip_controller_step(ClipControllerState(log_epsilon=math.log(0.01)), 5.0, MAX_STEP, BOUNDS, EMA)
    assert math.exp(state.log_epsilon) == pytest.approx(BOUNDS[1])
    for _ in range(60):
        state = clip_controller_step(state, 1e-9, MAX_STEP, BOUNDS, EMA)
    assert math.exp(state.log_epsilon) == pytest.approx(BOUNDS[0])


def test_a_step_without_an_estimate_leaves_the_state_unchanged():
    stream = RatioStream()
    state, _, _ = run(stream, 3e-4, 5)
    for missing in (math.nan, math.inf, 0.0, -1.0):
        assert clip_controller_step(state, missing, MAX_STEP, BOUNDS, EMA) == state
    start = ClipControllerState(log_epsilon=math.log(3e-4))
    assert clip_controller_step(start, math.nan, MAX_STEP, BOUNDS, EMA) == start  # and it has not calibrated yet


def test_a_checkpoint_round_trip_continues_the_same_sequence():
    uninterrupted, epsilons, _ = run(RatioStream(seed=3, drift=1.02), 3e-4, 30)
    stream = RatioStream(seed=3, drift=1.02)
    window: list = []
    halfway, first, _ = run(stream, 3e-4, 12, window=window)
    restored = ClipControllerState.from_dict(json.loads(json.dumps(halfway.to_dict())))  # as in trainer_state.json
    assert restored == halfway
    window = [torch.tensor(m, dtype=F64) for m in json.loads(json.dumps([w.tolist() for w in window]))]
    final, second, _ = run(stream, 3e-4, 18, state=restored, window=window)
    assert first + second == epsilons and final == uninterrupted


def test_invalid_settings_are_refused():
    state = ClipControllerState(log_epsilon=math.log(0.01))
    for kwargs in (dict(ema=1.0), dict(max_step=-0.1), dict(bounds=(0.1, 0.01)), dict(bounds=(0.0, 0.1))):
        settings = dict(max_step=MAX_STEP, bounds=BOUNDS, ema=EMA) | kwargs
        with pytest.raises(ValueError):
            clip_controller_step(state, 0.2, **settings)
