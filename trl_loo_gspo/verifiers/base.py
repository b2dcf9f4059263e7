"""The verifier contract shared by every verifier (method §2.1, §5.2).

A verifier scores one completion against the dataset's columns and returns a :class:`VerifierResult`. It is also
a TRL reward function: ``verifier(prompts=..., completions=..., completion_ids=..., **columns) -> list[float | None]``.
:meth:`Verifier.score_batch` takes the same arguments and returns a frozen :class:`RewardOutput`: the scores *and*
the per-answer results they came from (spans, details). ``LooGspoTrainer`` calls it, so the results travel with the
reward call that produced them; the verifier keeps no per-call state (a verifier may be called from several threads
at once, or twice in a step).
``None`` means *unscorable* (an infrastructure failure: timeout of the checker itself, sandbox failure, verifier
exception) — never a silent 0 — and TRL keeps such a row out of the group baseline. A verifier never raises into the
training loop: any exception becomes an unscorable result with the anomaly ``"verifier_exception"``.

Anomalies are counted per kind and logged every step through TRL's ``log_metric`` (method §5.2, "verification
anomalies"), as fractions of the batch: ``verifiers/<name>/anomaly/<kind>`` and ``verifiers/<name>/unscorable``.

Size cap: :meth:`Verifier.safe_verify` scores a completion longer than ``max_completion_chars`` characters 0.0, status
``"fail"``, anomaly ``"oversize"``, without calling :meth:`~Verifier.verify` — never ``None``: padding a completion
is the policy's doing, and an unscorable result would take it out of the leave-one-out baseline. The default is
:data:`DEFAULT_MAX_COMPLETION_CHARS` (200 000); a verifier class may set its own (``MathVerifier`` and
``CoqVerifier``: 100 000) and an instance may override it (``None``: no cap).
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..algorithms.span_types import SpanSignal

__all__ = [
    "ANOMALY_KINDS",
    "DEFAULT_MAX_COMPLETION_CHARS",
    "RewardOutput",
    "SpanSignal",
    "Verifier",
    "VerifierResult",
    "completion_text",
]

#: Anomaly kinds every verifier uses (method §5.2). ``timeout``: the checked program or the checker ran out of time;
#: ``sandbox_failure``: the sandbox could not run the check; ``parse_failure``: nothing to check could be extracted;
#: ``verifier_exception``: the verifier itself failed; ``oversize``: the completion is longer than the verifier's
#: ``max_completion_chars`` and was scored 0.0 without being checked; ``weak_test``: a test of the row cannot be judged
#: apart from the program (the code verifier's ``weak_tests``), so the row is not scored; ``undefined_name``: a test
#: of the row reads a name its dataset does not define (not the program's, a builtin or the standard library's).
ANOMALY_KINDS = (
    "timeout", "sandbox_failure", "parse_failure", "verifier_exception", "oversize", "weak_test", "undefined_name",
)  # fmt: skip

#: The size cap (characters of completion text) of a verifier that does not set its own ``max_completion_chars``.
DEFAULT_MAX_COMPLETION_CHARS = 200_000


@dataclass
class VerifierResult:
    """The outcome of verifying one completion.

    Attributes:
        score: the reward, usually in [0, 1]; ``None`` when the completion could not be scored (infrastructure).
        status: a short word: ``"pass"``, ``"fail"``, ``"partial"``, ``"unscorable"``, or a verifier-specific one.
        anomaly: one of :data:`ANOMALY_KINDS`, or ``None``.
        details: verifier-specific facts (per-test results, extracted answer, ...).
        spans: intermediate signals on spans of the completion (method §6), when the verifier was asked for them
            (``emit_spans=True``); ``None`` otherwise.
    """

    score: float | None
    status: str
    anomaly: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    spans: list[SpanSignal] | None = None

    def __post_init__(self) -> None:
        if self.anomaly is not None and self.anomaly not in ANOMALY_KINDS:
            raise ValueError(f"unknown anomaly kind {self.anomaly!r}; expected one of {ANOMALY_KINDS}")


@dataclass(frozen=True)
class RewardOutput:
    """What one reward call produced: the scores TRL reads and, per answer, the result each score came from.

    Attributes:
        scores: one reward per completion, in order (``None`` = unscorable), as the TRL reward function returns them.
        results: the :class:`VerifierResult` of each completion, aligned with ``scores``; ``None`` when the reward
            has no per-answer results (e.g. a :class:`~trl_loo_gspo.verifiers.shaping.ShapedReward` around a plain
            function).
    """

    scores: tuple[float | None, ...]
    results: tuple[VerifierResult, ...] | None = None

    def __post_init__(self) -> None:
        if self.results is not None and len(self.results) != len(self.scores):
            raise ValueError(f"{len(self.results)} results for {len(self.scores)} scores")


def completion_text(completion: Any) -> str:
    """The text of a completion: a plain string, or the content of the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # typed content blocks
            return "".join(block.get("text", "") for block in content if isinstance(block, dict))
        return str(content)
    return str(completion)


class Verifier(ABC):
    """Base class: implement :meth:`verify`; the rest (TRL adapter, safety net, anomaly metrics) is shared."""

    #: A short identifier; also the reward function's name in TRL's logs.
    name: str = "verifier"
    #: Recorded with every experiment; bump it whenever the scoring rules change.
    version: str = "0"
    #: Whether :meth:`verify` also fills ``VerifierResult.spans`` (method §6 process feedback); off by default because
    #: it may cost extra checker work. Verifiers that support it say so in their docstring.
    emit_spans: bool = False
    #: Completions longer than this many characters score 0.0 with the anomaly ``"oversize"`` and are not checked
    #: (see the module docstring); ``None``: no cap. Subclasses set their own default; instances may override it.
    max_completion_chars: int | None = DEFAULT_MAX_COMPLETION_CHARS
    #: The dataset column that holds the row's reference (``answer``, ``tests``, ``theorem``): what another
    #: framework's single "ground truth" fills (:mod:`trl_loo_gspo.verifiers.adapters`); ``None``: none.
    gold_column: str | None = None

    def __init__(self) -> None:
        self.__name__ = self.name  # TRL names reward functions by __name__
        self.anomaly_counts: Counter[str] = Counter()

    @abstractmethod
    def verify(self, completion: str, **columns: Any) -> VerifierResult:
        """Score one completion (its text) against this row's dataset columns."""

    def verify_batch(self, completions: list[str], columns: list[dict[str, Any]]) -> list[VerifierResult]:
        """Score a batch; subclasses may parallelise. The default loops over :meth:`safe_verify`."""
        return [self.safe_verify(text, **row) for text, row in zip(completions, columns, strict=True)]

    def is_oversize(self, completion: str) -> bool:
        """Whether ``completion`` is longer than :attr:`max_completion_chars` (O(1))."""
        return self.max_completion_chars is not None and len(completion) > self.max_completion_chars

    def oversize_result(self, completion: str) -> VerifierResult:
        """The result of a completion over the size cap: 0.0, ``"fail"``, anomaly ``"oversize"``; ``spans == []``
        (no signal) when the verifier emits spans."""
        details = {
            "reason": f"completion of {len(completion)} characters exceeds max_completion_chars",
            "completion_chars": len(completion),
            "max_completion_chars": self.max_completion_chars,
        }
        return VerifierResult(0.0, "fail", "oversize", details, [] if self.emit_spans else None)

    def safe_verify(self, completion: str, **columns: Any) -> VerifierResult:
        """:meth:`verify`, after the size cap (:meth:`oversize_result` past :attr:`max_completion_chars`), with any
        exception turned into an unscorable ``verifier_exception`` result."""
        if self.is_oversize(completion):
            return self.oversize_result(completion)
        try:
            return self.verify(completion, **columns)
        except Exception as err:  # a verifier must never take the training run down
            return VerifierResult(
                None,
                "unscorable",
                "verifier_exception",
                {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=5)},
            )

    def score_batch(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> RewardOutput:
        """Score a batch (TRL's reward-function arguments; dataset columns arrive as lists in ``kwargs``): the scores
        and each answer's :class:`VerifierResult`, returned together, nothing kept on the verifier but the running
        anomaly counts. Logs the anomaly fractions through ``log_metric`` when given."""
        completions = completions or []
        n = len(completions)
        log_metric = kwargs.pop("log_metric", None)
        kwargs.pop("log_extra", None)
        kwargs.pop("trainer_state", None)
        per_row = {key: value for key, value in kwargs.items() if isinstance(value, list) and len(value) == n}
        columns = [{key: value[i] for key, value in per_row.items()} for i in range(n)]
        results = tuple(self.verify_batch([completion_text(c) for c in completions], columns))
        kinds = Counter(r.anomaly for r in results if r.anomaly is not None)
        self.anomaly_counts.update(kinds)
        if log_metric is not None and n:
            for kind in ANOMALY_KINDS:
                log_metric(f"verifiers/{self.name}/anomaly/{kind}", kinds.get(kind, 0) / n)
            log_metric(f"verifiers/{self.name}/unscorable", sum(r.score is None for r in results) / n)
        return RewardOutput(tuple(r.score for r in results), results)

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        """TRL reward-function interface: the scores of :meth:`score_batch` (for stock TRL and any caller that needs
        only the rewards)."""
        return list(
            self.score_batch(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs).scores
        )

    def describe(self) -> dict[str, str]:
        """Name and version, for experiment registration."""
        return {"name": self.name, "version": self.version, "class": type(self).__qualname__}
