"""Process feedback (method §6): span signals from verifiers turned into per-token advantages, and the safeguards.

Pure functions over tensors and span lists; the trainer only wires them in. A verifier with ``emit_spans=True``
returns, per completion, :class:`~trl_loo_gspo.verifiers.SpanSignal` s (character spans with an intermediate value in
[0, 1] and a comparison ``key``). Within a prompt's group, spans with the same key are compared with a leave-one-out
baseline — exactly the outcome estimator applied to each key's column of values — and the result is broadcast to the
tokens the span covers:

    Â_{i,t} = Â_i + α · Σ_{spans σ of answer i covering token t} Â^proc_{i,key(σ)}

``α = 0`` (``process_advantage_coef``) is today's objective, on the same code path. Intermediate progress is not
final correctness: :func:`point_biserial`, :func:`positive_in_failed` and :func:`divergence` are the checks the
trainer logs every step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import torch

from .advantages import loo_advantages
from .span_types import SpanSignal


def span_value_matrix(spans_per_row: Sequence[Sequence[SpanSignal] | None]) -> tuple[torch.Tensor, list[str]]:
    """``(values (R, K) float64, keys)``: each row's value for each span key, NaN where the row has no such span.

    A key that occurs several times in one answer keeps the mean of its values.
    """
    keys = sorted({span.key for spans in spans_per_row for span in spans or ()})
    column = {key: j for j, key in enumerate(keys)}
    sums = torch.zeros(len(spans_per_row), len(keys), dtype=torch.float64)
    counts = torch.zeros_like(sums)
    for i, spans in enumerate(spans_per_row):
        for span in spans or ():
            sums[i, column[span.key]] += span.value
            counts[i, column[span.key]] += 1
    values = torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan))
    return values, keys


def process_advantages(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Leave-one-out process advantages per span key (method §6 over the §2.2 estimator), ``(R, K)``.

    Column k: ``Â^proc_{i,k} = v_{i,k} − mean of v_{j,k}`` over the *other* answers j of i's group that have a span
    with key k. Answers without that span get 0, and so does a span no other answer of the group has.
    """
    if values.numel() == 0:
        return values.clone()
    # The estimator is shift-invariant per group: centring each group's column on one of its own values first
    # makes a constant signal give exactly 0 (not a rounding residue), so a constant signal leaves the loss exact.
    filled = torch.where(torch.isnan(values), torch.full_like(values, math.inf), values)
    groups = int(group_ids.max()) + 1
    reference = torch.full((groups, values.size(1)), math.inf, dtype=values.dtype)
    reference = reference.scatter_reduce(0, group_ids.unsqueeze(1).expand_as(filled), filled, reduce="amin")
    centred = values - reference[group_ids].nan_to_num(posinf=0.0)
    # §6 leave-one-out baseline of the span signal, like spans compared across the group
    return torch.stack([loo_advantages(centred[:, k], group_ids) for k in range(values.size(1))], dim=1)


def token_char_ends(decode: Callable[[list[list[int]]], list[str]], ids: Sequence[int]) -> list[int]:
    """``ends[t]`` = length of the text decoded from ``ids[: t + 1]``: token t covers characters
    ``[ends[t-1], ends[t])`` of the completion text. ``decode`` is a batch decoder (e.g. a tokenizer's
    ``batch_decode`` with ``skip_special_tokens=True``, as TRL decodes completions)."""
    if not ids:
        return []
    return [len(text) for text in decode([list(ids[: t + 1]) for t in range(len(ids))])]


def token_char_ends_streaming(backend, ids: Sequence[int], full_text: str) -> list[int] | None:
    """The same ``ends`` as :func:`token_char_ends` in linear time, from ``tokenizers``' ``DecodeStream`` over a fast
    tokenizer's ``backend`` (``tokenizer._tokenizer``); ``None`` when the streamed text is not exactly
    ``full_text`` (e.g. a tokenizer whose full decode cleans up spaces), so that the caller falls back to the exact
    prefix decoding, which costs O(T²): about 0.1 s for one 1,024-token completion on a CPU."""
    try:
        from tokenizers.decoders import DecodeStream
    except ImportError:  # tokenizers < 0.21
        return None
    stream = DecodeStream(skip_special_tokens=True)
    pieces = [stream.step(backend, int(token)) or "" for token in ids]
    if "".join(pieces) != full_text:
        return None
    ends, length = [], 0
    for piece in pieces:
        length += len(piece)
        ends.append(length)
    return ends


def token_advantages(
    spans: Sequence[SpanSignal], advantage_of_key: dict[str, float], char_ends: Sequence[int], length: int
) -> torch.Tensor:
    """``(length,)`` float64: Σ over spans of ``advantage_of_key[span.key]`` on every token overlapping the span.

    Overlapping spans (a function inside a code block) add up; tokens outside every span get 0.
    """
    out = torch.zeros(length, dtype=torch.float64)
    ends = list(char_ends[:length])
    for span in spans:
        value = advantage_of_key.get(span.key, 0.0)
        if value == 0.0 or span.end <= span.start:
            continue
        # Token t covers characters [ends[t-1], ends[t]): the overlapping tokens are one contiguous range (ends is
        # non-decreasing): from the first token ending after span.start to the first token ending at/after span.end.
        first = bisect.bisect_right(ends, span.start)
        last = min(bisect.bisect_left(ends, span.end), len(ends) - 1)  # never into padding past the text
        out[first : last + 1] += value
    return out


def point_biserial(signal: torch.Tensor, passed: torch.Tensor) -> float:
    """Point-biserial correlation between a per-answer signal and final pass/fail (NaN entries dropped).

    It is Pearson's r with a binary variable; NaN when either side is constant or fewer than 3 answers remain.
    """
    keep = ~torch.isnan(signal)
    x, y = signal[keep].double(), passed[keep].double()
    if x.numel() < 3 or x.std() == 0 or y.std() == 0:
        return math.nan
    return float(torch.corrcoef(torch.stack([x, y]))[0, 1])


def positive_in_failed(advantages: torch.Tensor, present: torch.Tensor, passed: torch.Tensor) -> float:
    """Fraction of the spans of finally *failing* answers whose process advantage is positive (NaN if none)."""
    mask = present & ~passed.bool().unsqueeze(1)
    if not mask.any():
        return math.nan
    return float((advantages[mask] > 0).double().mean())


def divergence(signal_history: Sequence[float], pass_history: Sequence[float], window: int, margin: float) -> bool:
    """True when, over the last ``window`` steps, the mean process signal of the second half exceeds the first
    half's by more than ``margin`` while the final pass rate of the second half is lower by more than ``margin``
    (process reward rising while final correctness falls, method §6)."""
    if window < 2 or len(signal_history) < window or len(pass_history) < window:
        return False
    half = window // 2
    sig, fin = list(signal_history)[-window:], list(pass_history)[-window:]

    def mean(values: list[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return sum(values) / len(values) if values else math.nan

    signal_rise = mean(sig[half:]) - mean(sig[:half])
    pass_fall = mean(fin[:half]) - mean(fin[half:])
    return signal_rise > margin and pass_fall > margin
