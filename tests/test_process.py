"""Process feedback, pure parts (method §6): span values, leave-one-out process advantages, token mapping, the
per-token loss and its gradient, the safeguards, and the multi-step task's spans and hack detectors."""

from __future__ import annotations

import math

import pytest
import torch

from trl_loo_gspo.algorithms import losses as loss_fns
from trl_loo_gspo.algorithms import spans as process
from trl_loo_gspo.demo.multistep import MultiStepTask, MultiStepVerifier, final_score, parse_steps, step_spans
from trl_loo_gspo.verifiers import SpanSignal

F64 = torch.float64


def spans_of(*values_by_key: dict[str, float]) -> list[list[SpanSignal]]:
    return [[SpanSignal(0, 1, v, k.split(":")[0], k) for k, v in row.items()] for row in values_by_key]


def test_span_value_matrix_aligns_keys_and_averages_repeats():
    rows = spans_of({"step:0": 1.0, "step:1": 0.0}, {"step:0": 0.0}, {})
    rows[1].append(SpanSignal(2, 3, 1.0, "step", "step:0"))  # the same key twice: its mean
    values, keys = process.span_value_matrix([*rows, None])
    assert keys == ["step:0", "step:1"]
    expected = torch.tensor([[1.0, 0.0], [0.5, math.nan], [math.nan, math.nan], [math.nan, math.nan]], dtype=F64)
    torch.testing.assert_close(values, expected, equal_nan=True)


def test_process_advantages_leave_one_out_per_key_golden():
    # group 0: three answers; step:0 values 1, 0, 1; step:1 only in the first two (1, 0). group 1: one answer.
    values = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, math.nan], [1.0, 1.0]], dtype=F64)
    groups = torch.tensor([0, 0, 0, 1])
    adv = process.process_advantages(values, groups)
    expected = torch.tensor([[1 - 0.5, 1 - 0.0], [0 - 1.0, 0 - 1.0], [1 - 0.5, 0.0], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)


def test_constant_signal_gives_exactly_zero_process_advantage():
    values = torch.full((6, 3), 0.7, dtype=F64)
    values[5, 2] = math.nan
    adv = process.process_advantages(values, torch.tensor([0, 0, 0, 1, 1, 1]))
    assert torch.equal(adv, torch.zeros_like(adv))  # exactly: not a rounding residue (1e-16 would change the loss)
    shifted = process.process_advantages(values + torch.tensor([[0.1], [0.1], [0.1], [0.0], [0.0], [0.0]]),
                                         torch.tensor([0, 0, 0, 1, 1, 1]))  # fmt: skip
    assert torch.equal(shifted, torch.zeros_like(adv))


def test_token_char_ends_and_token_advantages():
    pieces = {1: "ab", 2: "c", 3: ";", 4: "de"}  # multi-character tokens

    def decode(batch):
        return ["".join(pieces[i] for i in ids) for ids in batch]

    ends = process.token_char_ends(decode, [1, 2, 3, 4])
    assert ends == [2, 3, 4, 6]
    spans = [SpanSignal(0, 3, 1.0, "step", "step:0"), SpanSignal(4, 6, 0.0, "step", "step:1"),
             SpanSignal(1, 5, 1.0, "block", "block")]  # fmt: skip
    adv = process.token_advantages(spans, {"step:0": 0.5, "step:1": -1.0, "block": 0.25}, ends, length=6)
    # token 0 "ab" [0,2): step:0 + block (overlaps [1,5)); token 1 "c": step:0 + block; token 2 ";": block;
    # token 3 "de" [4,6): step:1 + block; tokens 4, 5 are padding
    torch.testing.assert_close(adv, torch.tensor([0.75, 0.75, 0.25, -0.75, 0.0, 0.0], dtype=F64))
    beyond = process.token_advantages([SpanSignal(4, 9, 1.0, "x")], {"x": 1.0}, ends, length=6)
    assert beyond.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]  # a span past the text stops at its last token


def test_token_response_loss_with_constant_token_advantages_is_the_response_loss_exactly():
    s = torch.tensor([0.9, 1.0002, 1.3, 0.99999], dtype=F64)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=F64)
    token = loss_fns.token_response_loss(s, adv.unsqueeze(1).expand(4, 5), 3e-4, 4e-4)
    assert torch.equal(token, loss_fns.response_loss(s, adv, 3e-4, 4e-4).unsqueeze(1).expand(4, 5))


def test_per_token_objective_gradient_matches_the_hand_formula():
    torch.manual_seed(0)
    eps_low, eps_high = 0.05, 0.08
    log_s = torch.tensor([-0.2, 0.01, 0.15, 0.0], dtype=F64, requires_grad=True)
    adv = torch.randn(4, 6, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=F64)
    n = mask.sum()

    def objective(log_s):
        return (loss_fns.token_response_loss(torch.exp(log_s), adv, eps_low, eps_high) * mask).sum() / n

    objective(log_s).backward()
    s = torch.exp(log_s.detach()).unsqueeze(1)
    clipped_branch = ((s < 1 - eps_low) & (adv < 0)) | ((s > 1 + eps_high) & (adv > 0))
    # ∂L/∂log s_i = s_i · Σ_t m_it · (−Â_it) · [unclipped_t] / N
    hand = (s.squeeze(1) * (-(adv * mask * (~clipped_branch).to(F64)).sum(1))) / n
    torch.testing.assert_close(log_s.grad, hand, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(objective, (log_s.detach().clone().requires_grad_(True),))


def test_point_biserial_positive_in_failed_and_divergence():
    signal = torch.tensor([1.0, 0.9, 0.2, 0.1, math.nan], dtype=F64)
    passed = torch.tensor([True, True, False, False, True])
    x, y = signal[:4], passed[:4].to(F64)
    pearson = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()).norm() * (y - y.mean()).norm()))
    assert process.point_biserial(signal, passed) == pytest.approx(pearson, abs=1e-12)
    assert math.isnan(process.point_biserial(signal, torch.ones(5, dtype=torch.bool)))  # constant outcome

    adv = torch.tensor([[0.5, -0.2], [0.3, 0.0], [-0.1, 0.4]], dtype=F64)
    present = torch.tensor([[True, True], [True, False], [True, True]])
    ok = torch.tensor([True, False, False])
    assert process.positive_in_failed(adv, present, ok) == pytest.approx(2 / 3)  # failing rows: 0.3 | -0.1, 0.4

    rising, falling = [0.1 * i for i in range(10)], [0.9 - 0.05 * i for i in range(10)]
    assert process.divergence(rising, falling, window=10, margin=0.02)
    assert not process.divergence(rising, list(reversed(falling)), window=10, margin=0.02)
    assert not process.divergence(rising[:5], falling[:5], window=10, margin=0.02)  # not enough history


def test_multistep_task_split_and_solutions():
    task = MultiStepTask(train_problems=300, validation_problems=50, seed=3)
    train, validation = task.splits()
    assert len(train) == 300 and len(validation) == 50
    multisets = lambda ds: {tuple(sorted(r)) for r in ds["operands"]}  # noqa: E731
    assert not multisets(train) & multisets(validation)
    row = train[0]
    assert final_score(row["solution"], row["answer"]) == 1.0
    assert row["prompt"] == "+".join(map(str, row["operands"])) + "="
    assert len(row["solution"]) + 1 <= task.max_new_tokens


def test_multistep_verifier_final_and_spans():
    verifier = MultiStepVerifier(emit_spans=True)
    ops, answer = [12, 34, 56], "102"
    right = verifier.verify("12+34=46;46+56=102", answer=answer, operands=ops)
    assert right.score == 1.0 and [s.value for s in right.spans] == [1.0, 1.0]
    assert [("12+34=46;46+56=102"[s.start : s.end]) for s in right.spans] == ["12+34=46", "46+56=102"]
    slip = verifier.verify("12+34=46;46+56=103", answer=answer, operands=ops)
    assert slip.score == 0.0 and [s.value for s in slip.spans] == [1.0, 0.0]
    chained_wrong = verifier.verify("12+34=45;45+56=101", answer=answer, operands=ops)
    # step 1 is right arithmetic but builds on a wrong result: 45 is not an available number
    assert [s.value for s in chained_wrong.spans] == [0.0, 0.0] and chained_wrong.spans[1].flags == ("unrelated",)
    assert verifier.verify("102", answer=answer, operands=ops).score == 1.0  # the final check reads the answer
    assert verifier.verify("12+34=46;garbage", answer=answer, operands=ops).spans == []
    assert parse_steps("1+2=3;") is None
    assert MultiStepVerifier().verify("12+34=46", answer=answer, operands=ops).spans is None


def test_hack_detectors_flag_unrelated_and_trivial_steps():
    ops = [12, 34, 56]
    unrelated = step_spans("1+1=2;2+2=4", ops)
    assert [s.flags for s in unrelated] == [("unrelated",), ("unrelated",)] and all(s.value == 0 for s in unrelated)
    padded = step_spans("12+0=12;12+34=46;12+34=46;46+56=102", ops)
    assert [s.value for s in padded] == [0.0, 1.0, 0.0, 1.0]
    assert "trivial" in padded[0].flags and padded[2].flags == ("trivial",)  # x+0, and a repeated step
    assert MultiStepVerifier().hack_score("12+0=12;12+34=46;12+34=46;46+56=102", operands=ops) == 0.5


def test_a_hacked_answer_gets_no_positive_process_advantage():
    """True but unrelated steps next to honest answers of the same group: every hacked span's advantage ≤ 0."""
    verifier = MultiStepVerifier(emit_spans=True)
    ops, answer = [12, 34, 56], "102"
    completions = ["12+34=46;46+56=102", "12+34=46;46+56=103", "12+34=45;45+56=101", "1+1=2;2+2=4;4+4=8"]
    spans = [verifier.verify(c, answer=answer, operands=ops).spans for c in completions]
    values, keys = process.span_value_matrix(spans)
    adv = process.process_advantages(values, torch.zeros(4, dtype=torch.long))
    hacked = adv[3][~torch.isnan(values[3])]
    assert hacked.numel() == 3 and (hacked <= 0).all()
    assert adv[3, keys.index("step:0")] == pytest.approx(0 - 2 / 3)  # others' step 0: 1, 1, 0
    assert adv[0, keys.index("step:1")] > 0  # the honest right step is credited


def test_streamed_char_ends_equal_prefix_decoding_or_fall_back():
    import string

    from trl_loo_gspo.demo.tiny import char_tokenizer

    tokenizer = char_tokenizer(string.printable)
    ids = tokenizer("12+34=46; (x) ok", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def decode(batch):
        return tokenizer.batch_decode(batch, skip_special_tokens=True)

    full = decode([ids])[0]
    streamed = process.token_char_ends_streaming(tokenizer._tokenizer, ids, full)
    assert streamed == process.token_char_ends(decode, ids)  # the EOS adds no character
    assert streamed[-1] == streamed[-2] == len(full)
    assert process.token_char_ends_streaming(tokenizer._tokenizer, ids, full + " ") is None  # mismatch: fall back


def test_quadratic_span_mapping_fallback_warns_once():
    """A tokenizer that cannot be streamed makes span mapping decode every prefix (O(T²)): say so, once."""
    import warnings

    from trl_loo_gspo.trainer.process import ProcessFeedback

    host = object.__new__(ProcessFeedback)
    host.processing_class = object()  # no fast backend
    host._warned_quadratic_spans = False

    def decode(batch):
        return ["".join(str(i) for i in ids) for ids in batch]

    with pytest.warns(UserWarning, match="O\\(T²\\)"):
        assert host._char_ends(decode, [1, 2, 3]) == [1, 2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert host._char_ends(decode, [4, 5]) == [1, 2]
