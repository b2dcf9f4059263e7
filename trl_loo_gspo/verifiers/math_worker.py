"""``math-verify`` in a worker process, and the rule on relations it applies (for :mod:`.math`).

The worker is a plain ``python -c`` process (not a fork of the trainer) that imports only ``math-verify``; its
program is this module's worker functions, sent through a pipe. Each call is bounded in wall time from any thread:
the caller waits in ``poll`` without holding the GIL and kills the worker past the limit. See
:class:`~trl_loo_gspo.verifiers.math.MathVerifier`.
"""

from __future__ import annotations

import atexit
import inspect
import json
import math
import os
import re
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

# --- Relations in a final answer --------------------------------------------------------------------------------
# Why both the parsed answer and its text: math-verify's sympy objects keep what it understood (Eq, the inequalities,
# Ne, And for chains such as ``x = 4 = 3``, sets of them), which is robust to spacing and spelling (``\le``, ``≤``,
# ``\leqslant`` are one LessThan) and tells ``x = 3`` (an Eq whose left side is a Symbol) from ``\frac{6}{2} = 3``. But
# it drops some relations before they reach sympy: an approximation becomes one of its sides (``3 \approx 4`` -> 3,
# ``3 \simeq 4`` -> 4), and a chain it cannot convert is cut to its last part (``3 = 4 = 3`` -> 3). Those leave a
# token in the text of the answer, so that text is scanned for relation tokens too: the source text of the answer
# math-verify converted (recorded in the worker) and the text of the first match it tried, which may differ.
# These functions run in the worker (sent as source, :func:`_worker_source`): each imports what it uses.

#: Relation tokens (in math-verify's normalised LaTeX of the answer): commands not followed by a letter (``\le`` is
#: not ``\left``), Unicode signs, ASCII operators. The ``=`` spellings are :data:`_EQUALS_TOKENS`.
_RELATION_TOKEN = (
    r"\\(?:approx|approxeq|thickapprox|simeq|sim|thicksim|backsim|backsimeq|eqsim|cong|doteq|doteqdot"
    r"|fallingdotseq|risingdotseq|equiv|asymp|propto|lessapprox|gtrapprox|lesssim|gtrsim"
    r"|neq|ne|not|lt|gt|le|leq|leqq|leqslant|ge|geq|geqq|geqslant|ll|gg|nless|ngtr|nleq|ngeq"
    r"|to|rightarrow|longrightarrow|mapsto|Rightarrow|Longrightarrow|implies|iff|Leftrightarrow|Longleftrightarrow"
    r"|coloneqq)(?![A-Za-z])"
    r"|[\u2248\u224a\u224b\u2243\u2245\u223c\u2252\u2253\u2250\u2251\u2261\u224d\u221d\u2249\u2244\u2247\u2262"
    r"\u2260\u2264\u2265\u2266\u2267\u2a7d\u2a7e\u226a\u226b\u226e\u226f\u2192\u21d2\u27f9\u21d4\u27fa\u21a6]"
    r"|<=>|=>|->|<=|>=|!=|<>|:=|==|[<>=]"
)
#: The tokens of an equation; one of them (per comma-separated part) may assign a value to a variable (``x = 3``).
_EQUALS_TOKENS = ("=", ":=", "==", "\\coloneqq")
#: Approximation tokens: a final answer with one counts only against a gold answer with one (``x \approx 3`` is not
#: ``x = 3``), even where the gold answer is a relation.
_APPROX_TOKEN = (
    r"\\(?:approx|approxeq|thickapprox|simeq|sim|thicksim|backsim|backsimeq|eqsim|cong|doteq|doteqdot"
    r"|fallingdotseq|risingdotseq|asymp|lessapprox|gtrapprox|lesssim|gtrsim)(?![A-Za-z])"
    r"|[\u2248\u224a\u224b\u2243\u2245\u223c\u2252\u2253\u2250\u2251\u224d]"
)
#: Operators that join alternatives, of which math-verify reads one operand (``3 \cup 4``, ``3 \vee 4``,
#: ``3 \,|\, 4``, ``3 \ \&\ 4``, ``3 \mid 4``, ``3 \setminus 4``, ``3 \text{ (or 4)}`` all equalled a gold 4 or 3): set
#: and logical operators, ``\mid``, ``&``, a pipe or ``\vert`` with space on both sides (not an absolute value), the
#: word "or".
_ALTERNATIVES_TOKEN = (
    r"\\(?:cup|cap|vee|wedge|lor|land|bigcup|bigcap|sqcup|sqcap|setminus|mid)(?![A-Za-z])|\\?&"
    r"|(?:\\[,;:! ]|\s)(?:\||\\vert(?![A-Za-z]))(?:\\[,;:! ]|\s)|(?<![A-Za-z])or(?![A-Za-z])"
)


def _tree_relations(answers: list[Any]) -> tuple[int, int]:
    """(value assignments, other relations) in the sympy objects among ``answers``.

    A value assignment is an ``Eq`` whose left side is a variable — a Symbol (``x``, ``x_1``, ``\\alpha``,
    ``\\text{Area}``) or a tuple of Symbols (``(x, y) = (1, 2)``) — and whose right side holds no relation. Any other
    relation — an ``Eq`` (``4 = 3``), an inequality, ``Ne``, a chain (``And``), ``Contains``, a Piecewise condition —
    counts in the second number. Truth values are not relations (an Interval's arguments hold two).
    """
    from sympy import Basic, Eq, Symbol, Tuple
    from sympy.logic.boolalg import Boolean, BooleanAtom

    def is_variable(side: Any) -> bool:
        if isinstance(side, Tuple):
            return len(side.args) > 0 and all(isinstance(item, Symbol) for item in side.args)
        return isinstance(side, Symbol)

    assignments = others = 0
    stack = [answer for answer in answers if isinstance(answer, Basic)]
    while stack:
        node = stack.pop()
        if isinstance(node, Eq) and is_variable(node.lhs):
            assignments += 1
            stack.append(node.rhs)  # a relation on the right side (x = 4 = 3 is And, x = (4 < 3)) is one more
        elif isinstance(node, Boolean) and not isinstance(node, (Symbol, BooleanAtom)):
            others += 1
        else:
            stack.extend(item for item in node.args if isinstance(item, Basic))
    return assignments, others


def _is_relation(texts: list[str], answers: list[Any]) -> bool:
    """Whether a (gold) answer is a relation: a relation token in its text or a relation among its sympy objects."""

    return any(re.search(_RELATION_TOKEN, text) for text in texts) or any(_tree_relations(answers))


def _relation_refusal(texts: list[str], answers: list[Any]) -> str | None:
    """Why a predicted final answer is a relation (which counts only against a gold relation), or ``None`` when it is
    a value. ``texts``: the texts of the answer (see the comment above); ``answers``: what math-verify parsed.

    A value: no relation token but ``=`` (approximations and inequalities never are), at most one ``=`` in each part
    of a list (``x = 3, y = 4``; a chain ``3 = 4 = 3`` is not a value even where math-verify kept its last part), and
    no relation among the sympy objects but value assignments (:func:`_tree_relations`).
    """

    for text in texts:
        for part in re.split(r",|;|\\\\", text):
            tokens = re.findall(_RELATION_TOKEN, part)
            other = next((token for token in tokens if token not in _EQUALS_TOKENS), None)
            if other is not None:
                return f"the final answer is a relation ({other!r}) and the gold answer is not"
            if len(tokens) > 1:
                return "the final answer is a chain of equations and the gold answer is not"
    if _tree_relations(answers)[1]:
        return "the final answer is an equation or inequality (not variable = value) and the gold answer is not"
    return None


def _gold_refusal(gold_text: str, gold_is_relation: bool, texts: list[str]) -> str | None:
    """Why a predicted final answer cannot be compared with this gold answer, beyond :func:`_relation_refusal`:
    alternatives joined by an operator math-verify reads one side of (unless the gold answer uses one too, or, for
    "or", is itself a list), and, against a gold relation, an approximation the gold answer lacks or a longer chain
    of relations than the gold answer's (``x = 4 = 3``, ``x = 3 \\approx 4`` for a gold ``x = 3``)."""

    gold_parts = re.split(r",|;|\\\\", gold_text)
    for text in texts:
        for token in re.findall(_ALTERNATIVES_TOKEN, text):
            word = token.strip(" \\,;:!")
            if re.search(_ALTERNATIVES_TOKEN, gold_text) or (word == "or" and len(gold_parts) > 1):
                continue
            return f"the final answer joins alternatives ({word or token!r}) and the gold answer does not"
        pipes = r"\\vert(?![A-Za-z])|(?<!\\)\|"
        if len(re.findall(pipes, text)) % 2 and not re.search(pipes, gold_text):  # an unpaired pipe: no |x|
            return "the final answer joins alternatives (an unpaired '|') and the gold answer does not"
        if re.search(_APPROX_TOKEN, text) and not re.search(_APPROX_TOKEN, gold_text):
            return "the final answer is an approximation and the gold answer is not"
    if gold_is_relation:
        longest = max(len(re.findall(_RELATION_TOKEN, part)) for part in gold_parts)
        for text in texts:
            for part in re.split(r",|;|\\\\", text):
                if len(re.findall(_RELATION_TOKEN, part)) > longest:
                    return "the final answer is a longer chain of relations than the gold answer"
    return None


# --- Reading the final answer whole ------------------------------------------------------------------------------
# math-verify tries its matches in order (anchored first: a box, "final answer is", "answer:"; then any LaTeX or
# number, rightmost first) and returns the first it converts. Two ways it reads one value of several: it falls back to
# another match when it cannot convert the final answer (the 4 of ``\boxed{3 \oplus 4}``), and its unit normalisation
# drops the end of an answer from a text group on (``3 \text{ (maybe 4)}`` -> 3). :func:`_whole_reading` sees both
# (the worker's ``dropped_by_units`` runs math-verify's own normalisation with and without units).


def _whole_reading(predicted: list[Any], first: dict[str, Any] | None, dropped: str) -> tuple[list[Any], str | None]:
    """(the answers to compare, why the answer is refused or ``None``): math-verify's reading kept only where it is of
    the whole final answer. ``first``: the first match tried (``text``, ``read``, ``anchored``); ``dropped``: what
    the unit normalisation cut from the match read (``dropped_by_units`` in :func:`_worker_main`).

    - An anchored final answer math-verify could not convert is compared as text (math-verify's own fallback string,
      equal only to the same text of the gold answer), not by another match; unanchored text keeps the fallback.
    - Dropped text may be a unit (``\\text{ cm}^2``), not a value or an alternative: no digit but a unit's exponent,
      no list separator ("or" and "and" become commas: ``\\text{ (or 4)}`` is dropped as ``\\text{ (, 4)}``).
    """
    if first is not None and first["anchored"] and not first["read"]:
        return [item for item in predicted if isinstance(item, str)], None
    if re.search(r"[\d,;]", re.sub(r"\^\s*\{?\s*\d+\s*\}?\s*$", "", dropped)):
        return predicted, f"math-verify drops {dropped!r} as a unit: a value or alternative kept from the gold answer"
    return predicted, None


# --- The worker process -------------------------------------------------------------------------------------------


def _worker_main(sys_path: list[str]) -> None:
    """The loop of a worker process, in its main thread (so math-verify's ``signal.alarm`` timeouts work there).

    Protocol: length-prefixed JSON frames; a request on stdin; on stdout, ``{"step": ...}`` before each bounded call
    (``"gold"``, ``"completion"``, ``"verify"``: the caller restarts its clock at each) and one reply. The worker exits
    when its stdin closes. It imports math-verify only, not this package (whose import takes torch and TRL).
    """
    import itertools
    import json
    import logging
    import math
    import os
    import signal
    import struct
    import sys

    sys.path[:0] = [entry for entry in sys_path if entry not in sys.path]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's; the worker ends when its stdin closes
    replies = os.dup(1)
    os.dup2(2, 1)  # what the libraries print goes to stderr, not into the replies

    from dataclasses import replace

    import math_verify.parser
    from latex2sympy2_extended.math_normalization import normalize_latex
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)  # a timeout is reported to the caller, as an anomaly

    def send(message: dict) -> None:
        data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
        data = struct.pack(">I", len(data)) + data
        while data:
            data = data[os.write(replies, data) :]

    def take(size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = os.read(0, size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    # parse() returns the parsed answer and the text of the first match it tried, which need not be the same match;
    # extract_match, which parse's loop calls by its module-global name, sees each match. (Without it, in another
    # math-verify version, the texts are the first match's only and :func:`_whole_reading` finds nothing.)
    extracted: list[tuple[Any, Any]] = []  # per match tried: ((match, target), (answer, text))
    extract_match = getattr(math_verify.parser, "extract_match", None)

    def recording_extract_match(*args: Any, **kwargs: Any) -> Any:
        result = extract_match(*args, **kwargs)
        extracted.append((args, result))
        return result

    # The priority of parse()'s patterns; the largest is the unanchored ones'. Unknown (another version): anchored.
    try:
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, get_extraction_regexes

        targets = [LatexExtractionConfig(), ExprExtractionConfig()]
        priorities = {pattern: rank for found, _ in get_extraction_regexes(targets) for pattern, rank in found}
    except Exception:  # noqa: BLE001 - every match is then anchored
        priorities = {}
    unanchored = max(priorities.values(), default=math.inf)

    if extract_match is not None:
        math_verify.parser.extract_match = recording_extract_match

    def dropped_by_units(match: Any, target: Any) -> str:
        """What math-verify's unit normalisation cut from the end of the LaTeX groups of ``match`` (``3 \\text{
        (maybe 4)}`` -> ``\\text{ (maybe 4)}``): its own ``normalize_latex`` with and without units."""
        dropped = []
        try:  # a LaTeX match's config; other matches (plain numbers) have none, another version may differ: ""
            for name, raw in match.groupdict().items():
                if raw and "_latex" in name:
                    group = replace(target.normalization_config, malformed_operators=False, nits=False)
                    if name.split("_")[1] == "latexBoxed":  # as math-verify's extract_latex does
                        group = replace(group, boxed="last")
                    kept, whole = normalize_latex(raw, group), normalize_latex(raw, replace(group, units=False))
                    dropped.append(whole[len(kept) :].strip() if whole.startswith(kept) else "")
        except Exception:  # noqa: BLE001
            return ""
        return " ".join(part for part in dropped if part)

    def bounded_parse(text: str, seconds: int) -> tuple[list[Any] | None, list[str], dict[str, Any] | None, str]:
        """(answers, texts, first, dropped), ``([], [], None, "")`` when nothing was found, ``(None, ...)`` on
        timeout. The texts: the source of the parsed answer, the text of the first match tried (the final answer by
        math-verify's priorities, which it may have failed to convert: ``3 \\simeq 4`` yields the 4 of another match)
        and ``dropped``; ``first`` and ``dropped``: see :func:`_whole_reading`."""
        extracted.clear()
        try:
            found = parse(text, parsing_timeout=seconds, raise_on_error=True)
        except TimeoutException:
            return None, [], None, ""
        except Exception:  # what parse() without raise_on_error returns
            return [], [], None, ""
        read = [item for item in extracted if found and isinstance(item[1], tuple) and item[1][0] is found[0]]
        sources = [str(result[1]) for _, result in read if len(result) == 2]
        dropped = dropped_by_units(*read[0][0][:2]) if read and len(read[0][0]) >= 2 else ""
        first = None
        if extracted and isinstance(extracted[0][1], tuple) and len(extracted[0][1]) == 2:
            call, (answer, first_text) = extracted[0]
            anchored = priorities.get(getattr(call[0], "re", None) if call else None, -1) < unanchored
            first = {"text": str(first_text), "read": answer is not None, "anchored": anchored}
        texts = sources + [item for item in found if isinstance(item, str)] + ([dropped] if dropped else [])
        return found, texts, first, dropped

    golds: dict[str, tuple[list[Any], bool]] = {}  # gold text -> (parsed, is a relation); rows repeat a gold answer
    send({"ready": True})
    while True:
        header = take(4)
        body = None if header is None else take(struct.unpack(">I", header)[0])
        if body is None:
            os._exit(0)  # the caller closed the pipe (or exited): nothing to flush, no slow interpreter teardown
        try:
            request = json.loads(body.decode("utf-8", "surrogatepass"))
            seconds = max(1, math.ceil(request["timeout"]))
            gold_text = request["gold"]
            if gold_text not in golds:
                send({"step": "gold"})
                wrapped = gold_text if "$" in gold_text or "\\boxed" in gold_text else f"${gold_text}$"
                gold = bounded_parse(wrapped, seconds)[0]
                if gold == []:
                    send({"step": "gold"})
                    gold = bounded_parse(gold_text, seconds)[0]
                if gold is None:
                    send({"gold": "timeout"})
                    continue
                if len(golds) >= 1024:
                    golds.clear()
                golds[gold_text] = (gold, bool(gold) and _is_relation([gold_text], gold))
            gold, gold_is_relation = golds[gold_text]
            if not gold:
                send({"gold": "empty"})
                continue
            send({"step": "completion"})
            predicted, sources, first, dropped = bounded_parse(request["completion"], seconds)
            if predicted is None or not predicted:
                send({"completion": "empty" if predicted == [] else "timeout"})
                continue
            answer = str(predicted[-1])
            refused = None if gold_is_relation else _relation_refusal(sources, predicted)
            refused = refused or _gold_refusal(gold_text, gold_is_relation, sources)
            predicted, reading = _whole_reading(predicted, first, dropped)
            refused = refused or reading
            if refused is not None:
                send({"extracted": answer, "refused": refused})
                continue
            # verify(gold, predicted) is any() over the pairs, each pair under its own alarm; one call per pair
            # reports each pair's timeout instead of turning it into False.
            equal = timed_out = False
            for index, pair in enumerate(itertools.product(gold, predicted)):
                send({"step": "verify", "extracted": answer} if index == 0 else {"step": "verify"})
                try:
                    equal = verify(*pair, timeout_seconds=seconds, raise_on_error=True, **request["options"])
                except TimeoutException:
                    timed_out = True
                except Exception:  # what verify() without raise_on_error does with a failing pair
                    equal = False
                if equal:
                    break
            send({"extracted": answer, "equal": bool(equal), "timed_out": timed_out and not equal})
        except Exception as err:  # noqa: BLE001 - the caller turns it into an unscorable result
            send({"error": f"{type(err).__name__}: {err}"})


#: Run by ``python -c`` in the worker: reads the worker's source (one frame on stdin) and runs it. The source goes
#: through the pipe, not the command line, which is ASCII-safe whatever the locale and stays short in ``ps``.
_LOADER = (
    "import os, struct\n"
    "def _take(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        chunk = os.read(0, n - len(data))\n"
    "        if not chunk:\n"
    "            raise SystemExit(0)\n"
    "        data += chunk\n"
    "    return data\n"
    "exec(compile(_take(struct.unpack('>I', _take(4))[0]).decode(), '<math-verify worker>', 'exec'))\n"
)
_WORKER_FUNCTIONS = (_tree_relations, _is_relation, _relation_refusal, _gold_refusal, _whole_reading, _worker_main)
_WORKER_START_SECONDS = 120.0  # importing sympy and math-verify: about 1 s here; generous for a loaded machine
_GRACE_SECONDS = 1.0  # past timeout_seconds, for the worker's own alarm to answer before it is killed
_MAX_WORKERS = 4  # worker processes per process at most: one per thread checking at the same time, started lazily


def _read_worker_source() -> str | None:
    """The worker's program: this module's worker functions and constants (the same code as here); ``None`` when
    the module's source file cannot be read."""
    try:
        functions = [inspect.getsource(function) for function in _WORKER_FUNCTIONS]
    except (OSError, TypeError):
        return None
    constants = "\n".join(
        f"{name} = {value!r}"
        for name, value in (
            ("_RELATION_TOKEN", _RELATION_TOKEN),
            ("_EQUALS_TOKENS", _EQUALS_TOKENS),
            ("_APPROX_TOKEN", _APPROX_TOKEN),
            ("_ALTERNATIVES_TOKEN", _ALTERNATIVES_TOKEN),
        )
    )
    header = "from __future__ import annotations\nimport re\nfrom typing import Any"
    return "\n\n".join([header, constants, *functions])


#: Read at import, not at the first check: the file on disk may have changed by then (a branch switched during a run).
_WORKER_SOURCE = _read_worker_source()


def _worker_source() -> str:
    if _WORKER_SOURCE is None:
        raise RuntimeError("MathVerifier's worker needs the source file of trl_loo_gspo/verifiers/math_worker.py")
    return _WORKER_SOURCE


class _WorkerGone(Exception):
    """The worker's stdin was closed before a request could be sent (it died while idle)."""


class _Worker:
    """One worker process and its pipes; used by one thread at a time (:class:`_WorkerPool`)."""

    def __init__(self) -> None:
        if not sys.executable:
            raise RuntimeError("MathVerifier needs sys.executable to start its math-verify worker")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self._buffer = b""
        self._poll = select.poll()
        self._poll.register(self.process.stdout.fileno(), select.POLLIN)
        source = _worker_source() + f"\n\n_worker_main({sys.path!r})\n"
        try:
            self._send_bytes(source.encode("utf-8"))
            ready = self._receive(time.monotonic() + _WORKER_START_SECONDS)
        except (OSError, EOFError) as err:
            self.kill()
            raise RuntimeError(f"the math-verify worker did not start ({err}); its stderr says why") from err
        if ready is None:
            self.kill()
            raise RuntimeError(f"the math-verify worker did not start within {_WORKER_START_SECONDS:.0f} s")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()

    def close(self, wait_seconds: float = 1.0) -> None:
        """End the worker (it exits when its stdin closes), killing it if it does not within ``wait_seconds``."""
        try:
            self.process.stdin.close()
            self.process.wait(wait_seconds)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def check(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        """The worker's reply to ``request``; ``{"killed": <step>, ...}`` when a step took over ``seconds`` plus a
        grace (the worker is then killed). Raises :class:`_WorkerGone` (nothing sent) or ``EOFError`` (it died)."""
        data = json.dumps(request, ensure_ascii=False).encode("utf-8", "surrogatepass")
        try:
            self._send_bytes(data)
        except BrokenPipeError as err:
            raise _WorkerGone from err
        step, extracted = "gold", None
        deadline = time.monotonic() + seconds + _GRACE_SECONDS
        while True:
            message = self._receive(deadline)
            if message is None:
                self.kill()
                return {"killed": step, "extracted": extracted}
            if "step" not in message:
                return message
            step, extracted = message["step"], message.get("extracted", extracted)
            deadline = time.monotonic() + seconds + _GRACE_SECONDS

    def _send_bytes(self, data: bytes) -> None:
        frame = memoryview(struct.pack(">I", len(data)) + data)
        while frame:  # an unbuffered write may write part of it (a signal)
            frame = frame[self.process.stdin.write(frame) :]

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or ``None`` at ``deadline``. Waits in ``poll``, without the GIL."""
        while True:
            if len(self._buffer) >= 4:
                end = 4 + struct.unpack(">I", self._buffer[:4])[0]
                if len(self._buffer) >= end:
                    message, self._buffer = self._buffer[4:end], self._buffer[end:]
                    return json.loads(message.decode("utf-8", "surrogatepass"))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self._poll.poll(math.ceil(remaining * 1000)):
                chunk = os.read(self.process.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise EOFError(f"the math-verify worker exited (status {self.process.wait()})")
                self._buffer += chunk


class _WorkerPool:
    """The worker processes of this process, shared by every :class:`MathVerifier`: at most ``size`` checks at once
    (a thread beyond waits for a free worker); a worker starts on first need and is reused."""

    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()

    def check(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        with self._slots:
            for attempt in (1, 2):
                worker = self._take()
                try:
                    reply = worker.check(request, seconds)
                except _WorkerGone:
                    self._drop(worker)
                    if attempt == 2:
                        raise RuntimeError("the math-verify worker exited before it could be sent a request") from None
                    continue
                except EOFError as err:
                    self._drop(worker)
                    raise RuntimeError(str(err)) from None
                except BaseException:  # KeyboardInterrupt while waiting: the worker's state is unknown
                    self._drop(worker)
                    raise
                self._give_back(worker)
                return reply
        raise AssertionError("unreachable")

    def shutdown(self) -> None:
        """Close the idle workers; kill the busy ones (their threads see them die: unscorable results)."""
        with self._lock:
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for worker in idle:
            worker.close()
        for worker in busy:
            if worker.alive():
                worker.process.kill()  # the pipes stay open: the thread using it reads the end and drops it

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    self._busy.add(worker)
                    return worker
                worker.kill()  # died while idle: reap it
        worker = _Worker()  # outside the lock: starting takes a second or two
        with self._lock:
            self._busy.add(worker)
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if worker.alive():
                self._idle.append(worker)
                return
        worker.kill()

    def _drop(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        worker.kill()


_POOL: _WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def _worker_pool() -> _WorkerPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = _WorkerPool(_MAX_WORKERS)
        return _POOL


def shutdown_workers() -> None:
    """End this process's math-verify worker processes (at exit too); the next check starts one again."""
    with _POOL_LOCK:
        pool = _POOL if _POOL is not None and _POOL.pid == os.getpid() else None
    if pool is not None:
        pool.shutdown()


def _forget_workers_after_fork() -> None:
    """In a forked child: the parent's workers and pipes are the parent's; close this copy of the pipes, start anew."""
    global _POOL, _POOL_LOCK
    pool, _POOL, _POOL_LOCK = _POOL, None, threading.Lock()
    if pool is not None:
        for worker in [*pool._idle, *pool._busy]:
            for pipe in (worker.process.stdin, worker.process.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass


atexit.register(shutdown_workers)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers_after_fork)
