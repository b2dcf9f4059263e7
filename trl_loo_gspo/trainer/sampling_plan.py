"""What dynamic sampling needs from a run, as values (method §3.1): :class:`SamplingPlan`, the settings resolved from
the config once, and :class:`SamplingCalls`, the callables through which the sampler reaches generation, scoring,
the run plan and the step counter. The sampler (:class:`~trl_loo_gspo.trainer.rollout.DynamicSampler`) holds these
two and never the trainer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms.group_filter import resolve_refill_seed


@dataclass(frozen=True)
class SamplingPlan:
    """The run's sampling settings (``LooGspoConfig`` fields of docs/sampling.md, ``None`` fields resolved)."""

    dynamic_sampling: bool
    num_generations: int
    group_filter: str
    pass_rate_band: tuple[float, float]
    signal_tolerance: float
    max_sampling_rounds: int
    probe_generations: int | None
    probe_pass_rate_band: tuple[float, float]
    adaptive_group_size: bool
    group_size_bounds: tuple[int, int]
    on_sampling_exhausted: str
    recheck_filtered_every: int | None
    process_spans: bool  # process feedback is on: every row carries its span entries (§6)
    refill_seed: int
    shuffle_dataset: bool

    @classmethod
    def from_args(cls, args: Any, num_generations: int) -> SamplingPlan:
        return cls(
            dynamic_sampling=bool(args.dynamic_sampling),
            num_generations=num_generations,
            group_filter=args.group_filter,
            pass_rate_band=tuple(args.pass_rate_band),
            signal_tolerance=args.signal_tolerance,
            max_sampling_rounds=args.max_sampling_rounds,
            probe_generations=args.probe_generations,
            probe_pass_rate_band=tuple(args.probe_pass_rate_band),
            adaptive_group_size=bool(args.adaptive_group_size),
            group_size_bounds=tuple(args.group_size_bounds),
            on_sampling_exhausted=args.on_sampling_exhausted,
            recheck_filtered_every=args.recheck_filtered_every,
            process_spans=args.process_advantage_coef > 0,
            refill_seed=resolve_refill_seed(args.refill_seed, args.data_seed, args.seed),
            shuffle_dataset=bool(args.shuffle_dataset),
        )


#: ``generate_and_score(rows, answers_per_prompt)`` for this rank's share of a round's rows: TRL's generation tuple,
#: the gathered rewards per function (NaN: unscorable), the gathered §6 span entries (``None`` when process feedback
#: is off) and this rank's rows' ``log_extra`` values (one dict per row).
GenerateAndScore = Callable[[list[dict], int], tuple[tuple, torch.Tensor, list | None, list[dict]]]


@dataclass(frozen=True)
class SamplingCalls:
    """How the sampler reaches the rest of the run (all provided by the trainer)."""

    generate_and_score: GenerateAndScore
    budget_left: Callable[[], int | None]  # generated tokens the run plan still allows before this call (None: no cap)
    generated_this_call: Callable[[], int]  # this rank's generated tokens since the last round's metrics
    combine_rewards: Callable[[torch.Tensor], torch.Tensor]  # rewards per function -> one reward per row
    global_step: Callable[[], int]
