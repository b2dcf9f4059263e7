"""Math answers checked with ``math-verify`` (method §2.1: math checks the final answer).

Extraction of the final answer (``\\boxed{}``, LaTeX, plain expressions), then symbolic/numeric equivalence with
the dataset's ``answer`` column: fractions vs decimals, intervals and sets, units, numeric tolerance — all
``math-verify``'s work. This module adapts it to the verifier contract, with rules of its own:

- *Relations.* ``math-verify`` reads one side of a relation (``\\boxed{4 = 3}`` and ``\\boxed{3 \\approx 4}``
  equalled a gold ``3``), so a predicted final answer that is an equation, an approximation or an inequality counts
  only against a gold answer that is a relation too (:class:`MathVerifier` lists the relations).
- *One final answer, read whole.* A final answer holding several candidate values is never right: ``math-verify``
  compares what it reads of the final answer with the gold answer, so it must read all of it. Where it reads the
  whole answer and finds several values (``3, 4``, ``\\{3, 4\\}``, ``\\pm 2``), it compares them as one set or
  tuple, which never equals a single value and equals a gold set or tuple only when they match. Where it would read
  one value out of several, the answer scores 0.0: when it cannot convert an anchored final answer (a box, "final
  answer is", "answer:") and falls back to another match (``\\boxed{3 \\\\ 4}``, ``\\boxed{3 \\oplus 4}``,
  ``cases``), the answer is compared as text instead; when it drops trailing text holding a value
  (``3 \\text{ (maybe 4)}``), the answer is refused (both in the worker, :func:`.math_worker._whole_reading`);
  so is a box holding a box and more (``\\boxed{4 \\boxed{3}}``: it reads the inner box) and a GSM8K ``####``
  line holding several values (``#### 3 or 4``: it reads the last number), :func:`_final_answer_refusal`.
- *Isolation.* ``math-verify`` runs in a worker process: its own timeout is ``signal.alarm``, which works in the main
  thread only, and one of its regular expressions is cubic on ``"$$" + "\\boxed{1}" * n`` (20 kB: about 40 minutes,
  with the GIL held throughout), so in the trainer's process a reward computed off the main thread could stall the
  whole process. The worker is killed past the time limit, whichever thread asked.

Right answers ``math-verify`` misreads are rewritten before it reads them (:func:`_readable`): a repeating decimal
(``0.\\overline{3}``), a final answer that is one text group starting with a number (``\\boxed{\\text{6
hours}}``) and thin-space thousands separators (``10\\,000``).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from fractions import Fraction
from importlib.metadata import version as _package_version
from typing import Any

from .base import Verifier, VerifierResult
from .math_worker import _worker_pool, shutdown_workers

__all__ = ["MathVerifier", "boxed_contents", "shutdown_workers"]

#: A box: ``\boxed{`` or ``\fbox{`` (math-verify takes the content of either as the final answer, but finds only
#: ``\boxed`` as an anchored answer: :func:`_readable` writes ``\fbox`` as ``\boxed``).
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FBOX = re.compile(r"\\fbox(?![A-Za-z])")
_BRACE = re.compile(r"[{}]")
_BLANKS = re.compile(r"\s+")
#: What is left of a box whose content was cut out (:func:`_box_answers`).
_EMPTY_BOX = re.compile(r"\\(?:boxed|fbox)\{\}")
#: A repeating decimal, ``0.\overline{3}``, ``1.2\overline{45}``, ``0.\bar{6}``: math-verify does not read the bar
#: (it reads ``0``, or gives up), and nothing in it converts one, so :func:`_repeating_decimal` does.
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|bar)\s*(?:\{\s*(\d+)\s*\}|(\d))")
#: A number with thin-space thousands separators, ``10\,000``: math-verify reads ``1\,000`` as 1 * 0 (0).
_THIN_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:\\,\d{3})+(?!\d)")
#: A final answer that is one text group starting with a number (``\text{6 hours}``): math-verify reads it as the
#: symbol ``6hours``; as ``6 \text{ hours}`` it reads 6 and drops the unit.
_TEXT_NUMBER = re.compile(
    r"\s*\\(?:text|textrm|textnormal|textbf|textit|mathrm|mathbf|mathit|mbox)\s*\{\s*"
    r"(-?\d[\d,]*(?:\.\d+)?)\s*([^{}]*)\}\s*"
)
#: GSM8K's answer line, ``#### 1,234``: the text after the last ``####`` on its line.
_HASHES_LINE = re.compile(r"####[ \t]*([^\n]*)")
#: The start of a value in a ``####`` line: a number or a fraction, after bold, a dollar sign or a sign.
_VALUE_START = re.compile(r"(?:\*\*|\\?\$|[-+(]|\s)*(?:\.?\d|\\[dtc]?frac)")
#: One plain value in a ``####`` line, as math-verify reads plain text (its number formats: ``1,000`` and ``1 000``
#: are one number, ``3,5`` a decimal comma; numbers joined by operators, ``3/4``, one expression; a ``\frac``).
#: math-verify has no count of the values in a text (it reads one), so the count is ours.
_NUMBER = r"(?:\d{1,3}(?:[ ,]\d{3})+|\d+)(?:[.,]\d+)?|\.\d+"
_PLAIN_VALUE = re.compile(
    rf"\\[dtc]?frac\s*\{{[^{{}}]*\}}\s*\{{[^{{}}]*\}}|(?:{_NUMBER})(?:\s*[-+*/^×÷]\s*\(?\s*(?:{_NUMBER})\s*\)?)*"
)


def _boxed_spans(text: str) -> list[tuple[int, int]]:
    """Bounds of the contents of every closed ``\\boxed{...}`` or ``\\fbox{...}`` (nested braces balanced), in
    order, in O(n).

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
    """Contents of every closed ``\\boxed{...}`` or ``\\fbox{...}`` (nested braces balanced), stripped. The text
    of nested boxes overlaps, so the output (not the scan) can be quadratic in size: :meth:`MathVerifier.hack_score`
    reads the spans (:func:`_box_answers`), not this."""
    return [text[start:end].strip() for start, end in _boxed_spans(text)]


def _box_answers(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, str]]:
    """(start, answer) of each box that holds an answer of its own: its content without the boxes nested in it
    (blanks removed). A box holding only boxes is a wrapper, not an answer (``\\boxed{\\boxed{3}}`` is one answer,
    ``3``); one holding more is (``\\boxed{4 \\boxed{3}}`` holds two, ``4`` and ``3``); an innermost box always is,
    empty or not. Linear in the text: each character belongs to one innermost box."""
    answers: list[tuple[int, str]] = []
    stack: list[list[Any]] = []  # per open box: [start, end, pieces of its own text, where the next piece starts]

    def close(box: list[Any], nested: bool) -> None:
        start, end, pieces, cursor = box
        own = _EMPTY_BOX.sub("", _BLANKS.sub("", "".join(pieces) + text[cursor:end]))
        if own or not nested:
            answers.append((start, own))

    nested_in: set[int] = set()  # starts of the boxes that hold another box
    for start, end in spans:  # sorted by start; boxes nest or are disjoint
        while stack and start >= stack[-1][1]:
            box = stack.pop()
            close(box, box[0] in nested_in)
        if stack:
            parent = stack[-1]
            parent[2].append(text[parent[3] : start])
            parent[3] = end
            nested_in.add(parent[0])
        stack.append([start, end, [], start])
    while stack:
        box = stack.pop()
        close(box, box[0] in nested_in)
    answers.sort()
    return answers


def _repeating_decimal(match: re.Match[str]) -> str:
    """``\\frac{p}{q}`` for a repeating decimal (:data:`_REPEATING`): a.b(c) = (abc - ab) / (10^|b| (10^|c| - 1))."""
    whole, fixed, repeat = match[1] or "0", match[2], match[3] or match[4]
    value = Fraction(int(whole + fixed + repeat) - int(whole + fixed), 10 ** len(fixed) * (10 ** len(repeat) - 1))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _readable(text: str) -> str:
    """``text`` with the right answers math-verify misreads rewritten: repeating decimals as fractions
    (``0.\\overline{3}`` -> ``\\frac{1}{3}``), and a last box that is one text group starting with a number as the
    number and the text (``\\boxed{\\text{6 hours}}`` -> ``\\boxed{6 \\text{ hours}}``), thin-space thousands
    separators dropped (``10\\,000`` -> ``10000``); ``\\fbox`` as ``\\boxed``, which math-verify finds as a
    final answer."""
    text = _FBOX.sub(r"\\boxed", text)
    if "\\overline" in text or "\\bar" in text:  # the searches try every position: 1 ms on 20 kB, skipped
        text = _REPEATING.sub(_repeating_decimal, text)
    if "\\," in text:
        text = _THIN_THOUSANDS.sub(lambda number: number[0].replace("\\,", ""), text)
    spans = _outermost(_boxed_spans(text))
    if spans:
        start, end = spans[-1]
        number = _TEXT_NUMBER.fullmatch(text, start, end)
        if number is not None:
            unit = f" \\text{{ {number[2].strip()}}}" if number[2].strip() else ""
            text = f"{text[:start]}{number[1]}{unit}{text[end:]}"
    return text


def _final_answer_refusal(text: str) -> str | None:
    """Why the final answer of ``text`` holds several candidate values math-verify would read one of, judged on the
    text (the worker judges what math-verify made of it), or ``None``:

    - the last box holds a box and more (``\\boxed{4 \\boxed{3}}``, ``\\boxed{\\boxed{2} + \\boxed{3}}``):
      math-verify reads the innermost last box;
    - GSM8K's answer line, the last ``####`` with no box after it, holds several plain values (``#### 3 or 4``,
      ``#### 3, 4``): math-verify reads the last number of the text. Counted when the line starts with a value or
      is the last line of the text (a Markdown heading ``#### Step 2`` is neither).
    """
    spans = _boxed_spans(text)
    outermost = _outermost(spans)
    if outermost:
        start, end = outermost[-1]
        answers = {answer for _, answer in _box_answers(text, [span for span in spans if start <= span[0] < end])}
        if len(answers) > 1:
            return f"the final answer holds a box and more ({text[start:end].strip()!r}): math-verify reads one box"
    marker = text.rfind("####")
    if marker < 0 or (outermost and outermost[-1][0] > marker):
        return None
    line = _HASHES_LINE.match(text, marker)
    answer = line[1].strip()
    if not _VALUE_START.match(answer) and text[line.end() :].strip():
        return None
    if len(_PLAIN_VALUE.findall(answer)) > 1:
        return f"the #### answer holds several values ({answer!r}): math-verify reads one of them"
    return None


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

    One final answer, read whole: an answer holding several candidate values of which ``math-verify`` would read one
    scores 0.0 (the module's docstring says how); several values it reads whole compare as one set or tuple.

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
        self.version = f"5+math-verify-{_package_version('math-verify')}"
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
        text = _readable(completion[-self.max_chars :])
        details: dict[str, Any] = {"gold": gold_text, "truncated_input": len(completion) > self.max_chars}
        refused = _final_answer_refusal(text)
        if refused is not None:
            return VerifierResult(0.0, "fail", None, {**details, "extracted": None, "refused": refused})
        request = {
            "gold": _readable(gold_text),
            "completion": text,
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
        """P_hack for math (method §2.1): 1.0 for several *distinct* boxed final answers (hedging: the answers are
        the boxes' own contents, :func:`_box_answers`, so a box around a box is one answer and ``\\boxed{4
        \\boxed{3}}`` two), several distinct GSM8K ``####`` answer lines (``#### 3`` then ``#### 4``) or answer
        spam (five or more outermost boxes), else 0.0. Linear time.

        A completion over the size cap (:attr:`max_completion_chars`: the instance's when called on an instance,
        the class's when called on the class) scores 1.0 without being read: :meth:`safe_verify` scores it 0.0
        unchecked, so padding past the cap must not also be a way around this penalty.
        """
        if self.max_completion_chars is not None and len(completion) > self.max_completion_chars:
            return 1.0
        spans = _boxed_spans(completion)
        if len(_outermost(spans)) >= 5:
            return 1.0
        distinct = {answer for _, answer in _box_answers(completion, spans)}
        lines = {_BLANKS.sub("", line) for line in _HASHES_LINE.findall(completion) if _VALUE_START.match(line)}
        return float(len(distinct) >= 2 or len(lines) >= 2)
