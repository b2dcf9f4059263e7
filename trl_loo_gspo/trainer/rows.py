"""Row records of dynamic sampling (docs/sampling.md): one picklable record per generated answer, the replay
handed back to TRL, padding rows, and small helpers shared by the trainer."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..algorithms.advantages import ADVANTAGE_ESTIMATORS

#: The span-signal entry of a row without process signal (a padding row, or a row no span verifier scored).
NO_SPANS: dict[str, Any] = {"spans": None, "final": None}


@dataclass
class RoundData:
    """What one generation round knows about every row of all ranks, built once and passed explicitly to the
    advantages, process feedback and the round metrics (never through attributes).

    Attributes:
        rewards_per_func: ``(N, F)`` gathered rewards, NaN = unscorable.
        group_ids: ``(N,)`` prompt-group id of each row (groups may differ in size).
        padding: ``(N,)`` bool, dynamic-sampling padding rows (not answers: never scored, counted or trained).
        span_signals: per row ``{"spans": list | None, "final": float | None}`` (§6), or ``None`` when process
            feedback is off; padding rows carry :data:`NO_SPANS`.
    """

    rewards_per_func: torch.Tensor
    group_ids: torch.Tensor
    padding: torch.Tensor
    span_signals: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        rows = self.rewards_per_func.size(0)
        if self.group_ids.shape != (rows,) or self.padding.shape != (rows,):
            raise ValueError(
                f"round data of {rows} rows got group_ids {tuple(self.group_ids.shape)} and padding "
                f"{tuple(self.padding.shape)}"
            )
        if self.span_signals is not None:
            if len(self.span_signals) != rows:
                raise ValueError(f"round data of {rows} rows got {len(self.span_signals)} span-signal entries")
            missing = [i for i, entry in enumerate(self.span_signals) if not isinstance(entry, dict)]
            if missing:
                raise TypeError(f"rows {missing[:5]} have no span-signal entry (use NO_SPANS for padding rows)")

    @classmethod
    def plain(
        cls, rewards_per_func: torch.Tensor, group_size: int, span_signals: list[dict[str, Any]] | None = None
    ) -> RoundData:
        """A batch as TRL makes it: each prompt's ``group_size`` answers contiguous, no padding."""
        rows = rewards_per_func.size(0)
        device = rewards_per_func.device
        group_ids = torch.arange(rows, device=device) // group_size
        return cls(rewards_per_func, group_ids, torch.zeros(rows, dtype=torch.bool, device=device), span_signals)

    @property
    def real(self) -> torch.Tensor:
        """``(N,)`` bool: rows that are answers (not padding)."""
        return ~self.padding


@dataclass
class Replay:
    """The final batch of dynamic sampling, handed back to TRL instead of generating and scoring again.

    ``generation``: this rank's rows as TRL's ``_generate`` returns them; ``round``: every row of all ranks;
    ``local_padding``: this rank's padding rows; ``extra_logs``: this rank's ``log_extra`` columns per row."""

    generation: tuple
    round: RoundData
    local_padding: torch.Tensor
    extra_logs: list[dict] = field(default_factory=list)


def row_records(generation: tuple) -> list[dict]:
    """Split the output of TRL's ``_generate`` into one picklable record per row."""
    prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _images, _tool_images = generation
    records = []
    for i in range(len(completion_ids)):
        records.append(
            {
                "prompt_ids": list(prompt_ids[i]),
                "completion_ids": list(completion_ids[i]),
                "tool_mask": None if tool_mask is None else list(tool_mask[i]),
                "completion": completions[i],
                "logprobs": None if logprobs is None else list(logprobs[i]),
                "extra": {k: v[i] for k, v in (extra_fields or {}).items() if isinstance(v, list)},
                "extra_scalar": {k: v for k, v in (extra_fields or {}).items() if not isinstance(v, list)},
            }
        )
    return records


def generation_from_records(records: list[dict]) -> tuple:
    """Rebuild the tuple TRL's ``_generate`` returns from row records (the inverse of :func:`row_records`)."""
    has_tool_mask = any(r["tool_mask"] is not None for r in records)
    has_logprobs = all(r["logprobs"] is not None for r in records)
    extra: dict[str, Any] = {}
    for key in records[0]["extra"] if records else []:
        extra[key] = [r["extra"][key] for r in records]
    for key, value in (records[0]["extra_scalar"] if records else {}).items():
        extra[key] = value
    return (
        [r["prompt_ids"] for r in records],
        [r["completion_ids"] for r in records],
        [r["tool_mask"] if r["tool_mask"] is not None else [1] * len(r["completion_ids"]) for r in records]
        if has_tool_mask
        else None,
        [r["completion"] for r in records],
        [r["logprobs"] for r in records] if has_logprobs else None,
        extra,
        None,
        [],
    )


def with_extra_fields(rows: list[dict], extra_fields: dict | None) -> list[dict]:
    """Copies of ``rows`` with a rollout function's extra fields merged in, as TRL merges them into the reward
    functions' inputs (a list gives one value per row, anything else is shared)."""
    merged = [dict(row) for row in rows]
    for i, row in enumerate(merged):
        for key, values in (extra_fields or {}).items():
            if not isinstance(values, list):
                row[key] = values
            elif i < len(values):
                row[key] = values[i]
    return merged


def prompt_key(prompt: Any) -> str:
    """A content key for a prompt (plain text or a list of messages), to find its dataset index."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def padding_record(template: dict) -> dict:
    """A zero-weight padding row: the template's prompt with a one-token completion (it gets no valid token and a NaN
    reward, and costs the batch's forward passes one position)."""
    first = template["completion_ids"][:1]
    return {
        **template,
        "completion_ids": list(first),
        "tool_mask": None if template["tool_mask"] is None else [1],
        "completion": "",
        "logprobs": None if template["logprobs"] is None else list(template["logprobs"][:1]),
        "extra": {key: value for key, value in template["extra"].items()},
        "extra_log": {},
        "span_signals": NO_SPANS,
    }


def combined_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One reward per row: the weighted sum of the scorable functions' rewards (TRL's rule); NaN when no function
    could score the row."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    weights = weights.to(rewards_per_func.device).unsqueeze(0)
    return (rewards_per_func * weights).nansum(dim=1).masked_fill(unscorable, float("nan"))


def loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """Valid generated tokens of a batch: completion mask times TRL's tool mask (tool outputs are not the policy's)."""
    mask = inputs["completion_mask"]
    if inputs.get("tool_mask") is not None:
        mask = mask * inputs["tool_mask"]
    return mask


def row_tokens(record: dict) -> int:
    """Generated tokens of a row (tool output excluded); for a row reference, its count if this rank owns it, else 0
    (sums of references are this rank's share, reduced once per batch in ``_log_sampling``)."""
    if "tokens" in record:
        return record["tokens"]
    return sum(record["tool_mask"]) if record["tool_mask"] is not None else len(record["completion_ids"])


def generated_per_effective(generated: int, effective: int) -> float:
    """Generated tokens per effective training token (1.0 is the physical limit; inf when nothing was effective)."""
    return generated / effective if effective else math.inf


def round_advantages(
    objective: Any, output: dict[str, Any], rewards: torch.Tensor, group_ids: torch.Tensor, rank: int, gather: Any
) -> torch.Tensor:
    """Every row's advantage of the round (all processes' rows), with this process's rows of ``output`` set: TRL's
    own, gathered (``objective.trl_advantages``), or the objective's estimator over the gathered ``rewards`` and
    per-row ``group_ids`` (``rank``: this process's index; ``gather``: ``accelerator.gather``)."""
    if objective.trl_advantages:
        return gather(output["advantages"])
    # §2.2 advantages over the gathered rewards and per-row group ids (stop-gradient)
    all_advantages = ADVANTAGE_ESTIMATORS[objective.advantage_estimator](rewards, group_ids)
    rows = output["prompt_ids"].size(0)
    first = rank * rows  # this rank's rows, as TRL slices them
    output["advantages"] = all_advantages[first : first + rows].to(output["advantages"].dtype)
    return all_advantages
