"""The "no clip, outer guard only" policy loss ``response_unclipped`` (docs/method.md §5.1): ℓ_i = −s_i Â_i with
GSPO's sequence ratio after the outer guard, its golden values and gradients, its equality with ``response_clip``
when nothing clips, the config rules that come with it (the guard required, ε and what moves ε refused), the run's
messages, and a real two-step off-policy run."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import aggregation
from trl_loo_gspo.algorithms import losses as loss_fns
from trl_loo_gspo.algorithms.clip_stats import length_edges, step_clip_summary
from trl_loo_gspo.experiment.ablation.runner import clip_record
from trl_loo_gspo.records.card import method_section
from trl_loo_gspo.trainer.clip import WARNING_MIN_ANSWERS, WARNING_WINDOW, ClipControl
from trl_loo_gspo.trainer.entropy import EntropyFeedback
from trl_loo_gspo.trainer.loss import answer_clip_rows
from trl_loo_gspo.trainer.reporting import objective_line, summary_rows
from trl_loo_gspo.trainer.run_plan import ClipControlPlan, EntropyFeedbackPlan, RunPlan

from .helpers import base_kwargs, make_model_and_tokenizer, parity_trainer

F64 = torch.float64
UNCLIPPED = loss_fns.LOSSES["response_unclipped"]


def golden_batch():
    """Five answers, old log-probs 0 (so log s_i is the masked mean of ``logps``), guard c = 0.5.

    log s = [0.2, 0.6 → 0.5 (guard), −0.3, −0.7 → −0.5 (guard), 0 (no valid token)], Â = [1, −2, 0.5, 1.5, 0.25].
    """
    logps = torch.tensor(
        [
            [0.1, 0.3, 9.0],
            [1.0, 0.6, 0.2],
            [-0.3, 9.0, 9.0],
            [-0.9, -0.5, 9.0],
            [9.0, 9.0, 9.0],
        ],
        dtype=F64,
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=F64)
    advantages = torch.tensor([1.0, -2.0, 0.5, 1.5, 0.25], dtype=F64)
    return logps, torch.zeros_like(logps), advantages, mask


def test_golden_values_float64():
    logps, old, advantages, mask = golden_batch()
    out = UNCLIPPED(logps, old, advantages, mask, loss_fns.ClipRange(None, None, 0.5))
    # s = exp(log s after the guard): e^0.2, e^0.5, e^-0.3, e^-0.5, 1; ℓ = −s Â
    s = torch.tensor([1.2214027581601699, 1.6487212707001282, 0.7408182206817179, 0.6065306597126334, 1.0], dtype=F64)
    torch.testing.assert_close(out.ratio, s, rtol=1e-15, atol=0.0)
    expected = torch.tensor(
        [-1.2214027581601699, 3.2974425414002564, -0.37040911034085894, -0.9097959895689501, -0.25], dtype=F64
    )
    torch.testing.assert_close(out.losses, expected, rtol=1e-15, atol=0.0)
    assert out.guard.tolist() == [False, True, False, True, False]
    assert not out.clipped_low.any() and not out.clipped_high.any()
    assert out.token_clipped_low is None and out.token_clipped_high is None
    assert out.process_term is None
    # token-total aggregation: Σ T_i ℓ_i / Σ T_i over the 8 valid tokens
    total = aggregation.agg_loss(
        aggregation.row_losses(out.losses, mask, out.process_term), mask.sum(-1), "token_total", mask.sum()
    )
    hand = (2 * -1.2214027581601699 + 3 * 3.2974425414002564 + -0.37040911034085894 + 2 * -0.9097959895689501) / 8
    assert abs(total.item() - hand) < 1e-15


def test_gradient_is_autograd_of_minus_s_a_where_the_guard_holds_and_zero_where_it_fires():
    logps, old, advantages, mask = golden_batch()
    lengths = mask.sum(-1)
    ours = logps.clone().requires_grad_(True)
    out = UNCLIPPED(ours, old, advantages, mask, loss_fns.ClipRange(None, None, 0.5))
    aggregation.token_total_aggregate(out.losses, lengths).backward()

    reference = logps.clone().requires_grad_(True)  # −s_i Â_i with no guard at all
    s = torch.exp(((reference - old) * mask).sum(-1) / lengths.clamp(min=1.0))
    aggregation.token_total_aggregate(-s * advantages, lengths).backward()

    fired = out.guard
    assert fired.tolist() == [False, True, False, True, False]
    torch.testing.assert_close(ours.grad[~fired], reference.grad[~fired], rtol=1e-14, atol=0.0)
    assert torch.equal(ours.grad[fired], torch.zeros_like(ours.grad[fired]))
    assert reference.grad[fired].abs().sum() > 0  # without the guard those answers would have moved
    # by hand: ∂L/∂log π_{i,t} = −Â_i s_i / Σ T on valid tokens of unguarded answers
    hand = -advantages[0] * math.exp(0.2) / 8
    assert ours.grad[0, :2].tolist() == pytest.approx([hand.item()] * 2, rel=1e-14)
    assert ours.grad[0, 2].item() == 0.0


def test_gradcheck_inside_the_guard():
    gen = torch.Generator().manual_seed(3)
    logps = (torch.randn(3, 4, dtype=F64, generator=gen) * 0.05).requires_grad_(True)
    old = torch.zeros(3, 4, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=F64)
    advantages = torch.tensor([0.5, -1.0, 2.0], dtype=F64)

    def objective(x):
        out = UNCLIPPED(x, old, advantages, mask, loss_fns.ClipRange(None, None, 1.0))
        return aggregation.token_total_aggregate(out.losses, mask.sum(-1))

    assert torch.autograd.gradcheck(objective, (logps,))


def test_equals_response_clip_when_the_range_is_so_wide_nothing_clips():
    """ε_low = 0.99, ε_high = 1e6 with the guard at 1: s_i ∈ [e^-1, e] never reaches [0.01, 1 + 1e6]'s ends."""
    gen = torch.Generator().manual_seed(5)
    logps = torch.randn(6, 5, dtype=F64, generator=gen) * 2.0  # some answers beyond the guard
    old = torch.randn(6, 5, dtype=F64, generator=gen) * 0.1
    mask = (torch.rand(6, 5, generator=gen) > 0.3).to(F64)
    advantages = torch.randn(6, dtype=F64, generator=gen)
    process = torch.randn(6, 5, dtype=F64, generator=gen) * mask

    for process_advantages in (None, process):
        clipped_in = logps.clone().requires_grad_(True)
        unclipped_in = logps.clone().requires_grad_(True)
        wide = loss_fns.LOSSES["response_clip"](
            clipped_in, old, advantages, mask, loss_fns.ClipRange(0.99, 1e6, 1.0), process_advantages
        )
        ours = UNCLIPPED(unclipped_in, old, advantages, mask, loss_fns.ClipRange(None, None, 1.0), process_advantages)
        assert torch.equal(ours.losses, wide.losses) and torch.equal(ours.ratio, wide.ratio)
        assert torch.equal(ours.guard, wide.guard) and ours.guard.any() and not ours.guard.all()
        assert not (wide.clipped_low | wide.clipped_high).any()
        if process_advantages is None:
            assert ours.process_term is None and wide.process_term is None
        else:
            torch.testing.assert_close(ours.process_term, wide.process_term, rtol=1e-15, atol=1e-15)
        for out in (wide, ours):
            rows = aggregation.row_losses(out.losses, mask, out.process_term)
            aggregation.agg_loss(rows, mask.sum(-1), "token_total", mask.sum()).backward()
        torch.testing.assert_close(unclipped_in.grad, clipped_in.grad, rtol=1e-14, atol=1e-15)


def test_process_advantages_are_per_token_advantages_under_the_same_ratio():
    """ℓ_{i,t} = −s_i (Â_i + α Â^proc_{i,t}), so the per-token term ℓ_{i,t} − ℓ_i is −s_i α Â^proc_{i,t} (§6); a batch
    whose process advantages are all 0 takes the outcome-only path (no term at all)."""
    logps, old, advantages, mask = golden_batch()
    clip = loss_fns.ClipRange(None, None, 0.5)
    process = torch.tensor([[0.5, -1.0, 0.0], [2.0, 0.0, 1.0], [0.25, 0.0, 0.0], [0.0] * 3, [0.0] * 3], dtype=F64)
    out = UNCLIPPED(logps, old, advantages, mask, clip, process)
    torch.testing.assert_close(out.process_term, -out.ratio.unsqueeze(1) * process, rtol=1e-15, atol=0.0)
    # answer 0, token 1: −e^0.2 · (−1.0)
    assert out.process_term[0, 1].item() == pytest.approx(1.2214027581601699, rel=1e-15)
    assert UNCLIPPED(logps, old, advantages, mask, clip, torch.zeros_like(process)).process_term is None


def test_the_pure_loss_refuses_to_run_without_the_guard():
    logps, old, advantages, mask = golden_batch()
    with pytest.raises(ValueError, match="log_ratio_clamp"):
        UNCLIPPED(logps, old, advantages, mask, loss_fns.ClipRange(None, None))
    with pytest.raises(ValueError, match="clip range"):  # and the clipped losses refuse a missing range
        loss_fns.LOSSES["response_clip"](logps, old, advantages, mask, loss_fns.ClipRange(None, None, 0.5))


def test_the_clip_figures_count_nothing_clipped_and_no_gradient_where_the_guard_fired():
    """Off-policy (position 1): answers 1 and 3 are clamped by the guard, so of the four answers with Â ≠ 0 and a
    valid token two carried a gradient; none is on a clipped branch."""
    logps, old, advantages, mask = golden_batch()
    out = UNCLIPPED(logps, old, advantages, mask, loss_fns.ClipRange(None, None, 0.5))
    summary = step_clip_summary(answer_clip_rows(out, advantages, mask, position=1), length_edges(3))
    assert summary["clip/offpolicy_answers"] == 4 and summary["clip/offpolicy_fraction"] == 0.0
    assert summary["clip/upper_fraction"] == 0.0 and summary["clip/lower_fraction"] == 0.0
    assert summary["clip/gradient_answers"] == 2 and summary["clip/gradient_tokens"] == 3  # answers 0 (2), 2 (1)


def test_it_is_registered_without_a_clip_range():
    assert "response_unclipped" in loss_fns.LOSSES
    assert loss_fns.UNCLIPPED_LOSSES >= {"response_unclipped"}
    assert not {"response_clip", "token_clip"} & loss_fns.UNCLIPPED_LOSSES


# ------------------------------------------------------------------ config


def make(**kwargs):
    return LooGspoConfig(output_dir="/tmp/loo-gspo-test", use_cpu=True, bf16=False, report_to=[], **kwargs)


def test_the_config_resolves_no_clip_range_and_takes_any_positive_guard():
    objective = make(policy_loss="response_unclipped", log_ratio_clamp=1e-4).objective
    assert (objective.epsilon_low, objective.epsilon_high, objective.has_clip_range) == (None, None, False)
    assert objective.importance_sampling_level == "sequence" and objective.log_ratio_clamp == 1e-4
    assert objective.uses_own_loss and objective.policy_loss == "response_unclipped"
    with pytest.raises(ValueError, match="log_ratio_clamp"):  # the same guard inside GSPO's clip range is refused
        make(log_ratio_clamp=1e-4)
    assert make().objective.has_clip_range


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({}, ("policy_loss='response_unclipped'", "log_ratio_clamp", "unbounded")),
        ({"log_ratio_clamp": 0.0}, ("log_ratio_clamp=0.0",)),
        ({"log_ratio_clamp": -0.2}, ("log_ratio_clamp=-0.2",)),
        ({"log_ratio_clamp": math.inf}, ("log_ratio_clamp=inf",)),
        ({"log_ratio_clamp": math.nan}, ("log_ratio_clamp=nan",)),
        ({"log_ratio_clamp": 0.2, "epsilon": 0.2}, ("epsilon=0.2 does not apply", "response_unclipped")),
        ({"log_ratio_clamp": 0.2, "epsilon_high": 4e-4}, ("epsilon_high=0.0004 does not apply", "response_unclipped")),
        (
            {"log_ratio_clamp": 0.2, "clip_target_fraction": 0.15, "steps_per_generation": 4},
            ("clip_target_fraction=0.15", "response_unclipped"),
        ),
        ({"log_ratio_clamp": 0.2, "entropy_feedback": True}, ("entropy_feedback=True", "response_unclipped")),
        (
            {"log_ratio_clamp": 0.2, "importance_sampling_level": "token"},
            ("policy_loss='response_unclipped' contradicts importance_sampling_level='token'",),
        ),
        ({"log_ratio_clamp": 0.2, "loss_type": "grpo"}, ("policy_loss='response_unclipped' needs our loss",)),
        (
            {"log_ratio_clamp": 0.2, "loss_type": "dapo", "importance_sampling_level": "sequence"},
            ("loss_type='dapo'", "policy_loss='response_unclipped'"),
        ),
    ],
)
def test_the_config_refuses_what_has_no_meaning_without_a_clip_range(kwargs, names):
    with pytest.raises(ValueError) as error:
        make(policy_loss="response_unclipped", gradient_accumulation_steps=1, **kwargs)
    for name in names:
        assert name in str(error.value)


def test_the_run_says_there_is_no_clip_range(tmp_path):
    config = make(policy_loss="response_unclipped", log_ratio_clamp=0.2)
    assert objective_line(config.objective) == (
        "Objective: loss_type=loo_gspo, our loss (response_unclipped, token_total over the global count), "
        "advantages=loo (scale_rewards=none), ratio=sequence, no clip range, log_ratio_clamp=0.2"
    )
    plan = RunPlan.resolve(config)
    section = method_section(plan.flags(), plan.objective)
    assert "no clipping, ℓ_i = −s_i Â_i (no clip range: the outer guard |log s_i| ≤ 0.2 is its only bound" in section
    assert "| `log_ratio_clamp` | `0.2` |" in section and "| `epsilon" not in section


def test_the_clip_control_measures_without_a_range_logs_none_and_never_warns(caplog):
    """Enough off-policy answers, none clipped, for the "clip acts on almost no answer" warning of a clipped loss:
    without a clip range that is the design, so nothing is said; no ε is logged, the summary has none."""
    accelerator = SimpleNamespace(
        device="cpu", pad_across_processes=lambda x, **_: x, gather=lambda x: x, is_main_process=True
    )
    control = ClipControl(ClipControlPlan(steps_per_round=2, max_completion_length=8), None, None, accelerator)
    feedback = EntropyFeedback(EntropyFeedbackPlan())
    answers = WARNING_MIN_ANSWERS // WARNING_WINDOW + 1
    # rows (log s, Â, T, clipped low, clipped high, clipped tokens, position): off-policy, Â ≠ 0, nothing clipped
    rows = torch.tensor([[0.1, 1.0, 3.0, 0.0, 0.0, 0.0, 1.0]] * answers, dtype=F64)
    metrics: dict[str, list] = defaultdict(list)
    with caplog.at_level(logging.WARNING):
        for step in range(WARNING_WINDOW + 1):
            control.close_step(metrics, [rows], step)
            assert control.epsilons(feedback, metrics) == (None, None)
    assert not caplog.records and len(control.window) == WARNING_WINDOW
    assert metrics["clip/offpolicy_fraction"] == [0.0] * (WARNING_WINDOW + 1)
    assert not [name for name in metrics if name.startswith("clip/epsilon")]
    summary = control.summary()
    assert (summary["epsilon_low"], summary["epsilon_high"]) == (None, None)
    assert summary["offpolicy"]["clipped_fraction"] == 0.0


# ------------------------------------------------------------------ the real trainer


@pytest.mark.slow
@pytest.mark.parametrize("clamp", [0.2, 0.05], ids=["guard-wide", "guard-fires"])
def test_two_off_policy_steps_train_with_no_clip_and_report_nothing_clipped(tmp_path, clamp):
    """steps_per_generation = 2: the second step trains on the first step's round (position 1, s_i ≠ 1; |log s_i|
    about 0.1 there, so a guard at 0.05 fires on the off-policy step and takes those answers' gradient)."""
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(
        str(tmp_path),
        policy_loss="response_unclipped",
        log_ratio_clamp=clamp,
        epsilon=None,  # base_kwargs' clip range: refused with this loss
        epsilon_high=None,
        gradient_accumulation_steps=1,
        steps_per_generation=2,
        max_steps=2,
        learning_rate=0.2,
    )
    run = parity_trainer(LooGspoTrainer, model, tokenizer, LooGspoConfig(**kwargs))
    assert (run.epsilon_low, run.epsilon_high) == (None, None)
    before = {k: v.detach().clone() for k, v in run.model.named_parameters()}
    run.train()
    logs = [h for h in run.state.log_history if "loss" in h]
    assert [h["clip/round_position"] for h in logs] == [0, 1]
    for h in logs:
        assert math.isfinite(h["loss"])
        assert h["clip_ratio/region_answers"] == 0.0 and h["clip/signal_fraction"] == 0.0
        assert h["clip/gradient_answers"] > 0
        assert "guard/trigger_fraction" in h
        assert "clip/epsilon_low" not in h and "clip/epsilon_high" not in h  # no range to log
    off = logs[1]
    assert off["clip/offpolicy_answers"] > 0 and off["clip/offpolicy_fraction"] == 0.0
    assert off["ratio/abs_log/p90"] > 0.01  # the ratio moved off 1 (beyond a sequence-scale ε), nothing was clipped
    signal, answers = off["clip/offpolicy_answers"], off["clip/answers"]
    guarded = round(off["guard/trigger_fraction"] * answers)
    if clamp == 0.2:
        assert guarded == 0 and off["clip/gradient_answers"] == signal
    else:  # the guard alone took gradients: of the answers with Â ≠ 0, at least guarded − (answers without Â)
        assert guarded > answers - signal
        assert signal - guarded <= off["clip/gradient_answers"] <= signal - (guarded - (answers - signal))
    assert any(not torch.equal(v, before[k]) for k, v in run.model.named_parameters())
    rows = dict(summary_rows(run.state.log_history, run.run_facts()))
    assert rows["clip range at the end"] == "none (outer guard only)"
    assert rows["clipped off-policy answers (Â ≠ 0)"] == "0.0%"
    record = clip_record(run)
    assert record["offpolicy_clip_fraction"] == 0.0
    assert record["epsilon_low_final"] is None and record["epsilon_high_final"] is None
    json.dumps(record, allow_nan=False)
