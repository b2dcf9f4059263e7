"""Where the clip bites (docs/method.md, "Choosing ε: where the clip bites"): per-answer rows of one optimizer step,
their summary, and the run's tally by position inside the generation round. Pure functions over tensors; the trainer
gathers the rows of every process and micro-batch and logs the summary (docs/metrics.md, "Where the clip bites").

A *position* is the number of optimizer steps between the answer's generation round and the step that trains on it:
0 on the first step of a round (the weights that computed the old log-probabilities: ``s_i = 1`` up to numerical
noise), 1, 2, … on the later steps of the same round (*off-policy* answers: the only ones the clip can act on).
An answer *carries a gradient* when ``Â_i ≠ 0`` and not all of its valid tokens are on a clipped (constant) branch
(with a response-level ratio, an answer the §5.1 outer guard clamped is constant too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

#: Columns of :func:`clip_rows` (one row per answer; NaN rows are not answers).
ROW_COLUMNS = ("log_ratio", "advantage", "length", "clipped_low", "clipped_high", "clipped_tokens", "position")
COL = {name: i for i, name in enumerate(ROW_COLUMNS)}
#: Names of the answer-length bins: thirds of ``max_completion_length`` (:func:`length_edges`).
LENGTH_BINS = ("short", "mid", "long")
#: Quantiles logged per step (docs/metrics.md).
SIGNED_QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)
ABS_QUANTILES = (0.5, 0.9, 0.99)


def length_edges(max_completion_length: int) -> tuple[float, float]:
    """Upper edges of the short and mid bins: answers of ``T ≤ L/3`` tokens are short, ``> 2L/3`` long."""
    return max_completion_length / 3.0, 2.0 * max_completion_length / 3.0


def clip_rows(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    lengths: torch.Tensor,
    clipped_low: torch.Tensor,
    clipped_high: torch.Tensor,
    clipped_tokens: torch.Tensor,
    position: int,
) -> torch.Tensor:
    """``(N, 7)`` float64 rows (:data:`ROW_COLUMNS`) of one micro-batch; rows without a valid token are NaN (no host
    sync: masked, not indexed).

    ``log_ratio``: the log of the ratio the loss clipped (``log s_i``); ``clipped_low`` / ``clipped_high``: the
    loss's own decisions (an answer with a clipped token, for a loss that clips per token); ``clipped_tokens``: the
    answer's valid tokens on a constant (zero-gradient) branch (``T_i`` or 0 for a response-level ratio: clipped, or
    clamped by the outer guard); ``position``: the step's position inside the answers' generation round."""
    valid = lengths > 0
    columns = [
        log_ratio.detach(),
        advantages.detach(),
        lengths,
        clipped_low,
        clipped_high,
        clipped_tokens,
        torch.full_like(lengths, position, dtype=torch.float64),
    ]
    rows = torch.stack([c.to(torch.float64) for c in columns], dim=1)
    return torch.where(valid.unsqueeze(1), rows, torch.full_like(rows, math.nan))


def _quantiles(values: torch.Tensor, qs: Sequence[float]) -> list[float]:
    if values.numel() == 0:
        return [math.nan] * len(qs)
    return torch.quantile(values, torch.tensor(qs, dtype=values.dtype)).tolist()


def _columns(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The answers (non-NaN rows) of gathered :func:`clip_rows`, by column: float64 on the CPU, each contiguous."""
    rows = rows[~torch.isnan(rows[:, COL["log_ratio"]])].to(torch.float64).cpu()
    return dict(zip(ROW_COLUMNS, rows.T.contiguous(), strict=True))


def _subset(columns: dict[str, torch.Tensor], keep: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: values[keep] for name, values in columns.items()}


def _counts(columns: dict[str, torch.Tensor], edges: tuple[float, float]) -> dict[str, Any]:
    """The counts every clip figure is a ratio of (:data:`_TALLY_COUNTS` but ``steps``, and per length bin the answers
    with ``Â_i ≠ 0`` and the clipped ones among them)."""
    adv, length, clipped_tokens = columns["advantage"], columns["length"], columns["clipped_tokens"]
    low, high, signal = columns["clipped_low"] > 0, columns["clipped_high"] > 0, adv != 0
    clipped = (low | high) & signal
    # an answer carries a gradient when Â_i ≠ 0 and some valid token is off the clipped (constant) branch
    gradient = signal & (clipped_tokens < length)
    bins = torch.bucketize(length, torch.tensor(edges, dtype=torch.float64))
    return {
        "answers": float(adv.numel()),
        "signal": float(signal.sum()),
        "positive": float((adv > 0).sum()),
        "negative": float((adv < 0).sum()),
        "clipped_low": float((low & (adv < 0)).sum()),
        "clipped_high": float((high & (adv > 0)).sum()),
        "clipped_signal": float(clipped.sum()),
        "gradient_answers": float(gradient.sum()),
        "gradient_tokens": float(torch.where(gradient, length - clipped_tokens, 0.0).sum()),
        "tokens": float(length.sum()),
        "length_signal": [float((signal & (bins == b)).sum()) for b in range(len(LENGTH_BINS))],
        "length_clipped": [float((clipped & (bins == b)).sum()) for b in range(len(LENGTH_BINS))],
    }


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else math.nan


def step_clip_summary(rows: torch.Tensor, edges: tuple[float, float]) -> dict[str, float]:
    """One optimizer step's clip figures from its gathered :func:`clip_rows` (docs/metrics.md, "Where the clip
    bites"); NaN where a figure has no answer to be measured on (the trainer logs no value then). Quantiles are
    torch's linear interpolation."""
    columns = _columns(rows)
    # §5.2 clip fraction, off-policy: clipped answers among those with Â_i ≠ 0 trained after their round's first step
    offpolicy = _subset(columns, columns["position"] >= 1)
    every, off = _counts(columns, edges), _counts(offpolicy, edges)
    position, log_s = columns["position"], columns["log_ratio"]
    summary: dict[str, float] = {
        "clip/answers": every["answers"],
        "clip/round_position": float(position.mean()) if position.numel() else math.nan,
        "clip/upper_fraction": _share(every["clipped_high"], every["positive"]),
        "clip/lower_fraction": _share(every["clipped_low"], every["negative"]),
        "clip/signal_fraction": _share(every["clipped_signal"], every["signal"]),
        "clip/offpolicy_answers": off["signal"],
        "clip/offpolicy_fraction": _share(off["clipped_signal"], off["signal"]),
        "clip/gradient_answers": every["gradient_answers"],
        "clip/gradient_tokens": every["gradient_tokens"],
    }
    for name, clipped, signal in zip(LENGTH_BINS, every["length_clipped"], every["length_signal"], strict=True):
        summary[f"clip/by_length/{name}"] = _share(clipped, signal)
    for q, value in zip(SIGNED_QUANTILES, _quantiles(log_s, SIGNED_QUANTILES), strict=True):
        summary[f"ratio/log/p{round(q * 100):02d}"] = value
    for q, value in zip(ABS_QUANTILES, _quantiles(log_s.abs(), ABS_QUANTILES), strict=True):
        summary[f"ratio/abs_log/p{round(q * 100):02d}"] = value
    moved = offpolicy["log_ratio"][offpolicy["advantage"] != 0].abs()
    summary["clip/offpolicy_abs_log_p50"], summary["clip/offpolicy_abs_log_p90"] = _quantiles(moved, (0.5, 0.9))
    return summary


def clip_margins(rows: torch.Tensor, high_per_low: float, widening: float = 0.0) -> torch.Tensor:
    """For each off-policy answer with ``Â_i ≠ 0`` of gathered :func:`clip_rows`: the largest ε_low at which it is on
    its clipped branch, given ``ε_high = high_per_low · ε_low + widening`` (entropy feedback's k): ``(s_i − 1 −
    widening) / high_per_low`` when ``Â_i > 0``, ``1 − s_i`` when ``Â_i < 0``; ``≤ 0`` when it moved against its
    advantage (no ε clips it). 1-D float64, on the CPU."""
    columns = _columns(rows)
    s, adv = torch.exp(columns["log_ratio"]), columns["advantage"]
    offpolicy = (columns["position"] >= 1) & (adv != 0)
    margins = torch.where(adv > 0, (s - 1.0 - widening) / high_per_low, 1.0 - s)
    return margins[offpolicy]


def epsilon_for_fraction(margins: torch.Tensor, target: float) -> float:
    """The ε_low at which a fraction ``target`` of the answers of :func:`clip_margins` would be on the clipped branch:
    the ``1 − target`` quantile of their margins (linear interpolation); NaN when there is none, or when fewer than
    ``target`` moved towards their advantage (no ε > 0 clips that many)."""
    if margins.numel() == 0:
        return math.nan
    # §5.1 ε̂: the margin exceeded by a fraction `target` of the off-policy answers
    value = float(torch.quantile(margins, 1.0 - target))
    return value if value > 0 else math.nan


# --------------------------------------------------------------------------------------------- the run's tally
#: |log s_i| histogram of the tally: 20 bins per decade from 1e-8 to 1e2 (bin 0 holds [0, 1e-8), the last bin
#: everything above 1e2); its quantiles are read to within a factor 10^(1/20) ≈ 1.12 (written by hand: the tally
#: must merge steps and checkpoint in a few hundred integers, which no library quantile sketch here offers).
HIST_DECADES = (-8, 2)
HIST_PER_DECADE = 20
_TALLY_COUNTS = (
    "answers",
    "signal",
    "positive",
    "negative",
    "clipped_low",
    "clipped_high",
    "clipped_signal",
    "gradient_answers",
    "gradient_tokens",
    "tokens",
    "steps",
)


def histogram_edges() -> torch.Tensor:
    low, high = HIST_DECADES
    return torch.logspace(low, high, (high - low) * HIST_PER_DECADE + 1, dtype=torch.float64)


def _empty_position() -> dict[str, Any]:
    counts: dict[str, Any] = {name: 0.0 for name in _TALLY_COUNTS}
    counts["abs_log_hist"] = [0] * (len(histogram_edges()) + 1)
    counts["length_signal"] = [0.0] * len(LENGTH_BINS)
    counts["length_clipped"] = [0.0] * len(LENGTH_BINS)
    return counts


def tally_step(tally: dict[str, dict[str, Any]], rows: torch.Tensor, edges: tuple[float, float]) -> None:
    """Add one optimizer step's gathered rows to ``tally`` (position as a string → counts), in place."""
    columns = _columns(rows)
    for position in torch.unique(columns["position"]).tolist():
        part = _subset(columns, columns["position"] == position)
        entry = tally.setdefault(str(int(position)), _empty_position())
        _add(entry, _counts(part, edges))
        entry["steps"] += 1.0
        bins = torch.bucketize(part["log_ratio"].abs(), histogram_edges(), right=True)
        for index, count in zip(*torch.unique(bins, return_counts=True), strict=True):
            entry["abs_log_hist"][int(index)] += int(count)


def histogram_quantile(counts: Sequence[int], q: float) -> float:
    """The ``q`` quantile of a :data:`HIST_DECADES` histogram: the geometric interpolation inside its bin (0 in the
    bin below 1e-8; the top edge for the overflow bin); NaN when empty."""
    total = sum(counts)
    if total == 0:
        return math.nan
    edges = histogram_edges().tolist()
    rank, seen = q * total, 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index == 0:
                return 0.0
            if index >= len(edges):
                return edges[-1]
            lower, upper = edges[index - 1], edges[index]
            within = (rank - seen) / count
            return lower * (upper / lower) ** within
        seen += count
    return edges[-1]


def _add(into: dict[str, Any], counts: dict[str, Any]) -> None:
    """Add ``counts`` to the tally entry ``into`` (numbers, and lists element by element), in place."""
    for name, value in counts.items():
        if isinstance(value, list):
            into[name] = [a + b for a, b in zip(into[name], value, strict=True)]
        else:
            into[name] += value


def _merge(entries: list[dict[str, Any]]) -> dict[str, Any]:
    merged = _empty_position()
    for entry in entries:
        _add(merged, entry)
    return merged


def _known(value: float) -> float | None:
    return None if math.isnan(value) else value


def _figures(entry: dict[str, Any]) -> dict[str, Any]:
    hist = entry["abs_log_hist"]
    figures: dict[str, Any] = {
        "steps": int(entry["steps"]),
        "answers": int(entry["answers"]),
        "clipped_fraction": _known(_share(entry["clipped_signal"], entry["signal"])),
        "upper_fraction": _known(_share(entry["clipped_high"], entry["positive"])),
        "lower_fraction": _known(_share(entry["clipped_low"], entry["negative"])),
        "gradient_answers": int(entry["gradient_answers"]),
        "gradient_tokens": int(entry["gradient_tokens"]),
        "tokens": int(entry["tokens"]),
    }
    for q in ABS_QUANTILES:
        figures[f"abs_log_ratio_p{round(q * 100):02d}"] = _known(histogram_quantile(hist, q))
    figures["clipped_fraction_by_length"] = {
        name: _known(_share(clipped, signal))
        for name, clipped, signal in zip(LENGTH_BINS, entry["length_clipped"], entry["length_signal"], strict=True)
    }
    return figures


def tally_summary(tally: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's clip figures: per position, pooled over the off-policy positions (≥ 1), and over all answers.
    Fractions are of the answers with ``Â_i ≠ 0`` (the upper / lower ones of those with ``Â_i > 0`` / ``< 0``);
    quantiles of ``|log s_i|`` from the tally's histogram; ``None`` where nothing was measured."""
    positions = sorted(tally, key=int)
    offpolicy = [tally[p] for p in positions if int(p) >= 1]
    return {
        "by_position": {p: _figures(tally[p]) for p in positions},
        "offpolicy": _figures(_merge(offpolicy)),
        "all": _figures(_merge([tally[p] for p in positions])),
    }
