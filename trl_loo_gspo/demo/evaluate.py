"""Held-out pass rates of a policy on the demo task: greedy (pass@1) and sampled (mean over n samples)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from datasets import Dataset

from ..trainer.decoding import decode, plain_generation
from .task import verify


@torch.no_grad()
def pass_rates(
    model,
    tokenizer,
    dataset: Dataset,
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 6,
    batch_size: int = 512,
    seed: int = 0,
    score: Callable[[str, dict[str, Any]], float] | None = None,
    lean: bool = True,
) -> dict[str, float]:
    """Greedy pass rate and mean sampled pass rate (``samples`` answers per problem at ``temperature``).

    Sampling matches training (top-k and top-p off), and is seeded without touching the caller's RNG state. A plain
    decoder (:func:`~trl_loo_gspo.trainer.decoding.plain_generation`, e.g. the demo's policy) is decoded by the lean
    loop of :mod:`trl_loo_gspo.trainer.decoding` (one prefill per prompt, ended answers dropped), others by
    ``generate`` (as is everything with ``lean=False``: the warm start's stopping check, so that a cached policy
    is rebuilt identically).
    ``score(text, row)`` is the task's final check (default: the addition task's exact answer).
    """
    score = score or (lambda text, row: verify(text, row["answer"]))
    was_training = model.training
    model.eval()
    prompts, rows = list(dataset["prompt"]), [dataset[i] for i in range(len(dataset))]
    greedy = sampled = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            batch_prompts = prompts[start : start + batch_size]
            batch_rows = rows[start : start + batch_size]
            enc = tokenizer(batch_prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            repeated = [r for r in batch_rows for _ in range(samples)]
            greedy_ids, sampled_ids = _completions(
                model, tokenizer, enc, samples, temperature, max_new_tokens, greedy=True, lean=lean
            )
            greedy += _score(tokenizer, greedy_ids, batch_rows, score)
            if samples:
                sampled += _score(tokenizer, sampled_ids, repeated, score) / samples
    model.train(was_training)
    n = max(len(prompts), 1)
    return {"greedy": greedy / n, "sampled": sampled / n if samples else float("nan")}


def _completions(
    model,
    tokenizer,
    enc: dict,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    *,
    greedy: bool,
    lean: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The greedy completion ids of a tokenized batch (``None`` unless ``greedy``) and ``samples`` sampled ones per
    prompt (``None`` without ``samples``). A plain decoder with ``lean`` takes the lean loop (one prefill per prompt,
    greedy and sampled rows together); anything else ``generate``, greedy first and then sampled, the order in
    which the seeded generator is drawn (a cached warm start is rebuilt identically)."""
    if lean and plain_generation(model):
        return decode(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            samples=samples,
            greedy=greedy,
            temperature=temperature,
        )
    start = enc["input_ids"].size(1)
    greedy_ids = sampled_ids = None
    if greedy:
        common = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
        greedy_ids = model.generate(**enc, do_sample=False, **common)[:, start:]
    if samples:
        sampled_ids = _sample(model, tokenizer, enc, samples, temperature, max_new_tokens)[:, start:]
    return greedy_ids, sampled_ids


def _sample(model, tokenizer, enc: dict, samples: int, temperature: float, max_new_tokens: int) -> torch.Tensor:
    """``samples`` answers per prompt, sampled as training samples them (top-k and top-p off)."""
    return model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        num_return_sequences=samples,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )


def _score(tokenizer, completion_ids: torch.Tensor, rows: list[dict], score) -> float:
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return sum(score(text, row) for text, row in zip(texts, rows, strict=True))


@torch.no_grad()
def sample_groups(
    model,
    tokenizer,
    dataset: Dataset,
    num_generations: int,
    max_new_tokens: int,
    score: Callable[[str, dict[str, Any]], float],
    temperature: float = 1.0,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[list[list[float]], list[list[int]]]:
    """Sample ``num_generations`` answers per problem as training does (top-k and top-p off) and return, per
    problem, the answers' scores and their valid lengths in tokens (up to and including the first end-of-sequence
    token, as TRL's completion mask counts them; ``max_new_tokens`` for a truncated answer). Seeded without
    touching the caller's RNG state."""
    was_training = model.training
    model.eval()
    scores: list[list[float]] = []
    lengths: list[list[int]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(dataset), batch_size):
            rows = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
            enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            _, completions = _completions(
                model, tokenizer, enc, num_generations, temperature, max_new_tokens, greedy=False
            )
            texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
            is_eos = completions == tokenizer.eos_token_id
            first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, completions.size(1))
            for i, row in enumerate(rows):
                group = slice(i * num_generations, (i + 1) * num_generations)
                scores.append([score(text, row) for text in texts[group]])
                lengths.append([int(n) for n in first[group]])
    model.train(was_training)
    return scores, lengths
