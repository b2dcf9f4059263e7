"""Reference KL: the β > 0 term's gradient, and KL logging every N steps with β = 0 (frozen copy or PEFT)."""

import copy

import pytest
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.algorithms import losses as loss_fns
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward

from .helpers import base_kwargs, make_model_and_tokenizer

pytestmark = pytest.mark.slow


def make(tmp_path, peft_config=None, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    model.save_pretrained(tmp_path / "init")  # TRL builds its frozen reference from the model's path
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "init", dtype=torch.float32)
    kwargs = base_kwargs(str(tmp_path), optim="adamw_torch", learning_rate=1e-2, max_steps=4)
    kwargs.update(overrides)
    return LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=addition_dataset(64, seed=6),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def test_kl_term_gradient_matches_autograd_of_k3_with_the_token_total_denominator(tmp_path):
    beta, denominator = 0.3, 37.0
    trainer = make(tmp_path, beta=beta)
    gen = torch.Generator().manual_seed(0)
    rows, length = 5, 6
    completion_mask = (torch.arange(length).unsqueeze(0) < torch.tensor([[6], [3], [1], [5], [0]])).long()
    inputs = {
        "prompt_ids": torch.randint(3, 40, (rows, 3), generator=gen),
        "prompt_mask": torch.ones(rows, 3, dtype=torch.long),
        "completion_ids": torch.randint(3, 40, (rows, length), generator=gen),
        "completion_mask": completion_mask,
        "advantages": torch.zeros(rows),  # the policy term is zero: only the KL term has a gradient
        "ref_per_token_logps": -torch.rand(rows, length, generator=gen) * 4,
    }
    trainer.model.train()
    trainer._accounting.denominator = denominator
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()
    got = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    model = copy.deepcopy(trainer.model)
    model.zero_grad()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, length)
    mask = completion_mask.to(logps.dtype)
    s = loss_fns.sequence_ratio(logps, logps.detach(), mask)  # TRL's use_bias_correction_kl weights KL by the ratio
    expected = (
        beta * (loss_fns.k3_kl(logps, inputs["ref_per_token_logps"]) * s.unsqueeze(1) * mask).sum() / denominator
    )
    expected.backward()
    assert got
    for name, param in model.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(got[name], param.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_kl_logging_with_beta_zero_leaves_the_loss_unchanged_and_logs_every_n_steps(tmp_path):
    plain = make(tmp_path / "plain")
    plain.train()
    logged = make(tmp_path / "logged", reference_kl_logging_steps=2)
    logged.train()
    losses = [h["loss"] for h in plain.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in logged.state.log_history if "loss" in h]
    kl_steps = [h["step"] for h in logged.state.log_history if "kl" in h]
    assert kl_steps == [1, 3]  # measured on the batches of optimizer steps 0 and 2
    first = next(h for h in logged.state.log_history if "kl" in h)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts at the reference
    assert [h for h in logged.state.log_history if "kl" in h][-1]["kl"] > 0.0
    assert not any("kl" in h for h in plain.state.log_history)


def test_kl_logging_cadence_when_rounds_do_not_fall_on_multiples_of_n(tmp_path):
    """S = 4, GA = 1: a generation round every 4 optimizer steps (0, 4, 8, 12), N = 3. The KL is measured on the first
    round at or after each multiple of 3 — steps 0, 4, 8, 12 (log steps 1, 5, 9, 13), not only where a round happens to
    fall on a multiple (0 and 12)."""
    logged = make(
        tmp_path,
        reference_kl_logging_steps=3,
        steps_per_generation=4,
        gradient_accumulation_steps=1,
        per_device_train_batch_size=4,
        max_steps=13,
    )
    logged.train()
    assert [h["step"] for h in logged.state.log_history if "kl" in h] == [1, 5, 9, 13]
    assert logged.reference_kl.due_step == 15


def test_kl_logging_with_lora_uses_the_disabled_adapter(tmp_path):
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    trainer = make(tmp_path, peft_config=lora, reference_kl_logging_steps=1, max_steps=2)
    assert trainer.reference_kl.reference is None  # no second copy: the base model is the reference
    trainer.train()
    kls = [h["kl"] for h in trainer.state.log_history if "kl" in h]
    assert len(kls) == 2 and kls[0] > 0.0  # random (non-zero) LoRA weights: the policy differs from the base
