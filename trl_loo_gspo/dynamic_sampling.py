"""Dynamic sampling (SPEC §3.1) wired into TRL's generation: a mixin for ``LooGspoTrainer``.

One training batch is assembled in generation *rounds*. Each round generates and verifies whole prompt groups
(TRL's ``_generate`` and ``_calculate_rewards``, called as they are), gathers the answers of every process, and
decides on the gathered rewards — identically on every process — which groups carry a comparison signal
(:mod:`trl_loo_gspo.sampling`). Missing groups are refilled with new prompts from a sampler that has its own seed
and cursor, up to ``max_sampling_rounds``. The chosen groups are then handed to TRL's
``_generate_and_score_completions`` through a *replay*: ``_generate`` and ``_calculate_rewards`` return the answers
and rewards already made, so no answer is generated or verified twice, and TRL does the padding, old/reference
log-probabilities, importance weights and logging of the final batch only.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from accelerate.utils import gather_object
from datasets import IterableDataset
from trl import GRPOTrainer

from .sampling import RefillSampler, budget_reached, group_decisions, refill_prompt_count, select_groups


class _Replay:
    """The final batch's answers and rewards, handed back to TRL instead of generating and scoring again."""

    def __init__(self, generation: tuple, rewards_per_func: torch.Tensor) -> None:
        self.generation = generation
        self.rewards_per_func = rewards_per_func


def _row_records(generation: tuple) -> list[dict]:
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


def _generation_from_records(records: list[dict]) -> tuple:
    """Rebuild the tuple TRL's ``_generate`` returns from row records (the inverse of :func:`_row_records`)."""
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


def _tokens(record: dict) -> int:
    return sum(record["tool_mask"]) if record["tool_mask"] is not None else len(record["completion_ids"])


class DynamicSamplingMixin(GRPOTrainer):
    """Adds dynamic sampling and the rollout-token budget to a ``GRPOTrainer`` subclass (see module docstring)."""

    def _init_sampling(self) -> None:
        args = self.args
        self._replay: _Replay | None = None
        self._pad_rows: torch.Tensor | None = None  # local rows of the current batch that are zero-weight padding
        self._warned_exhausted = False
        self._refill: RefillSampler | None = None
        self.sampling_counters = {"discarded_tokens": 0, "padded_groups": 0, "surplus_groups": 0, "rounds": 0}
        if not args.dynamic_sampling:
            return
        if isinstance(self.train_dataset, IterableDataset):
            raise ValueError(
                "dynamic_sampling needs a map-style train_dataset (refill prompts are drawn by index); got an "
                "IterableDataset. Materialise it (e.g. Dataset.from_list) or set dynamic_sampling=False."
            )
        if self.environment_factories is not None:
            raise ValueError("dynamic_sampling does not support environment_factory yet; set dynamic_sampling=False.")
        seed = args.seed if args.refill_seed is None else args.refill_seed
        self._refill = RefillSampler(len(self.train_dataset), seed)

    # ------------------------------------------------------------------ TRL hooks (replay-aware)
    def _generate(self, prompts: list):
        if self._replay is not None:
            return self._replay.generation
        output = super()._generate(prompts)
        completion_ids, tool_mask = output[1], output[2]
        if tool_mask is not None:
            self._local_generated_tokens += int(sum(sum(mask) for mask in tool_mask))
        else:
            self._local_generated_tokens += sum(len(ids) for ids in completion_ids)
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._replay is not None:
            return self._replay.rewards_per_func
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_and_score_completions(self, inputs):
        self._pad_rows = None
        if not (self.model.training and self.args.dynamic_sampling):
            return super()._generate_and_score_completions(inputs)
        final_inputs, replay, pad_rows = self._sample_batch(inputs)
        self._replay = replay
        try:
            output = super()._generate_and_score_completions(final_inputs)
        finally:
            self._replay = None
        if pad_rows.any():
            # zero-weight rows: no valid token, so they count in neither the numerator nor the denominator
            output["completion_mask"] = output["completion_mask"] * (~pad_rows).unsqueeze(1).to(
                output["completion_mask"].dtype
            )
        self._pad_rows = pad_rows
        return output

    # ------------------------------------------------------------------ the round loop (SPEC §3.1)
    def _combined_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        return (rewards_per_func * weights).nansum(dim=1).masked_fill(unscorable, float("nan"))

    def _sample_batch(self, inputs: list[dict]) -> tuple[list[dict], _Replay, torch.Tensor]:
        args = self.args
        k = self.num_generations
        processes, rank = self.accelerator.num_processes, self.accelerator.process_index
        local_rows = len(inputs)
        needed = local_rows * processes // k  # groups in one generation batch
        candidates: list[dict] = []
        round_inputs = inputs
        rounds, kept, exhausted = 0, 0, False
        while True:
            rounds += 1
            prompts = [x["prompt"] for x in round_inputs]
            generation = self._generate(prompts)
            rewards_per_func = self._calculate_rewards(round_inputs, prompts, generation[3], generation[1])
            records = gather_object(_row_records(generation))
            round_all_inputs = gather_object(list(round_inputs))
            rewards = self._combined_rewards(rewards_per_func).cpu()
            group_ids = torch.arange(rewards.numel()) // k
            decision = group_decisions(
                rewards, group_ids, args.group_filter, args.signal_tolerance, tuple(args.pass_rate_band)
            )
            for g in range(rewards.numel() // k):
                rows = slice(g * k, (g + 1) * k)
                candidates.append(
                    {
                        "records": records[rows],
                        "inputs": round_all_inputs[rows],
                        "rewards": rewards_per_func[rows],
                        "keep": bool(decision.keep[g]),
                        "all_correct": bool(decision.all_correct[g]),
                        "all_wrong": bool(decision.all_wrong[g]),
                    }
                )
            kept = sum(c["keep"] for c in candidates)
            if kept >= needed:
                break
            if rounds >= args.max_sampling_rounds:
                exhausted = True
                break
            count = refill_prompt_count(needed - kept, kept / len(candidates), processes, k, needed)
            indices = self._refill.draw(count)  # identical on every process: own seed and cursor
            rows = [i for i in indices for _ in range(k)]  # each prompt's answers contiguous, as TRL lays them out
            per_process = len(rows) // processes
            round_inputs = [self.train_dataset[i] for i in rows[rank * per_process : (rank + 1) * per_process]]

        if exhausted and args.on_sampling_exhausted == "error":
            raise RuntimeError(
                f"dynamic sampling found {kept} of {needed} groups with a comparison signal after "
                f"max_sampling_rounds={args.max_sampling_rounds} generation rounds. Raise max_sampling_rounds, "
                "or set on_sampling_exhausted='pad' to train on the groups found."
            )
        selection = select_groups([c["keep"] for c in candidates], needed, exhausted)
        if selection.padding and not self._warned_exhausted:
            warnings.warn(
                f"dynamic sampling hit max_sampling_rounds={args.max_sampling_rounds} with {kept}/{needed} groups "
                "carrying a comparison signal; the batch is padded with zero-weight rows (logged as "
                "sampling/padded_fraction). Warning once.",
                stacklevel=2,
            )
            self._warned_exhausted = True
        self._log_sampling(candidates, selection, rounds, needed)

        groups = [candidates[i] for i in selection.chosen] + [candidates[i] for i in selection.padding]
        pad_flags = [False] * len(selection.chosen) + [True] * len(selection.padding)
        all_records = [r for c in groups for r in c["records"]]
        all_inputs = [x for c in groups for x in c["inputs"]]
        rewards_per_func = torch.cat([c["rewards"] for c in groups])
        pad_rows_all = torch.tensor([flag for flag in pad_flags for _ in range(k)], device=rewards_per_func.device)
        rewards_per_func = rewards_per_func.masked_fill(pad_rows_all.unsqueeze(1), float("nan"))
        mine = slice(rank * local_rows, (rank + 1) * local_rows)
        replay = _Replay(_generation_from_records(all_records[mine]), rewards_per_func)
        return all_inputs[mine], replay, pad_rows_all[mine]

    def _log_sampling(self, candidates: list[dict], selection, rounds: int, needed: int) -> None:
        metrics = self._metrics["train"]
        used = set(selection.chosen) | set(selection.padding)
        discarded = sum(_tokens(r) for i, c in enumerate(candidates) if i not in used for r in c["records"])
        padded = sum(_tokens(r) for i in selection.padding for r in candidates[i]["records"])
        n = len(candidates)
        metrics["sampling/rounds"].append(rounds)
        metrics["sampling/frac_filtered"].append(sum(not c["keep"] for c in candidates) / n)
        metrics["sampling/frac_all_correct"].append(sum(c["all_correct"] for c in candidates) / n)
        metrics["sampling/frac_all_wrong"].append(sum(c["all_wrong"] for c in candidates) / n)
        metrics["sampling/padded_fraction"].append(len(selection.padding) / needed)
        metrics["sampling/surplus_groups"].append(selection.surplus)
        metrics["tokens/discarded"].append(discarded + padded)
        counters = self.sampling_counters
        counters["discarded_tokens"] += discarded + padded
        counters["padded_groups"] += len(selection.padding)
        counters["surplus_groups"] += selection.surplus
        counters["rounds"] += rounds

    # ------------------------------------------------------------------ rollout-token budget
    def _budget_spent(self) -> bool:
        return budget_reached(self.generated_tokens_total, self.args.rollout_token_budget)


def generated_per_effective(generated: int, effective: int) -> float:
    """Generated tokens per effective training token (1.0 is the physical limit; inf when nothing was effective)."""
    return generated / effective if effective else math.inf
