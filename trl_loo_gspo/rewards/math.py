"""Math answers checked with ``math-verify`` (SPEC §2.1: math checks the final answer).

Extraction of the final answer (``\\boxed{}``, LaTeX, plain expressions), then symbolic/numeric equivalence with
the dataset's ``answer`` column: fractions vs decimals, intervals and sets, units, numeric tolerance — all
``math-verify``'s work; this module only adapts it to the verifier contract.
"""

from __future__ import annotations

import re
import threading
from importlib.metadata import version as _package_version
from typing import Any

from .base import Verifier, VerifierResult

_BOXED = re.compile(r"\\boxed\s*\{")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` (nested braces balanced)."""
    contents = []
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for position in range(start, len(text)):
            char = text[position]
            depth += char == "{"
            depth -= char == "}"
            if depth == 0:
                contents.append(text[start:position].strip())
                break
    return contents


class MathVerifier(Verifier):
    """Final-answer equivalence with ``math-verify`` (``pip install 'trl-loo-gspo[math]'``).

    Args:
        timeout_seconds: per-sample limit for parsing and for the equivalence check (``math-verify`` uses
            ``signal.alarm``, which only works in the main thread; elsewhere the check runs without a limit).
        float_rounding, numeric_precision, strict: passed to ``math_verify.verify``.
        max_chars: only the last ``max_chars`` characters of a completion are parsed (final answers come last; a
            100 kB completion must not stall the step).

    Scores: 1.0 equivalent, 0.0 not equivalent or no answer found (status ``"fail"``, anomaly ``"parse_failure"``
    when nothing could be extracted). A missing or unparseable *gold* answer is the dataset's fault: ``None``.
    """

    name = "math"

    def __init__(
        self,
        timeout_seconds: int = 5,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
        max_chars: int = 20_000,
    ) -> None:
        try:
            import math_verify  # noqa: F401
        except ImportError as err:  # pragma: no cover - a test extra installs it
            raise ImportError("MathVerifier needs math-verify: pip install 'math-verify[antlr4_13_2]'") from err
        self.version = f"1+math-verify-{_package_version('math-verify')}"
        super().__init__()
        self.timeout_seconds = timeout_seconds
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self.max_chars = max_chars

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

    @staticmethod
    def hack_score(completion: str, **_: Any) -> float:
        """P_hack for math (SPEC §2.1): 1.0 for several *distinct* boxed final answers (hedging) or answer spam
        (five or more boxed answers), else 0.0."""
        boxed = _boxed_contents(completion)
        distinct = {re.sub(r"\s+", "", b) for b in boxed}
        return float(len(distinct) >= 2 or len(boxed) >= 5)
