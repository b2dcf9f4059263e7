"""The lean evaluation decoder (trl_loo_gspo.trainer.decoding): the same answers as ``generate`` where it is
deterministic, the model's own distribution where it samples, ended rows dropped, and ``generate`` kept wherever the
generation config asks for other logits processing."""

from __future__ import annotations

import pytest
import torch

from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2
from trl_loo_gspo.trainer.decoding import decode, plain_generation


def _model_and_prompts(eos_from_greedy: bool = True):
    tokenizer = char_tokenizer("0123456789+=;")
    model = tiny_qwen2(tokenizer, hidden_size=32, seed=3).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # (at its initial scale a random policy repeats one token: give it varied answers)
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    prompts = ["1+2=", "12+34+5=", "7=", "99+1+2+3=", "5+5=", "3+40+1="]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    if eos_from_greedy:  # the end of sequence: the token whose first greedy occurrence varies most between prompts
        model.generation_config.eos_token_id = None
        out = model.generate(**enc, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
        out = out[:, enc["input_ids"].size(1) :]

        def spread(token: int) -> int:
            return len({int((row == token).nonzero()[0]) if (row == token).any() else -1 for row in out})

        model.generation_config.eos_token_id = max(sorted(set(out.flatten().tolist())), key=spread)
    return model, tokenizer, enc


def test_greedy_answers_equal_generate_including_ends_and_padding():
    model, tokenizer, enc = _model_and_prompts()
    want = model.generate(**enc, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
    want = want[:, enc["input_ids"].size(1) :]
    greedy, sampled = decode(
        model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, pad_token_id=tokenizer.pad_token_id
    )
    assert sampled is None
    assert torch.equal(greedy, want)
    assert (want == tokenizer.pad_token_id).any()  # some answers ended early: the ends were exercised


def test_sampled_rows_follow_the_models_distribution_and_greedy_rows_stay_greedy():
    model, tokenizer, enc = _model_and_prompts()
    first = enc["input_ids"][:1], enc["attention_mask"][:1]
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=first[0], attention_mask=first[1]).logits[0, -1], dim=-1)
    torch.manual_seed(0)
    greedy, sampled = decode(model, *first, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id, samples=4000)
    assert sampled.shape[0] == 4000
    freq = torch.bincount(sampled[:, 0], minlength=probs.numel()).float() / 4000
    assert (freq - probs).abs().max() < 0.03  # the first token drawn from the softmax (temperature 1, no top-k/p)
    assert greedy[0, 0] == probs.argmax()
    torch.manual_seed(0)
    _, again = decode(model, *first, max_new_tokens=3, pad_token_id=tokenizer.pad_token_id, samples=4000)
    assert torch.equal(sampled, again)  # seeded by the caller's generator: reproducible


def test_every_sampled_answer_is_padded_after_its_end_or_runs_to_the_limit():
    model, tokenizer, enc = _model_and_prompts()
    eos = model.generation_config.eos_token_id
    torch.manual_seed(1)
    greedy, sampled = decode(
        model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10, pad_token_id=tokenizer.pad_token_id,
        samples=5, compact_fraction=0.0,
    )  # fmt: skip
    assert greedy.shape[0] == 6 and sampled.shape[0] == 30
    for row in sampled:
        ended = (row == eos).nonzero()
        if len(ended):  # after the first end of sequence: padding only
            assert (row[int(ended[0]) + 1 :] == tokenizer.pad_token_id).all()
        else:  # an answer that never ended ran to the limit
            assert sampled.shape[1] == 10


def test_generate_is_kept_when_the_generation_config_processes_logits():
    model, _, _ = _model_and_prompts(eos_from_greedy=False)
    assert plain_generation(model)
    model.generation_config.repetition_penalty = 1.2
    assert not plain_generation(model)
    model.generation_config.repetition_penalty = 1.0
    model.generation_config.min_new_tokens = 3
    assert not plain_generation(model)
    model.generation_config.min_new_tokens = None
    from peft import LoraConfig, get_peft_model

    assert not plain_generation(get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])))  # **kwargs


@pytest.mark.parametrize("samples", [0, 3])
def test_pass_rates_lean_and_generate_agree_on_greedy(samples):
    from datasets import Dataset

    from trl_loo_gspo.demo.evaluate import pass_rates

    model, tokenizer, _ = _model_and_prompts()
    rows = Dataset.from_list([{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(12)])
    score = lambda text, row: float(text[:1] == row["answer"][:1])  # noqa: E731
    lean = pass_rates(model, tokenizer, rows, samples=samples, max_new_tokens=6, score=score)
    plain = pass_rates(model, tokenizer, rows, samples=samples, max_new_tokens=6, score=score, lean=False)
    assert lean["greedy"] == plain["greedy"]
    state = torch.get_rng_state()
    pass_rates(model, tokenizer, rows, samples=samples, max_new_tokens=6, score=score)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is untouched


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_along_sampled_answers_equals_a_teacher_forced_recomputation(temperature):
    model, tokenizer, enc = _model_and_prompts()
    eos, pad = model.generation_config.eos_token_id, tokenizer.pad_token_id
    torch.manual_seed(2)
    greedy, sampled, entropy = decode(
        model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10, pad_token_id=pad, samples=3,
        temperature=temperature, with_entropy=True,
    )  # fmt: skip
    assert entropy.shape == (2, sampled.shape[0]) and entropy.dtype == torch.float64
    prompts = enc["input_ids"].repeat_interleave(3, dim=0)
    mask = enc["attention_mask"].repeat_interleave(3, dim=0)
    for row in range(sampled.shape[0]):  # each answer re-read in one forward pass, its prompt unpadded
        prompt = prompts[row][mask[row].bool()]
        answer = sampled[row]
        ended = (answer == eos).nonzero()
        length = int(ended[0]) + 1 if len(ended) else answer.numel()
        ids = torch.cat([prompt, answer[:length]])[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, prompt.numel() - 1 : prompt.numel() - 1 + length].double()
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        want = -(log_probs.exp() * log_probs).sum()
        assert int(entropy[1, row]) == length
        assert float(entropy[0, row]) == pytest.approx(float(want), rel=1e-4)
    assert len({int(n) for n in entropy[1]}) > 1  # answers of different lengths: the ends were exercised
    again_greedy, again_sampled = decode(
        model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10, pad_token_id=pad, samples=3,
        temperature=temperature,
    )  # fmt: skip
    assert again_sampled.shape == sampled.shape  # without the flag: the two-value return of before
