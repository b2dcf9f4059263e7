"""A tiny policy and task built locally, never downloaded: for tests, the demo and benchmarks.

* :func:`char_tokenizer`: a character-level ``PreTrainedTokenizerFast`` (``tokenizers`` WordLevel over single
  characters, left padding, pad/eos set).
* :func:`tiny_qwen2`: a small Qwen2 causal LM from a config (random weights, seeded).
* :func:`addition_dataset`: ``a+b=`` prompts with the sum in ``answer`` (the demo's exact verifier is
  :mod:`trl_loo_gspo.demo.task`).
"""

from __future__ import annotations

import random

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
DEFAULT_ALPHABET = "0123456789+-*=() ,;.?abcdefghijklmnopqrstuvwxyz"


def char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per character of ``alphabet``, plus ``<pad>``, ``<eos>``, ``<unk>``."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for char in dict.fromkeys(alphabet):
        vocab[char] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    return tokenizer


def tiny_qwen2(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    seed: int = 0,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 128,
) -> Qwen2ForCausalLM:
    """A small Qwen2 model with seeded random weights, sized for CPU (~100k parameters at the defaults).

    ``intermediate_size`` defaults to ``2 * hidden_size``.
    """
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def addition_dataset(num_examples: int, max_operand: int = 99, seed: int = 0) -> Dataset:
    """``a+b=`` prompts (plain text) with the exact sum in the ``answer`` column."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return Dataset.from_list(rows)


def leading_digit_reward(completions: list, answer: list[str], **_: object) -> list[float]:
    """1.0 when the completion starts with the answer's first digit: a dense-enough signal for an untrained model."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(text.strip()[:1] == str(ans)[:1]) for text, ans in zip(texts, answer, strict=True)]


def digit_fraction_reward(completions: list, **_: object) -> list[float]:
    """Fraction of digit characters in the completion: a dense shaping signal for an untrained model."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in text) / max(len(text), 1) for text in texts]
