"""The decisions of dynamic sampling's rounds (method §3.1, docs/sampling.md), as a pure function: after each
generation round, what the sampler does next — stop (batch full, budget spent, round cap, too few rows for a group)
or generate another round (the continuations of passing probes, plus how many new prompts). The sampler
(``trainer.rollout.DynamicSampler``) is the I/O shell: it generates, exchanges across ranks and assembles the batch,
and asks :func:`next_round` what to do; every decision is taken here, on values every rank shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .group_filter import adaptive_round_can_fill, refill_prompt_count

#: Why the rounds stopped before the batch was full (``Stop.reason``); ``None`` = the batch is full.
BUDGET_SPENT = "rollout-token budget reached"
ROUND_CAP = "round cap"


@dataclass(frozen=True)
class RoundRules:
    """The settings the decisions read (from the sampling plan and the batch shape).

    Attributes:
        total_rows: rows of one generation batch (all ranks).
        num_generations: K, answers per prompt of a whole group.
        max_rounds: ``max_sampling_rounds`` (the first round included).
        probe: ``probe_generations`` (two-stage sampling), or ``None``.
        adaptive: ``adaptive_group_size`` (group sizes from the probe pass rates).
        min_group: the smallest group (``min_generations``; with ``adaptive`` only).
        ranks: processes (a round's prompts are spread evenly over them).
    """

    total_rows: int
    num_generations: int
    max_rounds: int
    probe: int | None = None
    adaptive: bool = False
    min_group: int = 1
    ranks: int = 1

    @property
    def groups_per_batch(self) -> int:
        return self.total_rows // self.num_generations

    def new_prompts_usable(self, round_number: int) -> bool:
        """Whether prompts drawn for round ``round_number`` could still be trained: without the probe always; with it,
        only before the last round (the rest of a group comes in the next round), unless a group of exactly the
        probe size is a whole group (``adaptive`` with ``min_group`` = the probe size)."""
        if not self.probe or round_number < self.max_rounds:
            return True
        return self.adaptive and self.min_group == self.probe


@dataclass(frozen=True)
class RoundState:
    """Where a batch stands after a round (the same on every rank).

    Attributes:
        rounds: rounds generated so far (≥ 1).
        filled: rows of the groups kept so far, capped at ``total_rows``.
        pending_groups: probes that passed and whose continuation the next round carries.
        pending_rows: the rows those groups will have once complete.
        kept: groups kept so far (pending ones count: they passed their probe).
        decided: groups decided so far (kept, filtered; pending ones count).
        spent: the rollout-token budget is reached, counting this batch's rounds.
    """

    rounds: int
    filled: int
    pending_groups: int = 0
    pending_rows: int = 0
    kept: int = 0
    decided: int = 0
    spent: bool = False


@dataclass(frozen=True)
class Stop:
    """No further round: ``reason`` is ``None`` when the batch is full, else why it is padded."""

    reason: str | None = None


@dataclass(frozen=True)
class NextRound:
    """Generate another round: the pending continuations (if any) and ``draw`` new prompts (``layout`` answers each:
    the probe size, or K)."""

    draw: int
    layout: int


def next_round(rules: RoundRules, state: RoundState) -> Stop | NextRound:
    """What the sampler does after a round (docs/sampling.md): stop, or generate another round and how many new
    prompts it draws. Guarantees (tests/test_sampling_rounds.py): nothing new is drawn once the budget is spent (only
    the continuations of probes that already passed); no round past ``max_rounds``; a round always carries
    something; the batch is padded only at the budget, the cap, or when fewer rows are missing than the smallest
    group."""
    k, pending = rules.num_generations, state.pending_groups > 0
    if state.filled >= rules.total_rows and not pending:
        return Stop(None)
    if state.spent and not pending:  # equal budget: no round past it (at most the last one over)
        return Stop(BUDGET_SPENT)
    if pending:  # the next round carries their continuations; new prompts only for the rows still open
        open_rows = rules.total_rows - state.filled - state.pending_rows
    else:
        if state.rounds >= rules.max_rounds:
            return Stop(ROUND_CAP)
        open_rows = rules.total_rows - state.filled
        if rules.adaptive and not adaptive_round_can_fill(open_rows, rules.min_group):
            return Stop(f"{open_rows} missing rows < min_generations={rules.min_group}")
    layout = rules.probe or k
    if state.spent:  # only the continuations of probes that already passed: nothing new
        return NextRound(0, layout)
    if not rules.new_prompts_usable(state.rounds + 1):  # the next round is the last: a new probe could not finish
        return NextRound(0, layout) if pending else Stop(ROUND_CAP)
    if open_rows <= 0 or (rules.adaptive and not adaptive_round_can_fill(open_rows, rules.min_group)):
        return NextRound(0, layout)  # (pending here: the rows are reserved for the continuations)
    # §3.1 refill: enough new prompts for the missing groups at the keep rate seen so far (at most one batch)
    keep_rate = state.kept / max(state.decided, 1)
    count = refill_prompt_count(math.ceil(open_rows / k), keep_rate, rules.ranks, layout, rules.groups_per_batch)
    return NextRound(count, layout)
