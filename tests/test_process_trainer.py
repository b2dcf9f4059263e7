"""Process feedback in the real trainer (method §6): α = 0 is bit-identical to the outcome-only run, a constant signal
leaves the update unchanged, the per-token advantages equal the hand computation (also under dynamic sampling), the
update equals autograd of the per-token objective, and the safeguards are logged."""

from __future__ import annotations

import copy
import shutil
import string

import pytest
import torch

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import losses as loss_fns
from trl_loo_gspo.algorithms import spans as process
from trl_loo_gspo.demo.multistep import MultiStepTask, MultiStepVerifier, step_spans
from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2

from .helpers import base_kwargs, multistep_operands, multistep_rollout, multistep_variants

operands, variants = multistep_operands, multistep_variants

pytestmark = pytest.mark.slow

ALPHABET = "0123456789+=;"
K = 4


class ConstantSpans(MultiStepVerifier):
    """Real final scores, but every step's span value is 0.5: a constant process signal."""

    def verify(self, completion, **columns):
        result = super().verify(completion, **columns)
        for span in result.spans or []:
            span.value, span.flags = 0.5, ()
        return result


class Capturing(LooGspoTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.captured: list[dict] = []

    def _compute_loss(self, model, inputs):
        self.captured.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return super()._compute_loss(model, inputs)


def make_trainer(tmp_path, verifier, steps=1, **overrides):
    tokenizer = char_tokenizer(ALPHABET)
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=2, seed=0)
    train, _ = MultiStepTask(train_problems=32, validation_problems=4, seed=1).splits()
    kwargs = base_kwargs(str(tmp_path), max_completion_length=24, max_steps=steps, num_generations=K)
    kwargs.update(overrides)
    return Capturing(
        model=model,
        reward_funcs=[verifier],
        args=LooGspoConfig(**kwargs),
        train_dataset=train,
        processing_class=tokenizer,
        rollout_func=multistep_rollout(tokenizer),
    )


def params(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.named_parameters()}


def expected_token_advantages(tokenizer, batch: dict, coef: float) -> tuple[torch.Tensor, list[tuple[float, bool]]]:
    """Hand computation from the decoded answers: a group is the rows of one prompt (TRL shuffles the rows of a
    generation round before splitting it into micro-batches), LOO per step key, one character = one token."""
    texts = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    spans = [step_spans(t, operands(p)) for t, p in zip(texts, prompts, strict=True)]
    out = torch.zeros(batch["completion_ids"].shape, dtype=torch.float64)
    per_span = []  # (process advantage, the answer passed finally)
    for prompt in set(prompts):
        members = [i for i, p in enumerate(prompts) if p == prompt]
        assert len(members) == K
        for i in members:
            for span in spans[i]:
                others = [s.value for j in members if j != i for s in spans[j] if s.key == span.key]
                adv = span.value - sum(others) / len(others) if others else 0.0
                out[i, span.start : span.end] += coef * adv
                per_span.append((adv, texts[i] == variants(*operands(prompts[i]))[0]))
    return out, per_span


def test_alpha_zero_is_bit_identical_and_alpha_positive_is_not(tmp_path):
    plain = make_trainer(tmp_path / "a", MultiStepVerifier(emit_spans=False), steps=2)
    plain.train()
    off = make_trainer(tmp_path / "b", MultiStepVerifier(emit_spans=True), steps=2, process_advantage_coef=0.0)
    off.train()
    assert all("process_advantages" not in batch for batch in off.captured)
    a, b = params(plain), params(off)
    assert all(torch.equal(a[k], b[k]) for k in a)
    on = make_trainer(tmp_path / "c", MultiStepVerifier(emit_spans=True), steps=2, process_advantage_coef=0.5)
    on.train()
    c = params(on)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # the test can fail: α > 0 does change the update


def test_constant_process_signal_leaves_the_update_identical(tmp_path):
    plain = make_trainer(tmp_path / "a", MultiStepVerifier(emit_spans=False), steps=2)
    plain.train()
    constant = make_trainer(tmp_path / "b", ConstantSpans(emit_spans=True), steps=2, process_advantage_coef=0.5)
    constant.train()
    assert all(torch.equal(batch["process_advantages"], torch.zeros_like(batch["process_advantages"]))
               for batch in constant.captured)  # fmt: skip
    a, b = params(plain), params(constant)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_token_advantages_match_the_hand_computation(tmp_path, dynamic_sampling):
    coef = 0.3
    trainer = make_trainer(
        tmp_path, MultiStepVerifier(emit_spans=True), process_advantage_coef=coef, dynamic_sampling=dynamic_sampling
    )
    trainer.train()
    assert len(trainer.captured) == 2  # two micro-batches of 8 rows = 4 groups in one generation round
    batch = {k: torch.cat([b[k] for b in trainer.captured]) for k in ("completion_ids", "prompt_ids")}
    got = torch.cat([b["process_advantages"] for b in trainer.captured]).double()
    expected, per_span = expected_token_advantages(trainer.processing_class, batch, coef)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert got.abs().sum() > 0
    logs = next(h for h in trainer.state.log_history if "process/positive_in_failed" in h)
    failed = [adv for adv, passed in per_span if not passed]
    assert logs["process/positive_in_failed"] == pytest.approx(sum(a > 0 for a in failed) / len(failed))
    assert 0 < logs["process/positive_in_failed"] < 0.5  # the slip's right first step, not the hack's steps
    assert logs["process/flagged/unrelated"] > 0 and "process/corr_final/step" in logs
    assert logs["process/divergence"] == 0.0


def test_the_update_is_autograd_of_the_per_token_objective(tmp_path):
    coef, lr = 0.4, 0.5
    trainer = make_trainer(tmp_path, MultiStepVerifier(emit_spans=True), process_advantage_coef=coef)
    model0 = copy.deepcopy(trainer.model)
    trainer.train()
    reference = copy.deepcopy(trainer.model)
    reference.load_state_dict(model0.state_dict())
    reference.zero_grad()
    total = sum(int(b["completion_mask"].sum()) for b in trainer.captured)
    for batch in trainer.captured:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(reference, ids, attn, batch["completion_ids"].size(1))
        mask = batch["completion_mask"]
        s = loss_fns.sequence_ratio(logps, logps.detach(), mask)
        token_adv = batch["advantages"].unsqueeze(1) + batch["process_advantages"]
        losses = loss_fns.token_response_loss(s, token_adv, trainer.epsilon_low, trainer.epsilon_high)
        ((losses * mask).sum() / total).backward()
    after = dict(trainer.model.named_parameters())
    for name, p0 in model0.named_parameters():
        grad = dict(reference.named_parameters())[name].grad
        if grad is None:
            continue
        torch.testing.assert_close((p0 - after[name]).detach() / lr, grad, rtol=1e-4, atol=1e-6)


def test_process_feedback_needs_a_span_verifier(tmp_path):
    with pytest.raises(ValueError, match="emit_spans=True"):
        make_trainer(tmp_path, MultiStepVerifier(emit_spans=False), process_advantage_coef=0.1)


def test_process_advantages_of_the_four_multistep_answers():
    """The four answers of the trainer tests as one group: the right answer is credited on both steps."""
    rows = [step_spans(t, [12, 34, 56]) for t in variants(12, 34, 56)]
    values, keys = process.span_value_matrix(rows)
    adv = process.process_advantages(values, torch.zeros(K, dtype=torch.long))
    assert keys == ["step:0", "step:1"]
    assert adv[0].tolist() == pytest.approx([1 - 1 / 3, 1 - 0.0])  # others: step 0 right once of 3; step 1 never


def test_safeguards_judge_final_correctness_by_the_verifier_not_the_shaped_reward(tmp_path):
    """With a shaped reward (an overlong penalty lowers every score below 1), the pass rate the safeguards use is
    still the verifier's own: one right answer in each group of four."""
    from trl_loo_gspo.verifiers.shaping import ShapedReward

    shaped = ShapedReward(
        MultiStepVerifier(emit_spans=True), lambda_len=0.5, max_completion_length=24, soft_punish_cache=20
    )
    trainer = make_trainer(tmp_path, shaped, process_advantage_coef=0.3)
    trainer.train()
    logs = next(h for h in trainer.state.log_history if "process/pass_rate" in h)
    assert logs["process/pass_rate"] == pytest.approx(0.25)
    assert logs["reward"] < 0.25  # the shaped rewards are lower: a threshold on them would see no pass at all
    assert logs["process/corr_final/step"] > 0


COQ_ANSWERS = [
    "```coq\nintros n. induction n as [| n IH].\n- reflexivity.\n- simpl. rewrite IH. reflexivity.\n```",
    "```coq\nintros n. induction n as [| n IH].\n- reflexivity.\n- simpl. rewrite IH_wrong. reflexivity.\n```",
    "```coq\nintros n. admit.\n```",
    "no proof",
]


@pytest.mark.skipif(shutil.which("coqc") is None, reason="coqc not installed (apt-get install -y coq); CI installs it")
def test_coq_tactic_spans_reach_the_token_advantages(tmp_path):
    """Real coqc in the trainer: the right proof's first tactic is credited, the spans of the admit answer and of
    the answer without a proof are debited, text outside the tactics gets nothing."""
    from datasets import Dataset

    from trl_loo_gspo.verifiers import CoqVerifier

    tokenizer = char_tokenizer(string.printable)
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=2, seed=0, max_position_embeddings=512)
    rows = [{"prompt": f"prove {i}:", "theorem": "Theorem add_0_r : forall n : nat, n + 0 = n."} for i in range(8)]

    def rollout(prompts, trainer):
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        offset = trainer.accelerator.process_index * len(prompts)
        for row, prompt in enumerate(prompts):
            ids = tokenizer(COQ_ANSWERS[(offset + row) % K], add_special_tokens=False)["input_ids"]
            out["prompt_ids"].append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out["completion_ids"].append(ids + [tokenizer.eos_token_id])
            out["logprobs"].append([0.0] * (len(ids) + 1))
        return out

    kwargs = base_kwargs(str(tmp_path), max_completion_length=96, num_generations=K, process_advantage_coef=1.0)
    kwargs.update(per_device_train_batch_size=4, gradient_accumulation_steps=1)
    trainer = Capturing(
        model=model,
        reward_funcs=[CoqVerifier(emit_spans=True, max_workers=2)],
        args=LooGspoConfig(**kwargs),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    batch = trainer.captured[0]
    texts = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    adv = batch["process_advantages"]
    right, admit, none = (texts.index(COQ_ANSWERS[j]) for j in (0, 2, 3))
    first = COQ_ANSWERS[0].index("intros n.")
    # tactic 0 values: right 1, wrong-later 1, admit 0 (flagged unsound), "no proof" 0 (the whole completion is the
    # script: its one sentence fails): right gets 1 − (1 + 0 + 0) / 3
    assert adv[right, first : first + len("intros n.")].tolist() == pytest.approx([2 / 3] * len("intros n."))
    assert adv[right, :first].abs().sum() == 0  # the fence and text outside the tactics carry no process signal
    for row in (admit, none):  # every span of these answers is debited
        assert (adv[row][adv[row] != 0] < 0).all() and (adv[row] != 0).any()
    logs = next(h for h in trainer.state.log_history if "process/flagged/unsound" in h)
    assert logs["process/flagged/unsound"] > 0
