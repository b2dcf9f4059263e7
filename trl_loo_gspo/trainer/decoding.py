"""A lean decoding loop for evaluation: one prefill per prompt, then a greedy answer and ``samples`` sampled answers
per prompt decoded together, each row dropped from the batch as soon as it has ended.

``model.generate`` with ``num_return_sequences=n`` prefills every prompt n times, concatenates the KV cache of every
row at every step, and keeps computing rows that have already emitted the end of sequence until the longest one in
the batch ends. On the chained-addition study (450 problems x 16 samples + a greedy pass, answers of 8–28 tokens and
a 37-token limit) that made an evaluation cost more than half of a run (``benchmarks/eval_speed.py``).

What is sampled is unchanged: each next token is drawn from the model's softmax at ``temperature`` (top-k and top-p
off, as training samples), greedy takes the argmax; an answer ends at the first end-of-sequence token of the model's
generation config (kept, then padding) or at ``max_new_tokens``. The random draws differ from ``generate``'s (rows
that ended draw nothing), so a seeded evaluation is reproducible but not the same numbers as ``generate`` would give.
:func:`plain_generation` says when this loop applies: a decoder-only model whose generation config asks for no
other logits processing (repetition penalty, banned or forced tokens, minimum length); otherwise callers keep
``model.generate``.
"""

from __future__ import annotations

import inspect

import torch

#: Generation-config fields that make ``generate`` process logits beyond temperature / top-k / top-p; with any of
#: them set (to a non-neutral value) the lean loop would sample something else, so callers use ``generate``.
_NEUTRAL = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "typical_p": (None, 1.0),
    "min_p": (None, 0.0),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
}


def plain_generation(model) -> bool:
    """Whether :func:`decode` samples exactly what ``model.generate`` samples with temperature, top-k 0 and top-p 1
    (and what greedy ``generate`` picks): a decoder-only model, a KV cache, no other logits processing."""
    config = getattr(model, "config", None)
    generation = getattr(model, "generation_config", None)
    if config is None or generation is None or getattr(config, "is_encoder_decoder", False):
        return False
    if not hasattr(model, "forward") or _cache_argument(model) is None or not _takes(model, "logits_to_keep"):
        return False  # (e.g. a PEFT wrapper, whose forward passes **kwargs on: generate handles it)
    return all(getattr(generation, name, None) in neutral for name, neutral in _NEUTRAL.items())


def _cache_argument(model) -> str | None:
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name in ("cache", "past_key_values"):  # (transformers renamed past_key_values to cache in 5.x)
        if name in parameters:
            return name
    return None


def _takes(model, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _eos_ids(model, device) -> torch.Tensor | None:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        return None
    return torch.tensor(eos if isinstance(eos, (list, tuple)) else [eos], device=device)


@torch.no_grad()
def decode(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    pad_token_id: int,
    samples: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    compact_fraction: float = 0.125,
    with_entropy: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor | None] | tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """``(greedy, sampled)`` completion ids for left-padded prompts: ``greedy`` ``[B, L]`` (or ``None``),
    ``sampled`` ``[B * samples, L]`` with the samples of a prompt adjacent (``num_return_sequences`` order; or
    ``None``); ``L`` ≤ ``max_new_tokens`` is the longest answer, shorter ones padded with ``pad_token_id`` after their
    end-of-sequence token. Draws from torch's global generator (callers seed it). Rows that have ended are dropped
    from the batch once they are ``compact_fraction`` of it (one cache copy per compaction).

    ``with_entropy``: also return, third, ``[2, B * samples]`` float64: per sampled answer, the summed entropy (nats)
    of the distribution each of its tokens was drawn from (the softmax at ``temperature``) and its token count (the
    end-of-sequence token included, padding not) — the policy's entropy along its own answers."""
    from transformers import DynamicCache

    if not greedy and not samples:
        return None, None
    if samples and temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampled answers, got {temperature}")
    device = input_ids.device
    prompts = input_ids.size(0)
    per_prompt = int(greedy) + samples
    rows = prompts * per_prompt
    cache_arg = _cache_argument(model)
    eos = _eos_ids(model, device)
    cache = DynamicCache(config=model.config) if "config" in inspect.signature(DynamicCache).parameters else None
    cache = cache if cache is not None else DynamicCache()
    attention_mask = attention_mask.long()
    position = attention_mask.cumsum(-1) - 1
    position = position.masked_fill(attention_mask == 0, 0)  # as generate prepares them (left padding)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position,
        use_cache=True,
        logits_to_keep=1,
        **{cache_arg: cache},
    ).logits[:, -1, :]
    # every answer of a prompt starts from the same prefill: repeat it instead of computing it per answer
    cache.batch_repeat_interleave(per_prompt)
    logits = logits.repeat_interleave(per_prompt, dim=0)
    attention_mask = attention_mask.repeat_interleave(per_prompt, dim=0)
    position = position[:, -1].repeat_interleave(per_prompt, dim=0)
    is_greedy = torch.zeros(per_prompt, dtype=torch.bool, device=device)
    is_greedy[0] = greedy
    is_greedy = is_greedy.repeat(prompts)
    row_ids = torch.arange(rows, device=device)
    alive = torch.ones(rows, dtype=torch.bool, device=device)
    out = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    entropy = torch.zeros(2, rows, dtype=torch.float64, device=device)  # (summed entropy, tokens) per row
    longest = 0
    for step in range(max_new_tokens):
        token = _next_token(logits, is_greedy, temperature)
        out[row_ids[alive], step] = token[alive]
        if with_entropy:
            counted = alive & ~is_greedy
            entropy[0, row_ids[counted]] += _entropy(logits[counted], temperature)
            entropy[1, row_ids[counted]] += 1
        longest = step + 1
        if eos is not None:
            alive &= ~torch.isin(token, eos)
        remaining = int(alive.sum())
        if remaining == 0 or step + 1 == max_new_tokens:
            break
        if alive.numel() - remaining >= compact_fraction * alive.numel():
            keep = alive.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            token, attention_mask, position = token[keep], attention_mask[keep], position[keep]
            row_ids, is_greedy = row_ids[keep], is_greedy[keep]
            alive = torch.ones(keep.numel(), dtype=torch.bool, device=device)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.size(0), 1)], dim=1)
        position = position + 1
        logits = model(
            input_ids=token[:, None],
            attention_mask=attention_mask,
            position_ids=position[:, None],
            use_cache=True,
            logits_to_keep=1,
            **{cache_arg: cache},
        ).logits[:, -1, :]
    out = out[:, :longest].view(prompts, per_prompt, longest)
    greedy_ids = out[:, 0] if greedy else None
    sampled_ids = out[:, int(greedy) :].reshape(prompts * samples, longest) if samples else None
    if with_entropy:
        per_answer = entropy.view(2, prompts, per_prompt)[:, :, int(greedy) :].reshape(2, prompts * samples)
        return greedy_ids, sampled_ids, per_answer
    return greedy_ids, sampled_ids


def _entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy (nats, float64) of ``softmax(logits / temperature)`` per row."""
    log_probs = torch.log_softmax(logits.double() / temperature, dim=-1)
    probs = log_probs.exp()
    return -torch.where(probs > 0, probs * log_probs, torch.zeros_like(probs)).sum(-1)  # (0 · log 0 = 0)


def _next_token(logits: torch.Tensor, is_greedy: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    token = logits.argmax(dim=-1)
    sampled = ~is_greedy
    if sampled.any():
        probs = torch.softmax(logits[sampled] / temperature, dim=-1)
        token[sampled] = torch.multinomial(probs, num_samples=1).squeeze(1)
    return token
