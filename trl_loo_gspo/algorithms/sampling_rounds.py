"""The decisions of dynamic sampling's rounds (method §3.1, docs/sampling.md), as pure functions: after each
generation round, what the sampler does next — stop (batch full, budget spent, round cap, too few rows for a group)
or generate another round (the continuations of passing probes, plus how many new prompts) — and, with the
two-stage probe, what becomes of each probed prompt (filtered, surplus, complete already, or continued at which group
size). The sampler (``trainer.rollout.DynamicSampler``) is the I/O shell: it generates, exchanges across ranks and
assembles the batch, and asks :func:`next_round` and :func:`probe_layout` what to do; every decision is taken here,
on values every rank shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .group_filter import adaptive_round_can_fill, allocate_group_sizes, refill_prompt_count

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


@dataclass(frozen=True)
class ProbeLayout:
    """What becomes of each probed prompt of a round (indices into the round's new prompts, each list ascending).

    Attributes:
        size_of: full group size of each passing prompt that got rows (size > 0), in ascending index order.
        filtered: the probe did not pass: decided now, as a group of the probe's answers.
        surplus: the probe passed but the batch had no room for its group (size 0): its answers are discarded.
        complete: size == the probe size: the probe answers are the whole group, decided now by the group filter.
        continued: size > the probe size: pending, the next round generates the ``size_of[j] - probe`` answers left.

    Every prompt is in exactly one of ``filtered``, ``surplus``, ``complete``, ``continued`` when the sizes are 0 or
    at least the probe size, which config validation ensures (``probe_generations < num_generations``, and
    ``probe_generations <= min_generations``) for pass rates in [0, 1]; a size strictly between 0 and the probe size
    would be in ``size_of`` only, as it was in the sampler before this function.
    """

    size_of: dict[int, int]
    filtered: list[int]
    surplus: list[int]
    complete: list[int]
    continued: list[int]


def probe_layout(
    probe_means: list[float],
    passing: list[bool],
    rows_missing: int,
    probe: int,
    num_generations: int,
    adaptive: bool,
    group_size_bounds: tuple[int, int],
    final: bool,
) -> ProbeLayout:
    """The two-stage probe's decisions for one round's new prompts (method §3.1 variant, docs/sampling.md).

    Prompt ``j`` passed its probe when ``passing[j]`` (its probe pass rate ``probe_means[j]`` strictly inside
    ``probe_pass_rate_band``, decided by the sampler's group filter). The passing prompts share the ``rows_missing``
    rows still open (after the groups completed this round; a negative count counts as 0): K (``num_generations``)
    rows each, in index order, for as many as fit, or with ``adaptive`` the sizes of
    :func:`~trl_loo_gspo.algorithms.group_filter.allocate_group_sizes` from their pass rates within
    ``group_size_bounds`` (the most informative first). On the ``final`` round no continuation can follow, so
    only groups of exactly ``probe`` answers are taken: with ``adaptive`` and ``min_generations == probe`` the
    sizes are allocated up to ``probe`` there (every passing prompt that fits gets a whole group now, rather than
    the least informative ones only); otherwise the rows given to larger groups stay unused. A passing prompt given
    no rows is surplus. The sizes taken add up to at most ``max(rows_missing, 0)`` for any pass rates (the
    guarantee of ``allocate_group_sizes``; tests/test_sampling_rounds.py).
    """
    if len(probe_means) != len(passing):
        raise ValueError(f"one pass flag per probe mean: {len(passing)} flags for {len(probe_means)} means")
    passed = [j for j, ok in enumerate(passing) if ok]
    rows = max(rows_missing, 0)
    # §3.1 two-stage probe: the passing prompts' group sizes at the rows still open (adaptive K or K each)
    if adaptive:
        low, high = group_size_bounds
        if final and low <= probe:  # no later round: groups of the probe's size are the ones that can be complete
            high = probe
        sizes = allocate_group_sizes([float(probe_means[j]) for j in passed], rows, low, high)
    else:
        fits = rows // num_generations
        sizes = [num_generations if position < fits else 0 for position in range(len(passed))]
    if final:  # no later round can continue a probe
        sizes = [size if size == probe else 0 for size in sizes]
    size_of = {j: size for j, size in zip(passed, sizes, strict=True) if size > 0}
    return ProbeLayout(
        size_of=size_of,
        filtered=[j for j, ok in enumerate(passing) if not ok],
        surplus=[j for j in passed if j not in size_of],
        complete=[j for j in sorted(size_of) if size_of[j] == probe],
        continued=[j for j in sorted(size_of) if size_of[j] > probe],
    )
