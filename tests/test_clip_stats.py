"""Where the clip bites (docs/metrics.md): the per-answer rows our loss hands the step, the step's summary and the
run's tally equal a hand computation on controlled batches in float64; the warning follows the measurement."""

import logging
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from tests.test_core import F64, spec_example
from trl_loo_gspo.algorithms.clip_stats import (
    COL,
    clip_rows,
    histogram_quantile,
    length_edges,
    step_clip_summary,
    tally_step,
    tally_summary,
)
from trl_loo_gspo.algorithms.losses import ClipRange
from trl_loo_gspo.trainer.clip import ClipControl, clip_warning
from trl_loo_gspo.trainer.loss import LossStep, own_loss
from trl_loo_gspo.trainer.run_plan import ClipControlPlan

LOG_S = [math.log(1.1), math.log(1.3), math.log(0.9), math.log(0.7)]


def worked_rows(position: int = 2, epsilon_high: float = 0.25):
    """method §4's four answers (s = 1.1, 1.3, 0.9, 0.7; Â = ±2/3; T = 2, 4, 2, 4) through our loss at ε_low 0.2:
    the second answer is clipped at the upper bound (1.3 > 1.25), the fourth at the lower one (0.7 < 0.8)."""
    _, _, _, mask, logps, old_logps = spec_example()
    advantages = torch.tensor([2 / 3, 2 / 3, -2 / 3, -2 / 3], dtype=F64)
    return own_loss(loss_step(ClipRange(0.2, epsilon_high), logps, old_logps, advantages, mask, position)).clip_rows


def loss_step(clip, logps, old_logps, advantages, mask, position, policy_loss="response_clip") -> LossStep:
    """A micro-batch's value (trl_loo_gspo.trainer.loss.LossStep) with no KL, one process, the batch's own count."""
    return LossStep(
        policy_loss=policy_loss,
        loss_aggregation="token_total",
        clip=clip,
        beta=0.0,
        bias_correction_kl=False,
        denominator=float(mask.sum()),
        world_size=1,
        measure_noise=False,
        per_token_logps=logps,
        old_per_token_logps=old_logps,
        advantages=advantages,
        mask=mask,
        entropies=torch.zeros_like(logps),
        round_position=position,
    )


def lerp_quantile(values, q):
    """numpy/torch's default ("linear") quantile, by hand."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


def test_the_loss_hands_the_step_one_row_per_answer_with_its_own_clip_decisions():
    rows = worked_rows()
    expected = torch.tensor(
        [
            [LOG_S[0], 2 / 3, 2, 0, 0, 0, 2],
            [LOG_S[1], 2 / 3, 4, 0, 1, 4, 2],  # upper branch: all 4 tokens carry no gradient
            [LOG_S[2], -2 / 3, 2, 0, 0, 0, 2],
            [LOG_S[3], -2 / 3, 4, 1, 0, 4, 2],  # lower branch
        ],
        dtype=F64,
    )
    torch.testing.assert_close(rows, expected, rtol=0, atol=1e-14)


def test_the_step_summary_equals_a_hand_computation():
    summary = step_clip_summary(worked_rows(), length_edges(6))  # short: T <= 2, mid: 2 < T <= 4, long: T > 4
    hand = {
        "clip/answers": 4.0,
        "clip/round_position": 2.0,
        "clip/upper_fraction": 1 / 2,  # of the Â > 0 answers, one above 1 + ε_high
        "clip/lower_fraction": 1 / 2,
        "clip/signal_fraction": 2 / 4,
        "clip/offpolicy_answers": 4.0,
        "clip/offpolicy_fraction": 2 / 4,
        "clip/gradient_answers": 2.0,  # the first and the third
        "clip/gradient_tokens": 4.0,  # 2 + 2
        "clip/by_length/short": 0.0,
        "clip/by_length/mid": 1.0,
    }
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        hand[f"ratio/log/p{round(q * 100):02d}"] = lerp_quantile(LOG_S, q)
    for q in (0.5, 0.9, 0.99):
        hand[f"ratio/abs_log/p{round(q * 100):02d}"] = lerp_quantile([abs(v) for v in LOG_S], q)
    hand["clip/offpolicy_abs_log_p50"] = lerp_quantile([abs(v) for v in LOG_S], 0.5)
    hand["clip/offpolicy_abs_log_p90"] = lerp_quantile([abs(v) for v in LOG_S], 0.9)
    assert math.isnan(summary.pop("clip/by_length/long"))  # no long answer: nothing to measure, nothing logged
    assert summary.keys() == hand.keys()
    for name, value in hand.items():
        assert summary[name] == pytest.approx(value, rel=0, abs=1e-14), name


def test_padding_rows_are_not_answers_and_the_first_step_of_a_round_is_not_off_policy():
    rows = torch.cat([worked_rows(position=0), torch.full((3, 7), math.nan, dtype=F64)])
    summary = step_clip_summary(rows, length_edges(6))
    assert summary["clip/answers"] == 4 and summary["clip/round_position"] == 0
    assert summary["clip/offpolicy_answers"] == 0 and math.isnan(summary["clip/offpolicy_fraction"])
    zero_length = clip_rows(*(torch.zeros(2, dtype=F64) for _ in range(6)), position=1)
    assert torch.isnan(zero_length).all()  # an answer with no valid token is not a row


def test_a_per_token_clip_counts_its_clipped_tokens_and_an_answer_keeps_its_other_tokens():
    old = torch.zeros(1, 3, dtype=F64)
    logps = torch.log(torch.tensor([[1.5, 1.0, 1.0]], dtype=F64))  # only the first token moved past 1 + 0.2
    mask, advantages = torch.ones(1, 3, dtype=torch.long), torch.tensor([1.0], dtype=F64)
    step = loss_step(ClipRange(0.2, 0.2), logps, old, advantages, mask, 1, policy_loss="token_clip")
    summary = step_clip_summary(own_loss(step).clip_rows, length_edges(9))
    assert summary["clip/upper_fraction"] == 1.0  # an answer with a clipped token counts as clipped
    assert summary["clip/gradient_answers"] == 1.0 and summary["clip/gradient_tokens"] == 2.0  # but 2 tokens learn


def test_the_run_tally_by_position_equals_the_counts_and_its_quantiles_the_histogram():
    tally: dict = {}
    edges = length_edges(6)
    tally_step(tally, worked_rows(position=0, epsilon_high=0.25), edges)
    tally_step(tally, worked_rows(position=1, epsilon_high=0.25), edges)
    tally_step(tally, worked_rows(position=1, epsilon_high=0.35), edges)  # 1.3 < 1.35: only the lower clip
    summary = tally_summary(tally)
    first, second = summary["by_position"]["0"], summary["by_position"]["1"]
    assert (first["steps"], first["answers"], second["steps"], second["answers"]) == (1, 4, 2, 8)
    assert second["clipped_fraction"] == 3 / 8 and second["upper_fraction"] == 1 / 4
    assert second["lower_fraction"] == 2 / 4
    assert second["gradient_answers"] == 5 and second["gradient_tokens"] == (2 + 2) + (2 + 4 + 2)
    assert second["clipped_fraction_by_length"] == {"short": 0.0, "mid": 3 / 4, "long": None}
    assert summary["offpolicy"] == second  # one off-policy position: the pooled figures are its own
    assert summary["all"]["answers"] == 12 and summary["all"]["gradient_answers"] == 7
    # the histogram's median lies within one bin (a factor 10^(1/20)) of the 4th of the 8 |log s_i| (|log 0.9|)
    assert -LOG_S[2] / 1.13 < second["abs_log_ratio_p50"] < -LOG_S[2] * 1.13


def test_histogram_quantiles_stay_within_one_bin_of_the_exact_quantiles():
    values = torch.exp(-6 + 2 * torch.randn(5000, generator=torch.Generator().manual_seed(1), dtype=F64))
    rows = torch.zeros(5000, 7, dtype=F64)
    rows[:, COL["log_ratio"]], rows[:, COL["length"]], rows[:, COL["position"]] = values, 5.0, 1.0
    tally: dict = {}
    tally_step(tally, rows, length_edges(9))
    hist = tally["1"]["abs_log_hist"]
    for q in (0.1, 0.5, 0.9, 0.99):
        exact = float(torch.quantile(values, q))
        assert exact / 1.13 < histogram_quantile(hist, q) < exact * 1.13, q
    assert histogram_quantile([0] * len(hist), 0.5) != histogram_quantile([0] * len(hist), 0.5)  # NaN when empty
    assert histogram_quantile([3] + [0] * (len(hist) - 1), 0.5) == 0.0  # exact zeros (a fresh round in float32)


# ------------------------------------------------------------------------------------------ the warning
def window(fraction: float, answers: float = 48.0, p50: float = 6e-3, p90: float = 2e-2, steps: int = 5):
    return [
        {
            "clip/offpolicy_answers": answers,
            "clip/offpolicy_fraction": fraction,
            "clip/offpolicy_abs_log_p50": p50,
            "clip/offpolicy_abs_log_p90": p90,
        }
        for _ in range(steps)
    ]


def test_the_warning_fires_on_what_the_run_measured():
    most = clip_warning(window(0.62), 3e-4, 4e-4, controlled=False)
    assert most.startswith("The clip zeroes most off-policy answers") and "62% of 240" in most
    assert "[1 - 0.0003, 1 + 0.0004]" in most and "median 6.00e-03" in most and "clip_target_fraction" in most
    none = clip_warning(window(0.002, p90=1e-3), 0.2, 0.28, controlled=False)
    assert none.startswith("The clip acts on almost no off-policy answer") and "p90 0.001" in none


@pytest.mark.parametrize(
    "measured",
    [
        window(0.15),  # a large ε that clips a sensible fraction: nothing to say (the old magnitude rule warned)
        window(0.62, steps=4),  # not yet several steps
        window(0.62, answers=5.0),  # too few answers to tell
    ],
    ids=["sensible-fraction", "too-few-steps", "too-few-answers"],
)
def test_no_warning_without_the_measured_conditions(measured):
    assert clip_warning(measured, 0.2, 0.28, controlled=False) is None


class OneProcess:
    """The accelerator calls ClipControl makes, for one process."""

    device = torch.device("cpu")
    is_main_process = True

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        return tensor

    def gather(self, tensor):
        return tensor


def control(**fields):
    args = dict(
        clip_target_fraction=None,
        clip_controller_max_step=0.5,
        clip_controller_ema=0.5,
        clip_epsilon_bounds=[1e-5, 0.5],
        max_completion_length=6,
        steps_per_generation=4,
        num_iterations=1,
        gradient_accumulation_steps=1,
    )
    args.update(fields)
    return ClipControl(ClipControlPlan.from_args(SimpleNamespace(**args)), 0.2, 0.25, OneProcess())


def test_the_run_warns_once_after_several_measured_steps(caplog):
    clip, metrics = control(), defaultdict(list)
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.clip"):
        for step in range(12):
            clip.close_step(metrics, [worked_rows(position=1)] * 4, step)  # half of the answers clipped: not "most"
    assert not caplog.records and len(metrics["clip/offpolicy_fraction"]) == 12
    clip = control()
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.clip"):
        for step in range(10):  # 3 of 4 answers clipped, 10 steps: one warning, at the fifth
            rows = worked_rows(position=1)
            rows[0, COL["clipped_high"]], rows[0, COL["clipped_tokens"]] = 1.0, 2.0
            clip.close_step(metrics, [rows] * 4, step)
    assert len(caplog.records) == 1 and "zeroes most" in caplog.records[0].getMessage()
    assert "At optimizer step 4" in caplog.records[0].getMessage()


def test_the_controlled_range_keeps_its_asymmetry_and_round_trips():
    clip, metrics = control(clip_target_fraction=0.15), defaultdict(list)
    for step in range(3):
        clip.close_step(metrics, [worked_rows(position=1)], step)  # 50% clipped: widen
    low, high = clip.base
    assert low > 0.2 and high / low == pytest.approx(0.25 / 0.2)
    assert metrics["clip/target_fraction"] == [0.15] * 3 and metrics["clip/measured_fraction"] == [0.5] * 3
    # the margins at ratio 1.25: (1.1 − 1)/1.25, (1.3 − 1)/1.25, 1 − 0.9, 1 − 0.7; ε̂ = the 0.85 quantile of the
    # margins of the round's steps so far (1, 2, then 3 copies); the first calibrates, the next move half-way in log
    margins = [0.1 / 1.25, 0.3 / 1.25, 0.1, 0.3]
    estimates = [lerp_quantile(margins * k, 0.85) for k in (1, 2, 3)]
    assert metrics["clip/epsilon_estimate"] == pytest.approx(estimates, rel=1e-12)
    log_epsilon = math.log(estimates[0])
    for estimate in estimates[1:]:
        log_epsilon += 0.5 * (math.log(estimate) - log_epsilon)
    assert low == pytest.approx(math.exp(log_epsilon), rel=1e-12)
    restored = control(clip_target_fraction=0.15)
    restored.load_state_dict(clip.state_dict())
    assert restored.base == clip.base and restored.summary() == clip.summary()
    for step in range(3, 6):
        clip.close_step(metrics, [worked_rows(position=1)], step)
        restored.close_step(defaultdict(list), [worked_rows(position=1)], step)
    assert restored.base == clip.base


def test_the_ablation_report_prints_where_each_variants_clip_bit():
    from trl_loo_gspo.experiment.ablation.report import clip_section

    def record(fraction: float) -> dict:
        tally: dict = {}
        tally_step(tally, worked_rows(position=0), length_edges(6))
        rows = worked_rows(position=1)
        rows[0, COL["clipped_high"]], rows[0, COL["clipped_tokens"]] = fraction, 2.0 * fraction
        tally_step(tally, rows, length_edges(6))
        return {"clip_stats": tally_summary(tally)}

    lines = clip_section({"full": {0: record(1.0), 1: record(0.0)}, "grpo": {0: {"clip_stats": None}}})
    table = [line for line in lines if line.startswith("| full |")]
    # position 0: 2 of 4 clipped in both seeds; position 1: 3 of 4 and 2 of 4 -> mean 0.625
    assert table[0].startswith("| full | 0 | 0.500 |") and table[1].startswith("| full | 1 | 0.625 | 0.750 | 0.500 |")
    assert not [line for line in lines if line.startswith("| grpo |")]  # TRL's loss keeps no per-answer decisions
    assert clip_section({"grpo": {0: {"clip_stats": None}}}) == []


def test_the_clip_section_names_the_variants_without_a_per_answer_record():
    from trl_loo_gspo.experiment.ablation.report import clip_section

    tally: dict = {}
    tally_step(tally, worked_rows(position=1), length_edges(6))
    full = {0: {"clip_stats": tally_summary(tally)}}
    lines = clip_section({"grpo": {0: {"clip_stats": None}}, "full": full, "cispo": {0: {}, 1: {"clip_stats": None}}})
    assert lines[-1].startswith("Not recorded per answer (TRL computes the loss") and "grpo, cispo;" in lines[-1]
    assert not clip_section({"full": full})[-1].startswith("Not recorded")
