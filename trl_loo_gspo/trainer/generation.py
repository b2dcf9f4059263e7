"""What the trainer's generation calls need besides TRL: counted tokens, a replay's figures, and the helpers for
TRL's per-batch generation metrics and its ``log_extra`` buffer.

:class:`Generation` (a component of ``LooGspoTrainer``) counts the tokens each fresh ``_generate`` call makes (tool
output excluded) and computes TRL's per-batch figures over the answers of a replayed batch. The functions below are
what the trainer calls where TRL's state is involved; the trainer alone reads and writes that state
(docs/trl-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .rows import Replay, loss_mask
from .step import resample_sampling_metrics

# TRL's per-batch generation metrics (GRPOTrainer._generate): logged for the trained batch only.
_PER_BATCH_KEYS = ("num_tokens",)
_PER_BATCH_PREFIX = "completions/"


class Generation:
    """The generated-token counter of one trainer and the replay's figures (no state a resumed run needs: the counter
    is emptied every round). Holds no trainer: the trainer calls it with what each method needs."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator
        self._local_generated_tokens = 0  # this rank's generated tokens since the last round's metrics

    def count(self, output: tuple) -> None:
        """Count the tokens of a fresh ``_generate`` call's output on this rank (tool output excluded)."""
        completion_ids, tool_mask = output[1], output[2]
        if tool_mask is not None:
            self._local_generated_tokens += int(sum(sum(mask) for mask in tool_mask))
        else:
            self._local_generated_tokens += sum(len(ids) for ids in completion_ids)

    def answer_figures(self, replay: Replay, ends: set[int]) -> tuple[float, dict[str, float] | None]:
        """TRL's per-batch generation figures over the answers of a replayed batch, without the padding rows
        (one-token, EOS-less rows TRL would count as the shortest, truncated answers): the input tokens of the
        answers (all ranks) and the ``completions/*`` figures (``None`` for a batch of padding only). Written by
        hand: TRL computes these inside ``_generate`` over every row it is given, and the replay must give it every
        row (its gathers need equal row counts on every rank). ``ends``: the EOS and pad token ids."""
        prompt_ids, completion_ids, tool_mask = replay.generation[:3]
        local = torch.tensor(
            [
                [
                    len(prompt_ids[i]),
                    sum(tool_mask[i]) if tool_mask is not None else len(completion_ids[i]),
                    float(completion_ids[i][-1] not in ends),
                    float(pad),
                ]
                for i, pad in enumerate(replay.local_padding.tolist())
            ],
            dtype=torch.float64,
            device=self.accelerator.device,
        )
        rows = self.accelerator.gather(local)
        answers = rows[rows[:, 3] == 0]
        lengths, truncated = answers[:, 1], answers[:, 2].bool()
        tokens = float(answers[:, 0].sum() + lengths.sum())
        if answers.size(0) == 0:
            return tokens, None
        terminated = lengths[~truncated] if bool((~truncated).any()) else torch.zeros(1, dtype=torch.float64)
        figures = {
            "mean_length": lengths.mean(),
            "min_length": lengths.min(),
            "max_length": lengths.max(),
            "clipped_ratio": truncated.double().mean(),
            "mean_terminated_length": terminated.mean(),
            "min_terminated_length": terminated.min(),
            "max_terminated_length": terminated.max(),
        }
        return tokens, {name: float(value) for name, value in figures.items()}

    def peek_generated_tokens(self) -> int:
        """This rank's generated tokens since the last :meth:`take_generated_tokens`, without resetting them."""
        return self._local_generated_tokens

    def take_generated_tokens(self) -> int:
        """This rank's generated tokens since the last call (for the round's metrics)."""
        generated, self._local_generated_tokens = self._local_generated_tokens, 0
        return generated

    def mark_padding(self, output: dict, replay: Replay, metrics: dict[str, list], vllm_mode: str | None) -> None:
        """After TRL's pass over a sampled batch: padding rows become zero-weight rows (no valid token), so they
        count in neither the numerator nor the denominator (ours, and TRL's token-normalised losses through
        ``num_items_in_batch``, which TRL counted before this mask); ``padding_rows`` travels with the batch. With
        vLLM's importance-sampling correction (``vllm_mode``: its ``vllm_importance_sampling_mode``; ``None`` when
        off) TRL's sampling metrics are recomputed over the answers (:func:`resample_sampling_metrics`)."""
        if not bool(replay.round.padding.any()):  # the same on every rank
            return
        pad_rows = replay.local_padding.to(output["completion_mask"].device)
        output["padding_rows"] = pad_rows  # split into micro-batches with the batch
        output["completion_mask"] = output["completion_mask"] * (~pad_rows).unsqueeze(1).to(
            output["completion_mask"].dtype
        )
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask(output).sum()).sum()
        if vllm_mode is not None:
            sequence_level = vllm_mode in ("sequence_mask", "sequence_truncate")
            resample_sampling_metrics(metrics, output, sequence_level, self.accelerator.gather)


def replay_rollout(generation: tuple) -> Callable[[list, Any], dict]:
    """A rollout function handing TRL's ``_generate`` the answers a sampling round already made (TRL's rollout
    contract), so that TRL logs its per-batch generation metrics for the trained rows; with tools off nothing is
    executed again."""
    prompt_ids, completion_ids, tool_mask, _completions, logprobs, _extra, _images, _tool_images = generation

    def rollout(_prompts, _trainer):
        out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
        if tool_mask is not None:
            out["env_mask"] = tool_mask  # TRL's name for a rollout's tool mask
        return out

    return rollout


def answer_metrics(metrics: dict[str, list], tokens_seen: float, figures: dict[str, float] | None) -> None:
    """Replace what TRL's ``_generate`` just logged (``num_tokens``, ``completions/*``) by the answers' figures
    (:meth:`Generation.answer_figures`); a batch of padding only logs no completion figure."""
    metrics["num_tokens"] = [tokens_seen]
    for name in [key for key in metrics if key.startswith(_PER_BATCH_PREFIX) and metrics[key]]:
        if figures is None:
            metrics[name].pop()
        elif name[len(_PER_BATCH_PREFIX) :] in figures:
            metrics[name][-1] = figures[name[len(_PER_BATCH_PREFIX) :]]


def per_batch_metrics(metrics: dict[str, list]) -> dict[str, list]:
    """A copy of TRL's per-batch generation metrics (``num_tokens``, ``completions/*``), to roll a sampling round's
    back with :func:`restore_per_batch_metrics`: they describe rows that may never be trained (the trained batch
    logs its own)."""
    return {key: list(values) for key, values in metrics.items() if _per_batch(key)}


def restore_per_batch_metrics(metrics: dict[str, list], saved: dict[str, list]) -> None:
    for key in [k for k in list(metrics) if _per_batch(k)]:
        if key in saved:
            metrics[key][:] = saved[key]
        else:
            del metrics[key]


def _per_batch(key: str) -> bool:
    return key in _PER_BATCH_KEYS or key.startswith(_PER_BATCH_PREFIX)


def take_extra_logs(pending: dict[str, list], num_rows: int) -> list[dict]:
    """The ``log_extra`` columns the reward functions just logged for this rank's rows (TRL's pending buffer,
    ``pending``), one dict per row; the buffer is emptied (it would otherwise flush every round's values with the
    trained batch)."""
    if not pending:
        return [{} for _ in range(num_rows)]
    rows = [
        {column: values[i] if i < len(values) else None for column, values in pending.items()} for i in range(num_rows)
    ]
    pending.clear()
    return rows


def replay_extra_logs(pending: dict[str, list], replay: Replay) -> None:
    """TRL flushes its pending ``log_extra`` buffer with the batch: give it the trained rows' own values."""
    pending.clear()
    for column in sorted({column for logged in replay.extra_logs for column in logged}):
        pending[column].extend(logged.get(column) for logged in replay.extra_logs)

    # ------------------------------------------------------------------ the round loop (method §3.1)
