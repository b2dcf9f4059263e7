"""Math answers checked with ``math-verify`` (method §2.1: math checks the final answer).

Extraction of the final answer (``\\boxed{}``, LaTeX, plain expressions), then symbolic/numeric equivalence with
the dataset's ``answer`` column: fractions vs decimals, intervals and sets, units, numeric tolerance — all
``math-verify``'s work. This module adapts it to the verifier contract, with two rules of its own:

- *Relations.* ``math-verify`` reads one side of a relation (``\\boxed{4 = 3}`` and ``\\boxed{3 \\approx 4}``
  equalled a gold ``3``), so a predicted final answer that is an equation, an approximation or an inequality counts
  only against a gold answer that is a relation too (:class:`MathVerifier` lists the relations).
- *Isolation.* ``math-verify`` runs in a worker process: its own timeout is ``signal.alarm``, which works in the main
  thread only, and one of its regular expressions is cubic on ``"$$" + "\\boxed{1}" * n`` (20 kB: about 40 minutes,
  with the GIL held throughout), so in the trainer's process a reward computed off the main thread could stall the
  whole process. The worker is killed past the time limit, whichever thread asked.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from importlib.metadata import version as _package_version
from typing import Any

from .base import Verifier, VerifierResult
from .math_worker import _worker_pool, shutdown_workers

__all__ = ["MathVerifier", "boxed_contents", "shutdown_workers"]

_BOXED = re.compile(r"\\boxed\s*\{")
_BRACE = re.compile(r"[{}]")
_BLANKS = re.compile(r"\s+")
#: A text group holding the word "or" (``3 \text{ (or 4)}``): math-verify drops text groups as units, so the hedge
#: never reaches the worker's check on alternatives (:func:`.math_worker._gold_refusal`).
_TEXT_OR = re.compile(
    r"\\(?:text|mathrm|textbf|textit|textrm|mbox|operatorname)\s*\{[^{}]*(?<![A-Za-z])or(?![A-Za-z])"
)
_LIST_SEPARATORS = re.compile(r",|;|\\\\")


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


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans (sorted by start) not inside another one: the outermost boxes."""
    kept: list[tuple[int, int]] = []
    for start, end in spans:
        if not kept or start >= kept[-1][1]:
            kept.append((start, end))
    return kept


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
    r"""Final-answer equivalence with ``math-verify`` (``pip install 'trl-loo-gspo[math]'``).

    Args:
        timeout_seconds: the limit, in wall time, of each ``math-verify`` call (parsing the gold answer, parsing the
            completion, each equivalence check of a pair of parsed answers), whichever thread calls :meth:`verify`
            (see *Worker process*). A completion that runs past it scores 0.0, ``"fail"``, anomaly ``"timeout"``
            (the model's doing); a gold answer that does: ``None``, ``"unscorable"``, anomaly ``"timeout"``.
        float_rounding, numeric_precision, strict: passed to ``math_verify.verify``.
        max_chars: only the last ``max_chars`` characters of a completion are parsed (final answers come last; a
            100 kB completion must not stall the step).
        max_completion_chars: completions longer than this score 0.0, ``"fail"``, anomaly ``"oversize"`` in
            :meth:`safe_verify` (and the TRL interface) without being parsed; ``None``: no cap. Default 100 000.

    Scores: 1.0 equivalent, 0.0 not equivalent or no answer found (status ``"fail"``, anomaly ``"parse_failure"``
    when nothing could be extracted). A missing or unparseable *gold* answer is the dataset's fault: ``None``.

    Relations: a predicted final answer that is a relation scores 0.0 (``details["refused"]`` says why) unless the gold
    answer is a relation too (then ``math-verify`` compares them, as before: ``y = 2x + 1``, ``x > 2``). Relations:
    ``=`` (also ``:=``, ``==``, ``\coloneqq``); approximations ``\approx``, ``\approxeq``, ``\thickapprox``,
    ``\simeq``, ``\sim``, ``\thicksim``, ``\backsim``, ``\backsimeq``, ``\eqsim``, ``\cong``, ``\doteq``,
    ``\doteqdot``, ``\fallingdotseq``, ``\risingdotseq``, ``\equiv``, ``\asymp``, ``\propto``, ``\lessapprox``,
    ``\gtrapprox``, ``\lesssim``, ``\gtrsim``, ``~=``; inequalities ``\neq``, ``\ne``, ``\not``, ``<``, ``>``,
    ``<=``, ``>=``, ``!=``, ``<>``, ``\lt``, ``\gt``, ``\le``, ``\leq``, ``\leqq``, ``\leqslant``, ``\ge``, ``\geq``,
    ``\geqq``, ``\geqslant``, ``\ll``, ``\gg``, ``\nless``, ``\ngtr``, ``\nleq``, ``\ngeq``; arrows ``\to``,
    ``\rightarrow``, ``\longrightarrow``, ``\mapsto``, ``\Rightarrow``, ``\Longrightarrow``, ``\implies``, ``\iff``,
    ``\Leftrightarrow``, ``\Longleftrightarrow``, ``->``, ``=>``, ``<=>``; and their Unicode signs (≈ ≊ ≋ ≃ ≅ ∼ ≒ ≓ ≐
    ≑ ≡ ≍ ∝ ≉ ≄ ≇ ≢ ≠ ≤ ≥ ≦ ≧ ⩽ ⩾ ≪ ≫ ≮ ≯ → ⇒ ⟹ ⇔ ⟺ ↦). One exception, a value: ``<variable> = <value>``, the
    variable a lone symbol (``x``, ``n``, ``x_1``, ``\alpha``, ``\text{Area}``) or a tuple of them (``(x, y) = (1,
    2)``), so ``\boxed{x = 3}`` and ``x = 3, y = 4`` still count for the values. Refused for a value gold answer:
    ``4 = 3``, ``3 = 3``, ``\frac{6}{2} = 3``, ``f(2) = 3``, ``x = 4 = 3``, ``3 \approx 4``, ``x \approx 3``,
    ``3 \approx 3``, ``x > 2``. ``math-verify`` reads one side of such a relation, so each was a way to offer two
    answers at once.

    Worker process: ``math-verify`` runs in a separate Python process (started on first use with ``sys.executable``;
    it imports math-verify, not this package or torch), one per thread checking at the same time, at most four per
    process, shared by every instance and reused across calls. The calling thread waits in ``poll`` (without the
    GIL) for at most ``timeout_seconds`` plus a second of grace per ``math-verify`` call; past it the worker is
    killed (the next call starts a new one: about 1 s). Inside the worker, ``math-verify``'s own ``signal.alarm``
    timeout is set too (its main thread), so a slow but interruptible call ends there without a restart. Instances
    hold no handle on a worker: they pickle and copy as before, and a forked child starts its own workers.
    :func:`shutdown_workers` ends them (at exit too). The worker's program is this module's worker functions, sent
    as source (``inspect.getsource``): the package must be installed with its ``.py`` files.
    """

    name = "math"
    gold_column = "answer"
    max_completion_chars: int | None = 100_000

    def __init__(
        self,
        timeout_seconds: float = 5,
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
        if timeout_seconds is None or not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be a positive number of seconds, not {timeout_seconds!r}")
        self.version = f"4+math-verify-{_package_version('math-verify')}"
        super().__init__()
        self.timeout_seconds = timeout_seconds
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self.strict = strict
        self.max_chars = max_chars
        self.max_completion_chars = max_completion_chars

    def verify(self, completion: str, answer: Any = None, **_: Any) -> VerifierResult:
        if answer is None or str(answer).strip() == "":
            return VerifierResult(None, "unscorable", "parse_failure", {"reason": "the dataset row has no answer"})
        gold_text = str(answer)
        spans = _outermost(_boxed_spans(completion))
        if spans and _TEXT_OR.search(completion[spans[-1][0] : spans[-1][1]]):
            if len(_LIST_SEPARATORS.split(gold_text)) == 1:  # a list gold may be written "3 or 4"
                refused = 'the final answer joins alternatives ("or" in a text group) and the gold answer does not'
                return VerifierResult(0.0, "fail", None, {"gold": gold_text, "extracted": None, "refused": refused})
        request = {
            "gold": gold_text,
            "completion": completion[-self.max_chars :],
            "timeout": self.timeout_seconds,
            "options": {
                "float_rounding": self.float_rounding,
                "numeric_precision": self.numeric_precision,
                "strict": self.strict,
            },
        }
        reply = _worker_pool().check(request, self.timeout_seconds)
        if "error" in reply:
            raise RuntimeError(f"math-verify worker: {reply['error']}")
        killed = reply.get("killed")
        limit = f"longer than timeout_seconds={self.timeout_seconds}"
        if killed == "gold" or reply.get("gold") == "timeout":
            return VerifierResult(
                None, "unscorable", "timeout", {"reason": f"parsing the gold answer took {limit}: {gold_text!r}"}
            )
        if reply.get("gold") == "empty":
            return VerifierResult(
                None, "unscorable", "parse_failure", {"reason": f"gold answer unparseable: {gold_text!r}"}
            )
        details: dict[str, Any] = {"gold": gold_text, "truncated_input": len(completion) > self.max_chars}
        if killed == "completion" or reply.get("completion") == "timeout":
            return VerifierResult(
                0.0,
                "fail",
                "timeout",
                {**details, "extracted": None, "reason": f"parsing the completion took {limit}"},
            )
        if reply.get("completion") == "empty":
            return VerifierResult(0.0, "fail", "parse_failure", {**details, "extracted": None})
        details["extracted"] = reply["extracted"]
        if killed is not None:
            return VerifierResult(0.0, "fail", "timeout", {**details, "reason": f"the equivalence check took {limit}"})
        if reply.get("refused"):
            return VerifierResult(0.0, "fail", None, {**details, "refused": reply["refused"]})
        if reply["timed_out"]:
            return VerifierResult(0.0, "fail", "timeout", {**details, "reason": f"the equivalence check took {limit}"})
        equal = reply["equal"]
        return VerifierResult(float(equal), "pass" if equal else "fail", None, details)

    @_ClassOrInstanceMethod
    def hack_score(self, completion: str, **_: Any) -> float:
        """P_hack for math (method §2.1): 1.0 for several *distinct* boxed final answers (hedging: the innermost
        boxes, so a box inside a box is one answer) or answer spam (five or more outermost boxes), else 0.0. Linear
        time.

        A completion over the size cap (:attr:`max_completion_chars`: the instance's when called on an instance,
        the class's when called on the class) scores 1.0 without being read: :meth:`safe_verify` scores it 0.0
        unchecked, so padding past the cap must not also be a way around this penalty.
        """
        if self.max_completion_chars is not None and len(completion) > self.max_completion_chars:
            return 1.0
        spans = _boxed_spans(completion)
        if len(_outermost(spans)) >= 5:
            return 1.0
        # the answers are the innermost boxes: \boxed{\boxed{3}} is one answer, \boxed{\boxed{2} + \boxed{3}} two
        leaves = [span for i, span in enumerate(spans) if i + 1 == len(spans) or spans[i + 1][0] >= span[1]]
        distinct = {_BLANKS.sub("", completion[start:end]) for start, end in leaves}
        return float(len(distinct) >= 2)
