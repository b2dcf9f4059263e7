"""TRL's generation calls as the trainer makes them: counted, replayed, and laid out for a sampling round.

:class:`Generation` is a component of ``LooGspoTrainer``: it counts the tokens each fresh ``_generate`` call makes
(tool output excluded), hands TRL the rows a dynamic-sampling round already made (:meth:`replayed_generation`),
keeps TRL's per-batch generation metrics to the trained answers, and tells the backend how many answers per prompt
the call in progress has (:attr:`round_layout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from trl import GRPOTrainer

from .rows import Replay, loss_mask

# TRL's per-batch generation metrics (GRPOTrainer._generate): logged for the trained batch only.
_PER_BATCH_KEYS = ("num_tokens",)
_PER_BATCH_PREFIX = "completions/"


class Generation:
    """Generation calls of one trainer (no state a resumed run needs: the counter is emptied every round)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.accelerator = trainer.accelerator
        self.round_layout: int | None = None  # answers per prompt of the generation call in progress
        self._local_generated_tokens = 0  # this rank's generated tokens since the last round's metrics

    def replayed_generation(self, prompts: list, replay: Replay) -> tuple:
        """TRL's ``_generate`` during the replay of a sampled batch: the answers already made; TRL's per-batch
        generation metrics are logged for the answers only (padding rows are not answers)."""
        seen = self.trainer.state.num_input_tokens_seen
        # every row: TRL gathers per-row tensors, which needs the same row count on every rank
        self._trl_generation_metrics(prompts, replay.generation)
        if bool(replay.round.padding.any()):  # the same on every rank
            self._metrics_over_answers(replay, seen)
        return replay.generation

    def _metrics_over_answers(self, replay: Replay, seen: float) -> None:
        """Replace what TRL's ``_generate`` just logged (``num_tokens``, ``completions/*``) by the same figures over
        the answers, without the padding rows (one-token, EOS-less rows TRL would count as the shortest, truncated
        answers). Written by hand: TRL computes these inside ``_generate`` over every row it is given, and the
        replay must give it every row (its gathers need equal row counts on every rank)."""
        trainer = self.trainer
        prompt_ids, completion_ids, tool_mask = replay.generation[:3]
        ends = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
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
        trainer.state.num_input_tokens_seen = seen + float(answers[:, 0].sum() + lengths.sum())
        metrics = trainer._metrics["train"]
        metrics["num_tokens"] = [trainer.state.num_input_tokens_seen]
        if answers.size(0) == 0:  # a batch of padding only: no completion figures for it
            for name in [key for key in metrics if key.startswith("completions/") and metrics[key]]:
                metrics[name].pop()
            return
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
        for name, value in figures.items():
            if metrics.get(f"completions/{name}"):
                metrics[f"completions/{name}"][-1] = float(value)

    def generate_counted(self, prompts: list) -> tuple:
        """TRL's ``_generate`` for a fresh call, counting this rank's generated tokens (tool output excluded)."""
        output = GRPOTrainer._generate(self.trainer, prompts)
        completion_ids, tool_mask = output[1], output[2]
        if tool_mask is not None:
            self._local_generated_tokens += int(sum(sum(mask) for mask in tool_mask))
        else:
            self._local_generated_tokens += sum(len(ids) for ids in completion_ids)
        return output

    def _trl_generation_metrics(self, prompts: list, generation: tuple) -> None:
        """TRL's per-batch generation metrics (``num_tokens``, ``completions/*``) for the rows that are trained: TRL's
        ``_generate`` runs on them through a rollout function that hands back the answers already made (tools off, so
        that nothing is executed again); its output is discarded."""
        prompt_ids, completion_ids, tool_mask, _completions, logprobs, _extra, _images, _tool_images = generation

        def replay_rollout(_prompts, _trainer):
            out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
            if tool_mask is not None:
                out["env_mask"] = tool_mask  # TRL's name for a rollout's tool mask
            return out

        saved = self.trainer.rollout_func, self.trainer.tools
        self.trainer.rollout_func, self.trainer.tools = replay_rollout, None
        try:
            GRPOTrainer._generate(self.trainer, prompts)
        finally:
            self.trainer.rollout_func, self.trainer.tools = saved

    @contextmanager
    def laid_out(self, answers_per_prompt: int) -> Iterator[None]:
        """Within the block, generation calls carry each prompt ``answers_per_prompt`` times in a row (a sampling
        round: the probe size, or 1 for continuations); TRL's per-batch generation metrics of those calls are
        rolled back (the trained batch logs its own)."""
        self.round_layout = answers_per_prompt
        try:
            with self._round_generation():
                yield
        finally:
            self.round_layout = None

    @contextmanager
    def _round_generation(self) -> Iterator[None]:
        """A generation round: TRL's per-batch generation metrics it would log describe rows that may never be
        trained, so they are rolled back (the trained batch logs them, see ``_trl_generation_metrics``)."""
        metrics = self.trainer._metrics["train"]
        saved = {
            key: list(metrics[key])
            for key in list(metrics)
            if key in _PER_BATCH_KEYS or key.startswith(_PER_BATCH_PREFIX)
        }
        seen = self.trainer.state.num_input_tokens_seen
        try:
            yield
        finally:
            for key in [k for k in list(metrics) if k in _PER_BATCH_KEYS or k.startswith(_PER_BATCH_PREFIX)]:
                if key in saved:
                    metrics[key][:] = saved[key]
                else:
                    del metrics[key]
            self.trainer.state.num_input_tokens_seen = seen

    def peek_generated_tokens(self) -> int:
        """This rank's generated tokens since the last :meth:`take_generated_tokens`, without resetting them."""
        return self._local_generated_tokens

    def take_generated_tokens(self) -> int:
        """This rank's generated tokens since the last call (for the round's metrics)."""
        generated, self._local_generated_tokens = self._local_generated_tokens, 0
        return generated

    def replay_extra_logs(self, replay: Replay) -> None:
        """TRL flushes ``_pending_extra_logs`` with the batch: give it the trained rows' own ``log_extra`` values."""
        self.trainer._pending_extra_logs.clear()
        for column in sorted({column for logged in replay.extra_logs for column in logged}):
            self.trainer._pending_extra_logs[column].extend(logged.get(column) for logged in replay.extra_logs)

    def mark_padding(self, output: dict, replay: Replay) -> None:
        """After TRL's pass over a sampled batch: padding rows become zero-weight rows (no valid token), so they
        count in neither the numerator nor the denominator (ours, and TRL's token-normalised losses through
        ``num_items_in_batch``, which TRL counted before this mask); ``padding_rows`` travels with the batch."""
        if not bool(replay.round.padding.any()):  # the same on every rank
            return
        pad_rows = replay.local_padding.to(output["completion_mask"].device)
        output["padding_rows"] = pad_rows  # split into micro-batches with the batch
        output["completion_mask"] = output["completion_mask"] * (~pad_rows).unsqueeze(1).to(
            output["completion_mask"].dtype
        )
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask(output).sum()).sum()

    # ------------------------------------------------------------------ the round loop (method §3.1)
