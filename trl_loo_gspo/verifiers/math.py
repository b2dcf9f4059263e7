"""Math answers checked with ``math-verify`` (method §2.1: math checks the final answer).

Extraction of the final answer (``\\boxed{}``, LaTeX, plain expressions), then symbolic/numeric equivalence with
the dataset's ``answer`` column: fractions vs decimals, intervals and sets, units, numeric tolerance — all
``math-verify``'s work; this module only adapts it to the verifier contract.
"""

from __future__ import annotations

import re
import threading
import types
from collections.abc import Callable
from importlib.metadata import version as _package_version
from typing import Any

from .base import Verifier, VerifierResult

_BOXED = re.compile(r"\\boxed\s*\{")
_BRACE = re.compile(r"[{}]")
_BLANKS = re.compile(r"\s+")


def _boxed_spans(text: str) -> list[tuple[int, int]]:
    """Bounds of the contents of every closed ``\\boxed{...}`` (nested braces balanced), in order, in O(n).

    One pass over the braces with a stack (the ``{`` of each ``\\boxed{`` marked): a ``}`` closes the innermost
    open brace, so it closes a ``\\boxed{`` exactly when the braces after that opener balance there — what a
    depth count from each opener finds, without rescanning the text once per opener (quadratic on a megabyte of
    unclosed ``\\boxed{``).
    """
    openers = {match.end() - 1 for match in _BOXED.finditer(text)}
    if not openers:
        return []
    spans: list[tuple[int, int]] = []
    stack: list[int] = []  # per open brace: where its content starts if it opens a \boxed, else -1
    for match in _BRACE.finditer(text, min(openers)):
        position = match.start()
        if text[position] == "{":
            stack.append(position + 1 if position in openers else -1)
        elif stack:
            start = stack.pop()
            if start >= 0:
                spans.append((start, position))
    spans.sort()
    return spans


def boxed_contents(text: str) -> list[str]:
    """Contents of every closed ``\\boxed{...}`` (nested braces balanced), stripped. The text of nested boxes
    overlaps, so the output (not the scan) can be quadratic in size: :meth:`MathVerifier.hack_score` reads at most
    four of them."""
    return [text[start:end].strip() for start, end in _boxed_spans(text)]


class _ClassOrInstanceMethod:
    """A method callable on the class (``MathVerifier.hack_score(text)``, as a static method was) or on an instance;
    the function receives the instance, or the class, first — so an instance's own size cap applies."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.__func__ = func
        self.__doc__ = func.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Callable[..., Any]:
        return types.MethodType(self.__func__, owner if instance is None else instance)


class MathVerifier(Verifier):
    """Final-answer equivalence with ``math-verify`` (``pip install 'trl-loo-gspo[math]'``).

    Args:
        timeout_seconds: per-sample limit for parsing and for the equivalence check (``math-verify`` uses
            ``signal.alarm``, which only works in the main thread; elsewhere the check runs without a limit).
        float_rounding, numeric_precision, strict: passed to ``math_verify.verify``.
        max_chars: only the last ``max_chars`` characters of a completion are parsed (final answers come last; a
            100 kB completion must not stall the step).
        max_completion_chars: completions longer than this score 0.0, ``"fail"``, anomaly ``"oversize"`` in
            :meth:`safe_verify` (and the TRL interface) without being parsed; ``None``: no cap. Default 100 000.

    Scores: 1.0 equivalent, 0.0 not equivalent or no answer found (status ``"fail"``, anomaly ``"parse_failure"``
    when nothing could be extracted). A missing or unparseable *gold* answer is the dataset's fault: ``None``.
    """

    name = "math"
    max_completion_chars: int | None = 100_000

    def __init__(
        self,
        timeout_seconds: int = 5,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
        max_chars: int = 20_000,
        max_completion_chars: int | None = 100_000,
    ) -> None:
        try:
            import math_verify  # noqa: F401
        except ImportError as err:  # pragma: no cover - a test extra installs it
            raise ImportError("MathVerifier needs math-verify: pip install 'math-verify[antlr4_13_2]'") from err
        self.version = f"2+math-verify-{_package_version('math-verify')}"
        super().__init__()
        self.timeout_seconds = timeout_seconds
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self.max_chars = max_chars
        self.max_completion_chars = max_completion_chars

    def _timeout(self) -> int | None:
        return self.timeout_seconds if threading.current_thread() is threading.main_thread() else None

    def _parse(self, text: str) -> list:
        from math_verify import parse

        timeout = self._timeout()
        return parse(text, parsing_timeout=timeout)

    def verify(self, completion: str, answer: Any = None, **_: Any) -> VerifierResult:
        from math_verify import verify

        if answer is None or str(answer).strip() == "":
            return VerifierResult(None, "unscorable", "parse_failure", {"reason": "the dataset row has no answer"})
        gold_text = str(answer)
        gold = self._parse(gold_text if "$" in gold_text or "\\boxed" in gold_text else f"${gold_text}$")
        if not gold:
            gold = self._parse(gold_text)
        if not gold:
            return VerifierResult(
                None, "unscorable", "parse_failure", {"reason": f"gold answer unparseable: {gold_text!r}"}
            )
        text = completion[-self.max_chars :]
        predicted = self._parse(text)
        details: dict[str, Any] = {"gold": gold_text, "truncated_input": len(completion) > self.max_chars}
        if not predicted:
            return VerifierResult(0.0, "fail", "parse_failure", {**details, "extracted": None})
        details["extracted"] = str(predicted[-1])
        equal = verify(
            gold,
            predicted,
            float_rounding=self.float_rounding,
            numeric_precision=self.numeric_precision,
            strict=self.strict,
            timeout_seconds=self._timeout(),
        )
        return VerifierResult(float(equal), "pass" if equal else "fail", None, details)

    @_ClassOrInstanceMethod
    def hack_score(self, completion: str, **_: Any) -> float:
        """P_hack for math (method §2.1): 1.0 for several *distinct* boxed final answers (hedging) or answer spam
        (five or more boxed answers), else 0.0. Linear time.

        A completion over the size cap (:attr:`max_completion_chars`: the instance's when called on an instance,
        the class's when called on the class) scores 1.0 without being read: :meth:`safe_verify` scores it 0.0
        unchecked, so padding past the cap must not also be a way around this penalty.
        """
        if self.max_completion_chars is not None and len(completion) > self.max_completion_chars:
            return 1.0
        spans = _boxed_spans(completion)
        if len(spans) >= 5:
            return 1.0
        distinct = {_BLANKS.sub("", completion[start:end]) for start, end in spans}
        return float(len(distinct) >= 2)
