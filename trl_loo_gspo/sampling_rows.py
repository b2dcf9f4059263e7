"""Row records of dynamic sampling (docs/sampling.md): one picklable record per generated answer, the replay
handed back to TRL, padding rows, and small helpers shared by the trainer."""

from __future__ import annotations

import json
import math
from typing import Any

import torch


class Replay:
    """The final batch's answers and rewards, handed back to TRL instead of generating and scoring again."""

    def __init__(
        self,
        generation: tuple,
        rewards_per_func: torch.Tensor,
        span_signals: list | None = None,
        extra_logs: list[dict] | None = None,
    ) -> None:
        self.generation = generation
        self.rewards_per_func = rewards_per_func
        self.extra_logs = extra_logs or []  # this rank's rows: the columns reward functions gave `log_extra`
        self.span_signals = span_signals  # §6 process feedback, per row of all ranks: spans and final score


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
        "span_signals": None,
    }


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
