"""A mixed-difficulty sum task on which each component of the method has something to act on.

Problems add 1 to 4 numbers, each of 1 to 3 digits (``7=``, ``12+345=``, ``5+67+890+12=``), in equal shares per
number of terms. The expected completion writes one step per addition, left to right, as in
:mod:`~trl_loo_gspo.demo.multistep` (``12+345=357``); a single number is copied (``7=`` → ``7``). The final check is
exact (:func:`~trl_loo_gspo.demo.multistep.final_score`: the last step's result, or a bare integer).

Why this task (the demo's 2-digit addition gives each component almost nothing to act on):

* **Dynamic sampling** needs groups without a comparison signal. Copying one number is learned at once (groups all
  right) and four 3-digit numbers stay out of reach of a 0.5M-parameter policy for a long time (groups all wrong), so
  about two thirds of the groups start degenerate (62–68% over 5 seeds: ``benchmarks/mixed_task_profile.py``).
* **Token-total aggregation** weights an answer by its length T_i; here lengths run from 2 tokens (a copied digit
  and the end of sequence) to ~40 (three steps with 4-digit sums): p90/p10 ≈ 8 at the warm start, and length
  correlates with difficulty.
* **LOO vs group-mean vs std-scaled advantages** differ most when groups are small and pass rates vary by prompt.
* **Response-level clipping** differs from token-level clipping most on long answers, and only off-policy: the
  plan (`recipes/ablations/mixed.yaml`) makes 4 optimizer steps per generation round (on-policy, every ratio is 1
  and the two clip rules give the same update).

The split is made over the *multiset* of the numbers within each number of terms (a permutation of a validation
problem never appears in training), and the validation split has the same mix of terms as training. With
``tuning_per_terms > 0`` a third split, disjoint from both by the same rule, is held out for choosing settings (e.g.
a learning rate per variant: :meth:`MixedSumTask.tuning_split`), so that the validation split is scored only once.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from datasets import Dataset

from .multistep import _row, final_score, running_sums_score


@dataclass(frozen=True)
class MixedSumTask:
    """Settings of the mixed-difficulty sum task: ``train_per_terms`` / ``validation_per_terms`` /
    ``tuning_per_terms`` problems for each number of terms ``min_terms`` … ``max_terms``, numbers of 1 …
    ``max_digits`` digits (digit count uniform, then the value) or, with ``max_operand`` set, uniform in
    0 … ``max_operand`` (the chained-addition task: e.g. 2–4 terms of 0–99, every answer a worked chain of steps).
    ``tuning_per_terms = 0`` (the default) holds out no tuning split; with the defaults of ``min_terms`` and
    ``max_operand`` the splits are exactly those of a task without these fields."""

    max_terms: int = 4
    max_digits: int = 3
    train_per_terms: int = 900
    validation_per_terms: int = 100
    seed: int = 0
    tuning_per_terms: int = 0
    min_terms: int = 1
    max_operand: int | None = None
    answer_format: str = "steps"

    #: The policy's character set and the cache folder prefix (see ``demo.policy``).
    alphabet = "0123456789+=;"
    policy_name = "mixedsum"

    def __post_init__(self) -> None:
        if not 1 <= self.max_terms <= 4 or not 1 <= self.max_digits <= 3:
            raise ValueError(f"max_terms must be in [1, 4] and max_digits in [1, 3], got {self.max_terms}, "
                             f"{self.max_digits}")  # fmt: skip
        if self.answer_format not in ("steps", "sums"):
            raise ValueError(f"answer_format must be 'steps' or 'sums', got {self.answer_format!r}")
        if not 1 <= self.min_terms <= self.max_terms:
            raise ValueError(f"min_terms must be in [1, max_terms={self.max_terms}], got {self.min_terms}")
        if self.max_operand is not None and not 1 <= self.max_operand <= 999:
            raise ValueError(
                f"max_operand must be in [1, 999] (or None: numbers by digit count), got {self.max_operand}"
            )
        if self.train_per_terms <= 0 or self.validation_per_terms <= 0 or self.tuning_per_terms < 0:
            raise ValueError("train_per_terms and validation_per_terms must be > 0, tuning_per_terms >= 0")
        wanted = self.train_per_terms + self.validation_per_terms + self.tuning_per_terms
        capacity = self._distinct_problems(self.min_terms)
        if wanted > capacity:
            raise ValueError(
                f"train_per_terms + validation_per_terms + tuning_per_terms must be <= {capacity} (the distinct "
                f"problems of {self.min_terms} term(s)), got {wanted}"
            )

    def _distinct_problems(self, terms: int) -> int:
        """Distinct multisets of ``terms`` numbers (the unit of the split)."""
        values = 10**self.max_digits if self.max_operand is None else self.max_operand + 1
        return math.comb(values + terms - 1, terms)

    @property
    def largest_operand(self) -> int:
        return 10**self.max_digits - 1 if self.max_operand is None else self.max_operand

    @property
    def max_new_tokens(self) -> int:
        """Enough characters for every step of the largest problem, plus the end-of-sequence token."""
        width = len(str(self.largest_operand * self.max_terms))
        if self.answer_format == "sums":  # one running sum per addition, ';'-separated
            return max(self.max_terms - 1, 1) * (width + 1) + 1
        return max(self.max_terms - 1, 1) * (3 * width + 3) + 1

    def settings(self) -> dict:
        return asdict(self)

    def splits(self) -> tuple[Dataset, Dataset]:
        """``(train, validation)`` with ``prompt``, ``answer``, ``operands``, ``solution`` and ``terms``; disjoint by
        the multiset of the operands; rows shuffled (the warm start calibrates on the first training rows)."""
        train, validation, _ = self._three_splits()
        return Dataset.from_list(train), Dataset.from_list(validation)

    @property
    def has_tuning_split(self) -> bool:
        return self.tuning_per_terms > 0

    def tuning_split(self) -> Dataset:
        """The tuning split (``tuning_per_terms`` problems per number of terms), disjoint by multiset from both
        :meth:`splits`; raises ``ValueError`` when the task holds none out."""
        if not self.has_tuning_split:
            raise ValueError("this task holds out no tuning split: set tuning_per_terms > 0")
        return Dataset.from_list(self._three_splits()[2])

    def _three_splits(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        rng = random.Random(self.seed)
        train: list[dict[str, Any]] = []
        validation: list[dict[str, Any]] = []
        tuning: list[dict[str, Any]] = []
        held_out = self.validation_per_terms + self.tuning_per_terms
        for terms in range(self.min_terms, self.max_terms + 1):
            seen: set[tuple[int, ...]] = set()
            rows: list[dict[str, Any]] = []
            while len(rows) < self.train_per_terms + held_out:
                numbers = [self._number(rng) for _ in range(terms)]
                key = tuple(sorted(numbers))
                if key in seen:
                    continue
                seen.add(key)
                rows.append(_problem(numbers, self.answer_format))
            validation += rows[: self.validation_per_terms]
            tuning += rows[self.validation_per_terms : held_out]
            train += rows[held_out:]
        rng.shuffle(train)
        rng.shuffle(validation)
        if tuning:  # (a task without a tuning split draws exactly what it drew before the field existed)
            rng.shuffle(tuning)
        return train, validation, tuning

    def _number(self, rng: random.Random) -> int:
        if self.max_operand is not None:
            return rng.randint(0, self.max_operand)
        digits = rng.randint(1, self.max_digits)
        return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)

    def score(self, completion: str, row: dict[str, Any]) -> float:
        """The final check for one completion (used by the warm start's pass-rate measurement)."""
        score = final_score if self.answer_format == "steps" else running_sums_score
        return score(completion, row["answer"])


def _problem(numbers: list[int], answer_format: str = "steps") -> dict[str, Any]:
    """A row of the multi-step task; one number is copied (its solution is the number itself). ``"sums"``: the
    solution is the running sums only (``12+34+5=`` → ``46;51``)."""
    row = _row(numbers) if len(numbers) > 1 else {
        "prompt": f"{numbers[0]}=", "answer": str(numbers[0]), "operands": numbers, "solution": str(numbers[0]),
    }  # fmt: skip
    if answer_format == "sums" and len(numbers) > 1:
        sums = [sum(numbers[: k + 1]) for k in range(1, len(numbers))]
        row = {**row, "solution": ";".join(map(str, sums))}
    return {**row, "terms": len(numbers)}


def group_profile(
    scores: list[list[float]], lengths: list[list[int]], labels: list[Any], max_length: int | None = None
) -> dict[str, Any]:
    """What dynamic sampling and token-total aggregation have to act on, from sampled groups.

    ``scores[i]`` / ``lengths[i]``: the answers of problem i (scores, valid lengths in tokens); ``labels[i]``: its
    stratum (e.g. the number of terms). Returns the fraction of degenerate groups (all scores equal: all right or
    all wrong) overall and per label, the pass rate per label, and the spread of answer lengths (percentiles and
    the ratio of the 90th to the 10th percentile); with ``max_length`` (the generation limit) also the fraction of
    answers that reached it (truncated, or ended exactly at the limit).
    """

    def share(groups: list[list[float]], test) -> float:
        return sum(test(g) for g in groups) / len(groups) if groups else float("nan")

    def percentile(values: list[int], q: float) -> float:
        ordered = sorted(values)
        return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])

    by_label: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        by_label.setdefault(label, []).append(i)
    flat = [n for group in lengths for n in group]
    profile = {
        "groups": len(scores),
        "group_size": len(scores[0]) if scores else 0,
        "degenerate": share(scores, lambda g: len(set(g)) == 1),
        "all_right": share(scores, lambda g: min(g) == 1.0),
        "all_wrong": share(scores, lambda g: max(g) == 0.0),
        "length_tokens": {q: percentile(flat, p) for q, p in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))},
        "length_min_max": [min(flat), max(flat)],
        "per_label": {},
    }
    if max_length is not None:
        profile["at_length_limit"] = sum(n >= max_length for n in flat) / len(flat)
    profile["length_p90_over_p10"] = profile["length_tokens"]["p90"] / max(profile["length_tokens"]["p10"], 1.0)
    for label, rows in sorted(by_label.items()):
        groups = [scores[i] for i in rows]
        profile["per_label"][str(label)] = {
            "groups": len(rows),
            "degenerate": share(groups, lambda g: len(set(g)) == 1),
            "pass_rate": sum(sum(g) for g in groups) / sum(len(g) for g in groups),
            "mean_length_tokens": sum(sum(lengths[i]) for i in rows) / sum(len(lengths[i]) for i in rows),
        }
    return profile
