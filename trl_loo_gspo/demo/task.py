"""The demo's embedded task: integer addition with an exact verifier and content-disjoint splits.

Problems are ``a+b=`` with ``0 <= a, b < 10**digits``; the answer is the decimal sum. The split is made over
*unordered* pairs, so ``a+b`` and ``b+a`` always land in the same split (a commutative duplicate in training would
leak the validation answer). Everything is a pure function of the settings and the seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass

from datasets import Dataset

from ..verifiers.base import Verifier, VerifierResult

_INTEGER = re.compile(r"\s*(-?\d+)\s*")


@dataclass(frozen=True)
class AdditionTask:
    """Settings of the addition task. ``validation_pairs`` unordered pairs (both orders) are held out, and
    ``tuning_pairs`` more for a tuning split (:meth:`tuning_split`; 0, the default, holds none out and leaves the
    other two splits exactly as drawn without the field)."""

    digits: int = 2
    validation_pairs: int = 250
    seed: int = 0
    tuning_pairs: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 4:
            raise ValueError(f"digits must be in [1, 4], got {self.digits}")
        total = self.num_unordered_pairs
        if not 0 < self.validation_pairs < total:
            raise ValueError(f"validation_pairs must be in (0, {total}) for digits={self.digits}")
        if not 0 <= self.tuning_pairs < total - self.validation_pairs:
            raise ValueError(
                f"tuning_pairs must be in [0, {total - self.validation_pairs}) for digits={self.digits} and "
                f"validation_pairs={self.validation_pairs}"
            )

    @property
    def num_unordered_pairs(self) -> int:
        n = 10**self.digits
        return n * (n + 1) // 2

    def settings(self) -> dict:
        return asdict(self)

    @property
    def has_tuning_split(self) -> bool:
        return self.tuning_pairs > 0

    def splits(self) -> tuple[Dataset, Dataset]:
        """``(train, validation)`` datasets with columns ``prompt`` and ``answer``; disjoint by content."""
        pairs = self._pairs()
        held_out = self.validation_pairs + self.tuning_pairs
        return _rows(pairs[held_out:]), _rows(pairs[: self.validation_pairs])

    def tuning_split(self) -> Dataset:
        """The tuning split (``tuning_pairs`` unordered pairs, both orders), disjoint by content from both
        :meth:`splits`; raises ``ValueError`` when the task holds none out."""
        if not self.has_tuning_split:
            raise ValueError("this task holds out no tuning split: set tuning_pairs > 0")
        return _rows(self._pairs()[self.validation_pairs : self.validation_pairs + self.tuning_pairs])

    def _pairs(self) -> list[tuple[int, int]]:
        n = 10**self.digits
        pairs = [(a, b) for a in range(n) for b in range(a, n)]
        random.Random(self.seed).shuffle(pairs)
        return pairs


def _rows(pairs: list[tuple[int, int]]) -> Dataset:
    rows = []
    for a, b in pairs:
        orders = [(a, b)] if a == b else [(a, b), (b, a)]
        rows.extend({"prompt": f"{x}+{y}=", "answer": str(x + y)} for x, y in orders)
    return Dataset.from_list(rows)


def verify(completion: str, answer: str) -> float:
    """Exact check: 1.0 if the completion is the answer's integer (surrounding whitespace allowed), else 0.0.

    Anything else — another number, extra characters, an empty or garbage string — scores 0.0.
    """
    match = _INTEGER.fullmatch(completion)
    return float(match is not None and match.group(1) == str(int(answer)))


def addition_reward(completions: list, answer: list[str], **_: object) -> list[float]:
    """TRL reward function for the addition task (plain-text or conversational completions)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [verify(text, ans) for text, ans in zip(texts, answer, strict=True)]


class AdditionVerifier(Verifier):
    """The exact addition check as a :class:`~trl_loo_gspo.verifiers.Verifier` (for registration and validation)."""

    name = "addition_exact"
    version = "1"

    def verify(self, completion: str, answer: str | None = None, **_: object) -> VerifierResult:
        if answer is None:
            return VerifierResult(None, "unscorable", "parse_failure", {"reason": "no answer column"})
        score = verify(completion, answer)
        return VerifierResult(score, "pass" if score else "fail")
