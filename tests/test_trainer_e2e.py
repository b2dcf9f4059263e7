"""End-to-end: the real trainer (real sampling with `generate`) on a tiny local model, with and without LoRA, plus
the optional terms (reference KL, vLLM importance-sampling weights, outer guard) and checkpointed counters."""

import pytest
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import losses as loss_fns
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward

from .helpers import base_kwargs, make_model_and_tokenizer

pytestmark = pytest.mark.slow

METRICS = [
    "clip_ratio/low_answers",
    "clip_ratio/high_tokens",
    "ratio/mean",
    "ratio/min",
    "ratio/max",
    "advantages/mean",
    "advantages/std",
    "groups/frac_with_signal",
    "tokens/generated",
    "tokens/generated_total",
    "tokens/effective",
    "tokens/effective_total",
    "tokens/loss_denominator",
    "completions/clipped_ratio",
    "timing/generate_score_s",
    "timing/update_s",
    "entropy",
]


def make_trainer(tmp_path, peft_config=None, eval_dataset=None, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    if overrides.get("beta"):
        # TRL builds the frozen reference from the model's path: give the local model one.
        model.save_pretrained(tmp_path / "init")
        model = AutoModelForCausalLM.from_pretrained(tmp_path / "init", dtype=torch.float32)
    kwargs = base_kwargs(
        str(tmp_path),
        optim="adamw_torch",
        learning_rate=1e-3,
        max_grad_norm=1.0,
        max_steps=3,
        temperature=1.0,
    )
    kwargs.update(overrides)
    return LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=addition_dataset(64, seed=2),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )


@pytest.mark.parametrize("use_lora", [False, True], ids=["full", "lora"])
def test_train_a_few_steps(tmp_path, use_lora):
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]) if use_lora else None
    trainer = make_trainer(tmp_path, peft_config=peft_config, num_iterations=2)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3
    for name in METRICS:
        assert name in logs[-1], name
    assert logs[-1]["tokens/generated_total"] >= logs[-1]["tokens/generated"] > 0
    assert logs[0]["groups/frac_with_signal"] > 0  # the reward gave the groups something to compare
    changed = [k for k, v in trainer.model.named_parameters() if v.requires_grad and not torch.equal(v, before[k])]
    if use_lora:
        assert changed and all("lora_" in k for k in changed)
    else:
        assert changed
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in logs)


def test_evaluation_uses_the_same_loss_and_logs_eval_metrics(tmp_path):
    trainer = make_trainer(
        tmp_path,
        eval_dataset=addition_dataset(8, seed=99),
        max_steps=2,
        eval_strategy="steps",
        eval_steps=2,
        per_device_eval_batch_size=8,
    )
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert evals and "eval_ratio/mean" in evals[0] and "eval_groups/frac_with_signal" in evals[0]
    assert torch.isfinite(torch.tensor(evals[0]["eval_loss"]))


def test_reference_kl_term_and_metric(tmp_path):
    trainer = make_trainer(tmp_path, beta=0.05, max_steps=2)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all("kl" in h for h in logs)
    assert logs[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts at the reference
    assert logs[-1]["kl"] > 0.0


def fixed_inputs(trainer, rows=6, length=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    vocab = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (rows, 3), generator=gen)
    completion_ids = torch.randint(3, vocab, (rows, length), generator=gen)
    lengths = torch.tensor([5, 1, 3, 0, 4, 2])[:rows]
    completion_mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([0.5, -1.0, 2.0, 1.0, -0.5, 0.25])[:rows],
        "old_per_token_logps": -torch.rand(rows, length, generator=gen) * 3,
    }


def test_compute_loss_with_kl_and_vllm_importance_weights_matches_hand_formula(tmp_path):
    trainer = make_trainer(tmp_path, beta=0.1, epsilon=0.2, epsilon_high=0.3)
    inputs = fixed_inputs(trainer)
    rho = torch.rand(6, 5, generator=torch.Generator().manual_seed(5)) + 0.5
    inputs["importance_sampling_ratio"] = rho
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            5,
        )
    inputs["ref_per_token_logps"] = logps + 0.3  # a reference that differs from the policy
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer._accounting.denominator = 40.0  # the step's global token count (set at the step's first micro-batch)
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)

    mask = inputs["completion_mask"].double()
    s = loss_fns.sequence_ratio(logps.double(), inputs["old_per_token_logps"].double(), mask)
    ell = loss_fns.response_loss(s, inputs["advantages"].double(), 0.2, 0.3)
    kl = loss_fns.k3_kl(logps.double(), inputs["ref_per_token_logps"].double())
    assert trainer.args.use_bias_correction_kl  # TRL's default: the KL term is weighted by the sequence ratio
    kl = kl * s.unsqueeze(1)
    expected = ((ell.unsqueeze(1) * rho.double() + 0.1 * kl) * mask).sum() / 40.0
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_outer_guard_clamps_and_reports(tmp_path):
    trainer = make_trainer(tmp_path, epsilon=0.2, epsilon_high=0.3, log_ratio_clamp=0.5)
    inputs = fixed_inputs(trainer)
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] - 10.0  # huge ratios: the guard must fire
    inputs["old_per_token_logps"][4] = float("nan")  # a non-finite log-ratio is clamped and counted too
    trainer._accounting.denominator = 15.0
    trainer.model.train()
    trainer._accounting.stats.zero_()
    loss = trainer._compute_loss(trainer.model, inputs)
    assert torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    # every valid answer fired (5 of them: the row with no valid token does not count)
    from trl_loo_gspo.algorithms.step_accounting import IDX

    assert trainer._accounting.stats[IDX["guard_answers"]].item() == 5
    assert trainer._accounting.stats[IDX["answers"]].item() == 5


def test_token_counters_survive_a_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train()
    total = trainer.generated_tokens_total
    assert total > 0
    resumed = make_trainer(tmp_path, max_steps=3, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.generated_tokens_total > total
    first_log = [h for h in resumed.state.log_history if "tokens/generated_total" in h][-1]
    assert first_log["tokens/generated_total"] == resumed.generated_tokens_total


def test_model_card_and_tags(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=1)
    # TRL tags the model with the trainer's tag names; the Hub card carries them
    assert {"trl", "trl-loo-gspo", "rlvr"} <= set(trainer.model.model_tags)
    assert trainer.objective.loss_type == "loo_gspo"
