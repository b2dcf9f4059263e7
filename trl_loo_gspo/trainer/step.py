"""What one generation round and one optimizer step log (docs/metrics.md), as functions the trainer calls, and the
run's cumulative token counters (a component with a ``state_dict``).

Loss statistics are accumulated per micro-batch without host syncs (:func:`loss_stats`), reduced across ranks once
per step and logged as ``clip_ratio/*`` (ours and TRL's names), ``ratio/*``, ``entropy``, ``kl``, ``guard/*``
(:func:`log_loss_stats`); a round logs groups, advantages, unscorable answers and tokens (:func:`log_round`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..algorithms.advantages import frac_rows_without_signal, group_has_signal
from ..algorithms.losses import PolicyLoss
from ..algorithms.noise import NOISE_METRICS, noise_summary
from ..algorithms.step_accounting import IDX, SUM_STATS, StepAccounting
from .rows import RoundData, generated_per_effective, loss_mask

logger = logging.getLogger(__name__)


class TokenCounters:
    """Cumulative generated and effective tokens of the run (all ranks; checkpointed)."""

    def __init__(self) -> None:
        self.generated = 0
        self.effective = 0

    def state_dict(self) -> dict[str, int]:
        return {"generated_tokens_total": self.generated, "effective_tokens_total": self.effective}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generated = int(state["generated_tokens_total"])
        self.effective = int(state["effective_tokens_total"])

    def add_round(self, tokens: tuple[float, float, float]) -> None:
        """Count a training round's global ``(generated, effective, valid)`` tokens (:func:`round_tokens`)."""
        self.generated += int(tokens[0])
        self.effective += int(tokens[1])


def round_tokens(output: dict[str, Any], generated: int, reduce: Callable[..., torch.Tensor]) -> tuple[float, ...]:
    """A round's global ``(generated, effective, valid)`` token counts, in one all-reduce: ``generated`` is this
    rank's generated tokens (every call of the round, filtered groups included), effective the valid tokens of rows
    with ``Â ≠ 0``, valid every loss-masked token of the batch ``output``."""
    mask = loss_mask(output)
    local = [generated, (mask.sum(-1) * (output["advantages"] != 0)).sum(), mask.sum()]
    counts = torch.tensor([float(v) for v in local], dtype=torch.float64, device=mask.device)
    return tuple(reduce(counts, reduction="sum").tolist())


def log_round(
    metrics: dict[str, list],
    round_data: RoundData,
    rewards: torch.Tensor,
    all_advantages: torch.Tensor,
    tokens: tuple[float, float, float],
    signal_tolerance: float,
    variable_groups: bool,
) -> None:
    """Metrics of one generation round; padding rows are not answers: neither groups, nor scored, nor unscorable.

    ``tokens``: the round's global ``(generated, effective, valid)`` token counts; ``variable_groups``: groups may
    differ in size (TRL's ``frac_reward_zero_std`` then grouped the rows wrongly and is replaced)."""
    generated, effective, valid = tokens
    real = round_data.real.to(rewards.device)
    group_ids = round_data.group_ids.to(rewards.device)
    signal = group_has_signal(rewards[real], group_ids[real], atol=signal_tolerance)
    metrics["groups/frac_with_signal"].append(signal.float().mean().item() if signal.numel() else 0.0)
    # group sizes K of the round's real rows (they vary with adaptive_group_size: LOO's K/(K−1) then varies too)
    sizes = torch.unique(group_ids[real], return_counts=True)[1].to(torch.float64)
    metrics["groups/size_mean"].append(sizes.mean().item() if sizes.numel() else 0.0)
    metrics["groups/size_sd"].append(sizes.std().item() if sizes.numel() > 1 else 0.0)
    scored = all_advantages[~torch.isnan(rewards)]
    metrics["advantages/mean"].append(scored.mean().item() if scored.numel() else 0.0)
    metrics["advantages/std"].append(scored.std().item() if scored.numel() > 1 else 0.0)
    unscorable = torch.isnan(round_data.rewards_per_func).all(dim=1).to(real.device) & real
    metrics["rewards/frac_unscorable"].append(unscorable.sum().item() / max(int(real.sum()), 1))
    if variable_groups and metrics.get("frac_reward_zero_std"):
        metrics["frac_reward_zero_std"][-1] = frac_rows_without_signal(rewards, group_ids, signal_tolerance, real)
    metrics["tokens/generated"].append(generated)
    metrics["tokens/valid"].append(valid)
    metrics["tokens/effective"].append(effective)


def replace_last(logged: Any, values: list) -> None:
    """Replace the last ``len(values)`` entries of ``logged`` (a bounded deque, e.g. TRL's logged advantages)."""
    for _ in range(min(len(values), len(logged))):
        logged.pop()
    logged.extend(values)


def log_totals(metrics: dict[str, list], counters: TokenCounters) -> None:
    """The run's cumulative token counts (one value each, replaced every round)."""
    metrics["tokens/generated_total"] = [float(counters.generated)]
    metrics["tokens/effective_total"] = [float(counters.effective)]
    metrics["tokens/generated_per_effective"] = [generated_per_effective(counters.generated, counters.effective)]


@torch.no_grad()
def resample_sampling_metrics(
    metrics: dict[str, list], output: dict[str, Any], sequence_level: bool, gather: Callable[[torch.Tensor], Any]
) -> None:
    """TRL's vLLM importance-sampling metrics (``sampling/importance_sampling_ratio/*``,
    ``sampling/sampling_logp_difference/*``), recomputed over the answers only: TRL computed them before the padding
    rows of a dynamic-sampling batch were masked, so each padding row counted as a ratio-0 answer (the logged mean
    read 1 − padded fraction, a false vLLM/trainer mismatch). Call after the padding rows' mask is zeroed; replaces
    the values TRL just appended."""
    ratio, sampled, old = (
        output.get(k) for k in ("importance_sampling_ratio", "sampling_per_token_logps", "old_per_token_logps")
    )
    if ratio is None or sampled is None or old is None:
        return
    mask = loss_mask(output).bool()
    delta = torch.abs(old - sampled)[mask & ~torch.isnan(old - sampled)].to(torch.float64)
    values = (ratio[mask.any(dim=1)].flatten() if sequence_level else ratio[mask]).to(torch.float64)
    nan = torch.full((), torch.nan, dtype=torch.float64, device=mask.device)  # this process has no answer
    local = {
        "sampling/sampling_logp_difference/mean": delta.mean() if delta.numel() else nan,
        "sampling/sampling_logp_difference/max": delta.max() if delta.numel() else nan,
        "sampling/importance_sampling_ratio/min": values.min() if values.numel() else nan,
        "sampling/importance_sampling_ratio/mean": values.mean() if values.numel() else nan,
        "sampling/importance_sampling_ratio/max": values.max() if values.numel() else nan,
    }
    gathered = gather(torch.stack(list(local.values())).reshape(1, -1)).reshape(-1, len(local))
    for column, name in enumerate(local):
        if not metrics.get(name):
            continue
        per_process = gathered[:, column]
        per_process = per_process[~torch.isnan(per_process)]
        if per_process.numel() == 0:  # no answer in the batch (all padding): no figure for it
            metrics[name].pop()
            continue
        if name.endswith("/min"):
            reduced = per_process.min()
        elif name.endswith("/max"):
            reduced = per_process.max()
        else:
            reduced = per_process.mean()  # TRL's mean of the per-process means
        metrics[name][-1] = float(reduced)


@torch.no_grad()
def loss_stats(
    policy: PolicyLoss,
    lengths: torch.Tensor,
    fmask: torch.Tensor,
    entropies: torch.Tensor,
    per_token_kl: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This micro-batch's sums (:data:`~trl_loo_gspo.algorithms.step_accounting.SUM_STATS`) and ratio extrema
    ``[max s, max −s]``; no host sync (masked ops, no boolean indexing). The clip decisions are the policy loss's
    own."""
    valid = lengths > 0
    s = policy.ratio.detach().to(torch.float64)
    low, high = policy.clipped_low & valid, policy.clipped_high & valid
    lengths = lengths.to(torch.float64)
    if policy.token_clipped_low is None:  # response-level: every valid token of a clipped answer
        low_tokens, high_tokens = (lengths * low).sum(), (lengths * high).sum()
    else:  # the loss clips per token
        low_tokens = (policy.token_clipped_low.to(fmask.dtype) * fmask).sum()
        high_tokens = (policy.token_clipped_high.to(fmask.dtype) * fmask).sum()
    zero = torch.zeros((), dtype=torch.float64, device=s.device)
    values = [
        valid.sum(),
        lengths.sum(),
        low.sum(),
        high.sum(),
        low_tokens,
        high_tokens,
        (policy.guard & valid).sum() if policy.guard is not None else zero,
        torch.where(valid, s, zero).sum(),
        (entropies * fmask).sum(),
        (per_token_kl.detach() * fmask).sum() if per_token_kl is not None else zero,
    ]
    stats = torch.stack([v.to(torch.float64) for v in values])
    minus_inf = torch.full_like(s, -math.inf)
    extrema = torch.stack([torch.where(valid, s, minus_inf).amax(), torch.where(valid, -s, minus_inf).amax()])
    return stats, extrema


class RatioNoise:
    """Logs the ratio noise of each step on a fresh round (``noise/*``, docs/metrics.md) and warns once per run when
    it alone puts answers outside the clip range (:func:`noise_warning`)."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.warned = False

    def log(
        self,
        metrics: dict[str, list],
        rows: list[torch.Tensor],
        epsilon_low: float | None,
        epsilon_high: float | None,
        step: int,
    ) -> dict[str, float] | None:
        """This process's :func:`~trl_loo_gspo.algorithms.noise.noise_rows`, padded with NaN rows to the longest
        process and gathered (two collectives, the sizes then the rows: every process calls it on the same steps),
        summarised and logged."""
        local = torch.cat(rows)
        padded = self.accelerator.pad_across_processes(local, dim=0, pad_index=math.nan)
        summary = noise_summary(self.accelerator.gather(padded))
        for name, value in (summary or {}).items():
            metrics[name].append(value)
        warning = noise_warning(summary, epsilon_low, epsilon_high, step)
        if warning is not None and not self.warned:
            self.warned = True
            if self.accelerator.is_main_process:
                logger.warning(warning)
        return summary

    def close_step(
        self, metrics: dict[str, list], accounting: StepAccounting, stats: torch.Tensor, epsilons: tuple, step: int
    ) -> None:
        """An optimizer step's end: its micro-batches' noise rows of a round generated with these weights
        (:meth:`log`), or 0 by construction when the round had no old-log-prob pass (:meth:`log_exact`; ``stats``:
        the step's reduced sums); nothing on other steps. ``epsilons``: the clip range in force."""
        if accounting.noise:  # every process alike
            self.log(metrics, accounting.noise, *epsilons, step)
        elif accounting.noise_exact:
            self.log_exact(metrics, float(stats[IDX["answers"]]))

    @staticmethod
    def log_exact(metrics: dict[str, list], answers: float) -> None:
        """A fresh round whose old log-probs are the loss pass's own (TRL skipped its old pass): every figure is 0
        by construction, logged without a collective (``answers``: the step's global count, already reduced)."""
        if answers > 0:
            metrics["noise/answers"].append(answers)
            for name in NOISE_METRICS[1:]:
                metrics[name].append(0.0)


#: Fraction of a fresh round's answers whose s_i is already outside the clip range above which the run warns.
NOISE_WARNING_FRACTION = 0.01


def noise_warning(
    summary: dict[str, float] | None, epsilon_low: float | None, epsilon_high: float | None, step: int
) -> str | None:
    """The warning for a fresh round whose noise alone puts more than :data:`NOISE_WARNING_FRACTION` of the answers
    outside the clip range, naming ε and the measured noise; ``None`` below it, and without a clip range (``None``)."""
    if summary is None or epsilon_low is None or summary["noise/out_of_range"] <= NOISE_WARNING_FRACTION:
        return None
    share, answers = summary["noise/out_of_range"], int(summary["noise/answers"])
    p90, top = summary["noise/abs_log_ratio/p90"], summary["noise/abs_log_ratio/max"]
    return (
        f"Ratio noise: at optimizer step {step}, with the weights that computed the old log-probabilities, "
        f"{share:.1%} of {answers} answers had a sequence ratio outside the clip range "
        f"[1 - {epsilon_low:g}, 1 + {epsilon_high:g}] (|log s| p90 {p90:.2e}, max {top:.2e}): the clip acts on "
        "numerical noise, not on policy change. In bf16, try cast_lm_head_to_fp32=True, or float32; or widen "
        "epsilon / epsilon_high (docs/method.md, 'Precision: what the clip sees'; metrics noise/*)."
    )


@dataclass(frozen=True)
class ClosedStep:
    """An optimizer step's figures over all processes: the sums (:data:`SUM_STATS`), and with our loss the ratio
    extrema, the true global denominator and the gradient correction ``provisional / true`` (1.0 when exact)."""

    stats: torch.Tensor
    extrema: torch.Tensor | None = None
    denominator: float | None = None
    factor: float = 1.0


def close_step(accounting: StepAccounting, reduce: Callable[..., torch.Tensor], column: int | None) -> ClosedStep:
    """Reduce the step's sums (and, with our loss, its extrema: two all-reduces) and find its true denominator
    (``column`` 0: tokens, 1: answers; ``None``: TRL's loss)."""
    stats = reduce(accounting.stats, reduction="sum")
    if column is None:
        return ClosedStep(stats)
    extrema = reduce(torch.cat([accounting.extrema, rank_clip_fractions(accounting.stats)]), reduction="max")
    # §3.3 exact denominator: the step's global count of valid tokens (or answers)
    denominator = max(float(stats[IDX["tokens" if column == 0 else "answers"]]), 1.0)
    return ClosedStep(stats, extrema, denominator, accounting.correction(denominator))


@torch.no_grad()
def rescale_gradients(model: torch.nn.Module, factor: float) -> None:
    """Multiply every gradient by ``factor`` (gradients are linear in the loss: exact, before clipping)."""
    for param in model.parameters():
        if param.grad is not None:
            param.grad.mul_(factor)


def entropy_sums(mask: torch.Tensor, entropies: torch.Tensor) -> torch.Tensor:
    """A micro-batch's :data:`SUM_STATS` with only the token count and the entropy sum (TRL's loss: what entropy
    feedback needs from the entropies TRL computed)."""
    fmask = mask.to(torch.float64)
    stats = torch.zeros(len(SUM_STATS), dtype=torch.float64, device=fmask.device)
    stats[IDX["tokens"]] = fmask.sum()
    stats[IDX["entropy_sum"]] = (entropies.to(torch.float64) * fmask).sum()
    return stats


def rank_clip_fractions(stats: torch.Tensor) -> torch.Tensor:
    """``[−low, high]``: this process's token fractions on the lower and upper clipped branch (reduced with ``max``
    across processes, they give TRL's ``clip_ratio/low_min`` and ``clip_ratio/high_max``)."""
    tokens = stats[IDX["tokens"]].clamp(min=1.0)
    return torch.stack([-stats[IDX["clip_low_tokens"]] / tokens, stats[IDX["clip_high_tokens"]] / tokens])


def log_eval_loss_stats(
    metrics: dict[str, list], stats: torch.Tensor, extrema: torch.Tensor, accelerator: Any, kl: bool, guard: bool
) -> None:
    """An evaluation batch's statistics, reduced over processes now (training reduces once per optimizer step)."""
    reduced = accelerator.reduce(stats, reduction="sum")
    extrema = accelerator.reduce(torch.cat([extrema, rank_clip_fractions(stats)]), reduction="max")
    log_loss_stats(metrics, reduced, extrema, kl, guard)


def log_loss_stats(
    metrics: dict[str, list], stats: torch.Tensor, extrema: torch.Tensor, kl: bool, guard: bool
) -> None:
    """Log a step's (or an eval batch's) reduced sums; ``extrema`` = ``[max s, max −s, max −low, max high]``."""
    s = {name: float(stats[i]) for name, i in IDX.items()}
    answers, tokens = max(s["answers"], 1.0), max(s["tokens"], 1.0)
    metrics["clip_ratio/low_answers"].append(s["clip_low_answers"] / answers)
    metrics["clip_ratio/high_answers"].append(s["clip_high_answers"] / answers)
    metrics["clip_ratio/region_answers"].append((s["clip_low_answers"] + s["clip_high_answers"]) / answers)
    metrics["clip_ratio/low_tokens"].append(s["clip_low_tokens"] / tokens)
    metrics["clip_ratio/high_tokens"].append(s["clip_high_tokens"] / tokens)
    metrics["clip_ratio/region_tokens"].append((s["clip_low_tokens"] + s["clip_high_tokens"]) / tokens)
    # TRL's names for the same token-weighted fractions (its dashboards read these); min/max over processes
    metrics["clip_ratio/low_mean"].append(s["clip_low_tokens"] / tokens)
    metrics["clip_ratio/high_mean"].append(s["clip_high_tokens"] / tokens)
    metrics["clip_ratio/region_mean"].append((s["clip_low_tokens"] + s["clip_high_tokens"]) / tokens)
    metrics["clip_ratio/low_min"].append(-float(extrema[2]))
    metrics["clip_ratio/high_max"].append(float(extrema[3]))
    metrics["ratio/mean"].append(s["ratio_sum"] / answers)
    if s["answers"] > 0:
        metrics["ratio/max"].append(float(extrema[0]))
        metrics["ratio/min"].append(-float(extrema[1]))
    metrics["entropy"].append(s["entropy_sum"] / tokens)
    if kl:
        metrics["kl"].append(s["kl_sum"] / tokens)
    if guard:
        metrics["guard/trigger_fraction"].append(s["guard_answers"] / answers)
