"""A multi-step arithmetic task with checkable intermediate results (method §6 process feedback).

Problems add ``terms`` numbers (``12+34+56=``); the expected completion writes one step per addition, left to right:
``12+34=46;46+56=102``. The final score is 1 when the last step's result is the sum (a bare ``102`` also counts:
the final check looks at the answer only). With ``emit_spans=True`` the verifier also returns one
:class:`~trl_loo_gspo.verifiers.SpanSignal` per step (``key="step:k"``): value 1 when the step is arithmetically right
*and* grounded — both operands come from the problem or from an earlier right step — else 0. Hack detectors, each
sets the value to 0 and flags the span: ``unrelated`` (an operand that is neither in the problem nor an earlier
result: true but unrelated steps such as ``1+1=2``), ``trivial`` (``x+0``, ``0+x``, or a repeat of an earlier right
step: padding that makes the process signal look busy). The split is made over the *multiset* of the numbers, so a
permutation of a validation problem never appears in training.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from datasets import Dataset

from ..verifiers.base import SpanSignal, Verifier, VerifierResult

_STEP = re.compile(r"(\d+)\+(\d+)=(\d+)")
_INTEGER = re.compile(r"\s*(\d+)\s*")


@dataclass(frozen=True)
class MultiStepTask:
    """Settings of the multi-step addition task."""

    terms: int = 3
    max_operand: int = 99
    train_problems: int = 20_000
    validation_problems: int = 400
    seed: int = 0

    #: The policy's character set and the cache folder prefix (see ``demo.policy``).
    alphabet = "0123456789+=;"
    policy_name = "multistep"

    def __post_init__(self) -> None:
        if not 2 <= self.terms <= 4:
            raise ValueError(f"terms must be in [2, 4], got {self.terms}")
        if self.validation_problems <= 0 or self.train_problems <= 0:
            raise ValueError("train_problems and validation_problems must be > 0")

    @property
    def max_new_tokens(self) -> int:
        """Enough characters for every step of the largest problem, plus the end-of-sequence token."""
        width = len(str(self.max_operand * self.terms))
        return (self.terms - 1) * (3 * width + 3) + 1

    def settings(self) -> dict:
        return asdict(self)

    def splits(self) -> tuple[Dataset, Dataset]:
        """``(train, validation)`` with ``prompt``, ``answer``, ``operands`` and ``solution`` (the worked steps);
        disjoint by the multiset of the operands."""
        rng = random.Random(self.seed)
        seen: set[tuple[int, ...]] = set()
        rows: list[dict[str, Any]] = []
        wanted = self.train_problems + self.validation_problems
        while len(rows) < wanted:
            numbers = [rng.randint(0, self.max_operand) for _ in range(self.terms)]
            key = tuple(sorted(numbers))
            if key in seen:
                continue
            seen.add(key)
            rows.append(_row(numbers))
        return Dataset.from_list(rows[self.validation_problems :]), Dataset.from_list(rows[: self.validation_problems])

    def score(self, completion: str, row: dict[str, Any]) -> float:
        """The final check for one completion (used by the warm start's pass-rate measurement)."""
        return final_score(completion, row["answer"])


def _row(numbers: list[int]) -> dict[str, Any]:
    steps, total = [], numbers[0]
    for n in numbers[1:]:
        steps.append(f"{total}+{n}={total + n}")
        total += n
    return {
        "prompt": "+".join(map(str, numbers)) + "=",
        "answer": str(total),
        "operands": numbers,
        "solution": ";".join(steps),
    }


def parse_steps(completion: str) -> list[tuple[int, int, int, int, int]] | None:
    """``[(start, end, a, b, c), ...]`` for ``a+b=c`` steps separated by ``;``, or ``None`` if the completion is not
    a sequence of well-formed steps."""
    text = completion.rstrip()
    if not text:
        return None
    steps, position = [], 0
    for piece in text.split(";"):
        match = _STEP.fullmatch(piece)
        if match is None:
            return None
        a, b, c = (int(g) for g in match.groups())
        steps.append((position, position + len(piece), a, b, c))
        position += len(piece) + 1
    return steps


def final_score(completion: str, answer: str) -> float:
    """1.0 when the completion's final result (last step's, or a bare integer) is the answer, else 0.0."""
    bare = _INTEGER.fullmatch(completion)
    if bare is not None:
        return float(int(bare.group(1)) == int(answer))
    steps = parse_steps(completion)
    return float(bool(steps) and steps[-1][4] == int(answer))


_SUMS = re.compile(r"\d+(?:;\d+)*")


def running_sums_score(completion: str, answer: str) -> float:
    """1.0 when the completion is ``;``-separated running sums (``46;51;80``) whose last is the answer, else 0.0
    (the ``answer_format="sums"`` of :class:`~trl_loo_gspo.demo.mixed.MixedSumTask`; a bare integer is one sum)."""
    text = completion.strip()
    if _SUMS.fullmatch(text) is None:
        return 0.0
    return float(int(text.rsplit(";", 1)[-1]) == int(answer))


def step_spans(completion: str, operands: list[int]) -> list[SpanSignal]:
    """One span per step: value 1 when right and grounded, else 0; hack flags ``unrelated`` / ``trivial``."""
    steps = parse_steps(completion) or []
    available = set(operands)
    right: set[tuple[int, int]] = set()
    spans = []
    for k, (start, end, a, b, c) in enumerate(steps):
        flags: list[str] = []
        if a not in available or b not in available:
            flags.append("unrelated")
        if a == 0 or b == 0 or (a, b) in right or (b, a) in right:
            flags.append("trivial")
        correct = a + b == c
        value = 1.0 if correct and not flags else 0.0
        if correct and not flags:
            available.add(c)
            right.add((a, b))
        spans.append(
            SpanSignal(start, end, value, "step", f"step:{k}", tuple(flags), {"correct": correct, "a": a, "b": b})
        )
    return spans


class MultiStepVerifier(Verifier):
    """Final-answer check of the multi-step task, with per-step span signals when ``emit_spans=True``.

    Needs the dataset columns ``answer`` and ``operands``.
    """

    name = "multistep"
    version = "1"

    def __init__(self, emit_spans: bool = False, answer_format: str = "steps") -> None:
        super().__init__()
        if answer_format not in ("steps", "sums"):
            raise ValueError(f"answer_format must be 'steps' or 'sums', got {answer_format!r}")
        if emit_spans and answer_format != "steps":
            raise ValueError("emit_spans needs answer_format='steps' (the spans are the worked steps)")
        self.emit_spans, self.answer_format = emit_spans, answer_format

    def verify(self, completion: str, answer: str | None = None, operands: list[int] | None = None, **_: Any):
        if answer is None or operands is None:
            return VerifierResult(None, "unscorable", "parse_failure", {"reason": "needs answer and operands"})
        score = (final_score if self.answer_format == "steps" else running_sums_score)(completion, answer)
        spans = step_spans(completion, list(operands)) if self.emit_spans else None
        return VerifierResult(score, "pass" if score else "fail", None, {}, spans)

    def hack_score(self, completion: str, operands: list[int] | None = None, **_: Any) -> float:
        """Fraction of the steps flagged ``unrelated`` or ``trivial`` (0 when there are no steps)."""
        spans = step_spans(completion, list(operands or []))
        return sum(bool(s.flags) for s in spans) / len(spans) if spans else 0.0
