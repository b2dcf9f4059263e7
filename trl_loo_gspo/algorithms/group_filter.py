"""Pure decision functions for dynamic sampling (method §3.1): which groups carry a comparison signal, which groups
fill the batch, how many prompts to draw next, a refill sampler with its own seed and cursor, and when (and which)
filtered prompts are re-checked.

Everything here is deterministic given its inputs: the trainer calls it on rewards gathered from all processes, so
every process takes the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GROUP_FILTERS = ("zero_variance", "pass_rate_band")


@dataclass(frozen=True)
class GroupDecision:
    """Per-group outcome of the filter (tensors of shape ``(G,)``, one entry per group in ascending id order)."""

    ids: torch.Tensor  # the group ids
    keep: torch.Tensor  # bool: the group carries a comparison signal and may reach the loss
    mean: torch.Tensor  # mean scorable reward (NaN when no scorable answer)
    all_correct: torch.Tensor  # bool: filtered, and its answers all succeeded
    all_wrong: torch.Tensor  # bool: filtered, and its answers all failed (or none could be scored)


def group_decisions(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    mode: str = "zero_variance",
    tolerance: float = 1e-6,
    band: tuple[float, float] = (0.0, 1.0),
) -> GroupDecision:
    """Decide, per group, whether it carries a comparison signal (method §3.1).

    * ``"zero_variance"``: keep groups with at least two scorable answers whose rewards spread by more than
      ``tolerance`` (a tolerance, since floating-point noise gives constant groups a tiny non-zero spread).
    * ``"pass_rate_band"``: keep groups whose mean scorable reward lies strictly inside ``band = (low, high)``, and
      that have at least two scorable answers (for non-binary rewards; note that a group can have a mean inside the
      band and still no spread, e.g. all answers at 0.5 — such a group is dropped too).

    A filtered group is "all correct" when its mean is above the band's midpoint (``zero_variance``: above 0, for
    rewards where success is positive and failure is 0 or negative), otherwise "all wrong".
    """
    if mode not in GROUP_FILTERS:
        raise ValueError(f"group_filter must be one of {GROUP_FILTERS}, got {mode!r}")
    ids, inverse = torch.unique(group_ids, return_inverse=True)
    g = ids.numel()
    scorable = ~torch.isnan(rewards)
    values = torch.where(scorable, rewards, torch.zeros_like(rewards)).to(torch.float64)
    counts = torch.zeros(g, dtype=torch.float64).index_add_(0, inverse, scorable.to(torch.float64))
    sums = torch.zeros(g, dtype=torch.float64).index_add_(0, inverse, values)
    mean = torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan))
    high = torch.full((g,), -math.inf, dtype=torch.float64).scatter_reduce(
        0, inverse, torch.where(scorable, values, torch.full_like(values, -math.inf)), reduce="amax"
    )
    low = torch.full((g,), math.inf, dtype=torch.float64).scatter_reduce(
        0, inverse, torch.where(scorable, values, torch.full_like(values, math.inf)), reduce="amin"
    )
    spread = (counts >= 2) & ((high - low) > tolerance)
    if mode == "zero_variance":
        keep = spread
        threshold = 0.0
    else:
        band_low, band_high = band
        # §3.1 variant for non-binary rewards: the group's mean strictly inside the band
        keep = spread & (mean > band_low) & (mean < band_high)
        threshold = 0.5 * (band_low + band_high)
    filtered = ~keep
    success = torch.nan_to_num(mean, nan=-math.inf) > threshold
    return GroupDecision(ids=ids, keep=keep, mean=mean, all_correct=filtered & success, all_wrong=filtered & ~success)


@dataclass(frozen=True)
class Selection:
    """Which candidate groups fill the batch (indices into the candidate list, in order)."""

    chosen: list[int]  # kept groups that fill the batch
    padding_rows: int  # rows left empty at the cap, filled with zero-weight padding
    surplus: int  # kept groups that did not fit: discarded (never carried into a later step)


def select_groups(keep: list[bool], sizes: list[int], rows: int, exhausted: bool) -> Selection:
    """Fill a batch of ``rows`` rows with kept groups in candidate order (group j has ``sizes[j]`` rows).

    A kept group that does not fit in the rows left is surplus and is discarded: carried into a later step it would
    be off-policy while the loss treats it as on-policy. Rows left at the cap (``exhausted``) become zero-weight
    padding; before the cap, leaving rows is an error.
    """
    chosen: list[int] = []
    filled = surplus = 0
    for j, (k, size) in enumerate(zip(keep, sizes, strict=True)):
        if not k:
            continue
        if filled + size <= rows:
            chosen.append(j)
            filled += size
        else:
            surplus += 1
    if filled < rows and not exhausted:
        raise ValueError("select_groups called before the batch could be filled and before the cap")
    return Selection(chosen=chosen, padding_rows=rows - filled, surplus=surplus)


def allocate_group_sizes(pass_rates: list[float], rows: int, k_min: int, k_max: int) -> list[int]:
    """Per-prompt group sizes for adaptive K (method §3.1, "let K vary per prompt"), at a fixed row budget.

    The most informative prompts first — informativeness p(1−p), the variance of a Bernoulli answer — each gets
    ``k_min + (k_max − k_min)·4p(1−p)`` answers (rounded), and the last one takes what is left if that is at least
    ``k_min``; rows too few for another group are spread over the groups already sized, up to ``k_max``. If rows
    too few for a group are still left (every sized group at ``k_max``), sized groups give rows back (down to
    ``k_min``) until the rest makes one more group of ``k_min``: a later round can always fill what this one leaves,
    unless every sized group is at ``k_min`` already. Returns one size per prompt (0 = not continued); every size is
    0 or in [``k_min``, ``k_max``], and the sizes add up to at most ``rows`` (a negative ``rows`` counts as 0; less
    only when the prompts run out, or when the rest is left for a later round), whatever the pass rates.

    A pass rate outside [0, 1] is not the pass rate of a Bernoulli answer (it is the probe's mean reward, when
    rewards leave [0, 1] and ``probe_pass_rate_band`` reaches beyond [0, 1]): its p(1−p) would be negative, a size
    below ``k_min`` (even negative) that hands its rows to the other prompts. Such a rate counts as uninformative,
    p(1−p) = 0, exactly as if clipped to [0, 1] (p(1−p) < 0 exactly outside [0, 1]): ``k_min`` answers, ranked with
    the rates 0 and 1 after every rate strictly inside. A NaN rate counts the same way.
    """
    if not 1 <= k_min <= k_max:
        raise ValueError(f"need 1 <= k_min <= k_max, got {k_min}, {k_max}")
    weights = [_bernoulli_variance(p) for p in pass_rates]
    order = sorted(range(len(pass_rates)), key=lambda j: (-weights[j], j))
    sizes = [0] * len(pass_rates)
    left = rows
    for position, j in enumerate(order):
        if left < k_min:
            break
        size = min(round(k_min + (k_max - k_min) * 4 * weights[j]), left)  # 4p(1-p) in [0, 1]: k_min..k_max
        if 0 < left - size < k_min:  # what would be left cannot make a group
            more_prompts = position + 1 < len(order)
            if more_prompts and left - k_min >= k_min:
                size = min(left - k_min, k_max)  # leave exactly one minimal group for the next prompt
            else:
                size = min(left, k_max)  # take it now
        sizes[j] = size
        left -= size
    for j in order:  # spread a remainder too small for a group over the groups already sized
        if left == 0:
            break
        if sizes[j]:
            extra = min(k_max - sizes[j], left)
            sizes[j] += extra
            left -= extra
    if 0 < left < k_min:  # no later round could fill it: leave a full minimal group instead
        for j in reversed(order):
            if left >= k_min:
                break
            if sizes[j] > k_min:
                back = min(sizes[j] - k_min, k_min - left)
                sizes[j] -= back
                left += back
    return sizes


def _bernoulli_variance(p: float) -> float:
    """p(1−p) for a pass rate p in [0, 1]; 0 for any other value (negative there, NaN for NaN): the same as clipping
    p to [0, 1] first."""
    variance = p * (1 - p)
    return variance if variance > 0 else 0.0


def adaptive_round_can_fill(rows_missing: int, k_min: int) -> bool:
    """Whether another adaptive round can add a group: it needs at least ``k_min`` missing rows (method §3.1). A round
    with fewer would generate probes that no group size can use."""
    return rows_missing >= k_min


def refill_prompt_count(
    missing: int, keep_rate: float, num_processes: int, num_generations: int, max_prompts: int
) -> int:
    """How many new prompts to draw for the next generation round.

    Enough to cover ``missing`` groups at the observed ``keep_rate`` (floored at 1/8, so that a run of bad luck does
    not ask for an unbounded round), at most ``max_prompts`` (one generation batch), and rounded up so that the
    round's rows (``prompts × num_generations``) split evenly over the processes, as TRL's own batches do. The
    result depends on the process count only through that rounding, which is a no-op whenever
    ``num_generations`` is a multiple of ``num_processes``.
    """
    if missing <= 0:
        return 0
    wanted = math.ceil(missing / max(keep_rate, 0.125))
    wanted = min(max(wanted, missing), max_prompts)
    unit = num_processes // math.gcd(num_generations, num_processes)
    return math.ceil(wanted / unit) * unit


def resolve_refill_seed(refill_seed: int | None, data_seed: int | None, seed: int) -> int:
    """The refill sampler's seed: ``refill_seed`` when set, else the data seed ``data_seed`` when set, else ``seed``
    (the order in which Transformers' ``Trainer`` seeds its data sampler: ``data_seed``, falling back to ``seed``)."""
    if refill_seed is not None:
        return refill_seed
    return seed if data_seed is None else data_seed


class RefillSampler:
    """Draws dataset indices for refill rounds: its own cursor over the dataset, cycling pass after pass.

    With ``shuffle`` (the default) each pass is a new permutation seeded by ``seed`` and the pass number; without it
    (the trainer's ``shuffle_dataset=False``, where TRL serves the prompts in the order ``0, 1, …, n−1``) each pass
    walks the dataset from its end, ``n−1, …, 0``, so that refill takes the prompts the train sampler reaches last in
    the epoch rather than the batch being filled and the next ones; ``seed`` plays no part. Independent of the global
    RNG and of the Trainer's dataloader, so that every process draws the same indices and a checkpoint can restore
    exactly where it was (:meth:`state_dict`).
    """

    def __init__(self, dataset_size: int, seed: int, shuffle: bool = True) -> None:
        if dataset_size <= 0:
            raise ValueError("the refill sampler needs a non-empty dataset")
        self.dataset_size = dataset_size
        self.seed = seed
        self.shuffle = bool(shuffle)
        self.epoch = 0
        self.cursor = 0
        self._order = self._pass_order(0)

    def _pass_order(self, epoch: int) -> list[int] | range:
        if not self.shuffle:  # from the end: the train sampler serves 0, 1, … (issue 44, B3)
            return range(self.dataset_size - 1, -1, -1)
        # unchanged since release 0.1: a saved state resumes the same permutation
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def draw(self, count: int, exclude: set[int] | None = None) -> list[int]:
        """The next ``count`` indices not in ``exclude`` (wrapping into a new pass as needed).

        If every index is excluded, exclusion is ignored rather than looping forever.
        """
        exclude = exclude or set()
        if len(exclude) >= self.dataset_size:
            exclude = set()
        drawn: list[int] = []
        while len(drawn) < count:
            if self.cursor >= self.dataset_size:
                self.epoch += 1
                self.cursor = 0
                self._order = self._pass_order(self.epoch)
            index = self._order[self.cursor]
            self.cursor += 1
            if index not in exclude:
                drawn.append(index)
        return drawn

    def state_dict(self) -> dict:
        """``{"dataset_size", "seed", "shuffle", "epoch", "cursor"}`` (JSON-serialisable)."""
        return {
            "dataset_size": self.dataset_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "cursor": self.cursor,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`. A state without ``"shuffle"`` (saved by release 0.1, whose sampler always
        shuffled) counts as shuffled. Raises ``ValueError`` when the state belongs to another dataset size, another
        shuffle setting, or (when shuffling) another seed: its cursor would point into a different order."""
        if int(state["dataset_size"]) != self.dataset_size:
            raise ValueError(
                f"refill sampler state is for a dataset of {state['dataset_size']} prompts, this dataset has "
                f"{self.dataset_size}"
            )
        saved_shuffle = bool(state.get("shuffle", True))
        if saved_shuffle != self.shuffle:
            raise ValueError(
                f"refill sampler state was saved with shuffle={saved_shuffle} (a state without a 'shuffle' entry "
                f"comes from release 0.1, which always shuffled), but this sampler has shuffle={self.shuffle} "
                "(the trainer's shuffle_dataset): resume with the setting the checkpoint was saved with"
            )
        if self.shuffle and int(state["seed"]) != self.seed:
            raise ValueError(
                f"refill sampler state was saved with seed {state['seed']}, this sampler has seed {self.seed} "
                "(refill_seed, else data_seed, else seed): resume with the seed the checkpoint was saved with"
            )
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
        self._order = self._pass_order(self.epoch)


def oldest_filtered(registry: dict[int, dict], step: int, min_age: int, limit: int) -> list[int]:
    """Filtered prompts to re-admit at optimizer step ``step``, oldest first (method §3.1).

    ``registry`` maps dataset index → ``{"step": <step at which it was filtered>, ...}``. Returns the indices filtered
    at least ``min_age`` steps before ``step``, ordered by the step at which they were filtered (ties: lower index
    first), at most ``limit`` of them: the prompts waiting longest go first, so none starves whatever its index.
    """
    if limit <= 0:
        return []
    waiting = [(int(record["step"]), index) for index, record in registry.items() if step - record["step"] >= min_age]
    return [index for _, index in sorted(waiting)[:limit]]


class RecheckSchedule:
    """When filtered prompts are re-checked (method §3.1; ``recheck_filtered_every = N``): at the first generation
    round at or after each multiple of N optimizer steps (never at step 0), once per multiple.

    Generation rounds need not fall on multiples of N (a round spans ``steps_per_generation × num_iterations /
    gradient_accumulation_steps`` optimizer steps), so a test ``step % N == 0`` would only fire every
    lcm(N, round span) steps. ``due_step`` is the next multiple of N still to serve; it is checkpointed
    (:meth:`state_dict`). ``every=None`` never fires.
    """

    def __init__(self, every: int | None) -> None:
        if every is not None and every < 1:
            raise ValueError(f"the re-check interval must be >= 1, got {every}")
        self.every = every
        self.due_step: int | None = every  # the first multiple after step 0

    def fire(self, step: int) -> bool:
        """Whether the generation round at optimizer step ``step`` re-checks; if so, ``due_step`` moves on to the first
        multiple of N after ``step`` (a round that reaches past several multiples serves them all at once)."""
        if self.every is None or step < self.due_step:
            return False
        self.due_step = (step // self.every + 1) * self.every
        return True

    def readmit(self, registry: dict[int, dict], step: int, limit: int) -> list[int]:
        """The prompts to re-admit in the round at ``step``: when :meth:`fire` says so, those filtered at least N steps
        ago, oldest first, at most ``limit`` (:func:`oldest_filtered`); otherwise none. Does not touch
        ``registry``: the caller removes the returned indices from it."""
        if not self.fire(step):
            return []
        return oldest_filtered(registry, step, self.every, limit)

    def state_dict(self) -> dict:
        """``{"every": N or None, "due_step": int or None}`` (JSON-serialisable)."""
        return {"every": self.every, "due_step": self.due_step}

    def load_state_dict(self, state: dict | None) -> None:
        """Resume from :meth:`state_dict`. ``None`` (a checkpoint saved before the schedule existed) keeps the fresh
        schedule: the first round at or after step N re-checks. A state saved with another N keeps this N and serves
        its first multiple after the last multiple the saved schedule served."""
        if state is None or self.every is None:
            return
        saved_every, saved_due = state.get("every"), state.get("due_step")
        if saved_every is None or saved_due is None:
            return
        saved_every, saved_due = int(saved_every), int(saved_due)
        if saved_every == self.every:
            self.due_step = saved_due
        else:
            served = saved_due - saved_every  # the last multiple of the saved N already served (0: none yet)
            self.due_step = (served // self.every + 1) * self.every


def due_for_recheck(registry: dict[int, dict], step: int, every: int | None, limit: int) -> list[int]:
    """Prompts to re-admit at ``step`` without a schedule's state (kept for callers of release 0.1).

    Fires only when ``step`` is a positive multiple of ``every``, which misses multiples that fall between
    generation rounds: use :class:`RecheckSchedule` (``RecheckSchedule(every).readmit(registry, step, limit)``).
    Returns the prompts filtered at least ``every`` steps earlier, oldest first (:func:`oldest_filtered`), at most
    ``limit`` of them.
    """
    if every is None or step == 0 or step % every != 0:
        return []
    return oldest_filtered(registry, step, every, limit)


def budget_reached(tokens_used: int, budget: int | None) -> bool:
    """Whether a rollout-token budget is spent (every generated token counts; ``None`` means no budget)."""
    return budget is not None and tokens_used >= budget
