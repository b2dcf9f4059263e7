"""Span signals of the Coq verifier (``CoqVerifier(emit_spans=True)``, method §6): the goal-probe file of
:meth:`~.coq.CoqBackend.trace_goals`, reading its probe files, and the ``tactic`` spans of
:class:`~.coq.CoqVerifier`.

One ``tactic`` span per sentence of the checked script: the sentences :func:`_lex_sentences` cuts after the
restatement, ``Proof.`` and ``Qed.`` are stripped, numbered from 0 (``key="tactic:<k>"``). **Bullets, braces and
goal selectors belong to the sentence they precede** (``- reflexivity.``, ``} { simpl.``, ``2: auto.`` are one span
each); a closing ``}`` at the very end with no tactic after it is a span of its own. ``start``/``end`` are offsets
into the completion text ``verify`` receives; the span starts at the first character that is neither blank nor in a
comment and ends after the sentence's ``.``. Value 1.0 when Coq accepted the sentence, 0.0 for the first failing
sentence and every one after it (never run); ``meta`` = ``accepted``, ``goals_before``, ``goals_after``,
``delta_goals`` (open goals: focused + unfocused, shelved ones not counted; ``None`` where unknown).

Goals and acceptance come from **one extra** ``coqc`` run (:meth:`~.coq.CoqBackend.trace_goals`, same sandbox,
limits and timeout as the outcome check) in which ``Redirect "<random nonce>_<g>" Show.`` follows each sentence;
``coqc`` stops at the first error, so exactly the accepted sentences have their probe file. The outcome check is
untouched and stays the only authority on the score (spans never change it). Measured cost (this machine, bwrap
sandbox, a 10-tactic ``induction`` proof, median of 15): 0.16 s per ``verify`` without spans, 0.23 s with (+0.07 s,
~1.45x; the trace run has no ``Qed``/``Print Assumptions``). A proof that times out costs two timeouts.

Hack detectors: a flagged span has value 0. Flags: ``"unsound"`` (``admit``/``give_up``/``Admitted``/``Abort`` and
``*_no_check`` tactics in that sentence), ``"new_hypothesis"`` (``Axiom``/``Hypothesis``/``Variable``/
``Parameter``/... in the sentence, and ``assert``/``enough``/``cut``/``have``/``suff`` when that sentence or a later
one holds a placeholder: ``assert ... by admit``, ``cut P. - ... - admit.``), ``"disallowed_axiom"`` (the sentence
names an axiom the outcome check refused), the finding category for other screening findings, and ``"rejected"``
on every span of a completion the screening rejected. Rejected scripts are not run, except when the only rejecting
findings are the ``admit``/``give_up`` tactics (ordinary tactics, safe to run): then ``meta`` still shows what Coq
did, e.g. that ``admit`` closed a goal. No script: ``spans == []``; an unlexable script: one span over all of it;
an unscorable outcome (sandbox failure, a dataset row that does not compile): ``spans == []``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..base import SpanSignal, VerifierResult
from .backend import GoalTrace, ProofBackend, SentenceTrace
from .output import count_goals
from .script import _RUNNABLE_REJECTIONS, _code_start, _lex_sentences, _Screening, _span_flags

__all__ = ["GoalProbe", "goal_probe", "sentence_traces", "tactic_spans"]


@dataclass(frozen=True)
class GoalProbe:
    """The file of one goal-trace run (:func:`goal_probe`).

    Attributes:
        source: the ``Check.v`` text to compile.
        reports: the probe files' names, ``<nonce>_init`` (before the proof) first, then one per group.
        groups: the sentences (indices into :func:`_lex_sentences` of the proof) each later probe follows.
        sentences: how many sentences the proof has.
    """

    source: str
    reports: list[str]
    groups: list[list[int]]
    sentences: int


def goal_probe(theorem: str, proof: str, preamble: str = "") -> GoalProbe:
    """The probed file of :meth:`~.coq.CoqBackend.trace_goals` (see there); ``ValueError`` when ``proof`` cannot be
    lexed."""
    stated = theorem.strip()
    if not stated.endswith("."):
        stated += "."
    sentences = _lex_sentences(proof)
    nonce = "goals_" + secrets.token_hex(8)
    groups: list[list[int]] = []
    pieces: list[str] = []
    pos = 0
    pending: list[int] = []
    for k, sentence in enumerate(sentences):
        pending.append(k)
        safe = sentence.terminated and (sentence.end == len(proof) or proof[sentence.end].isspace())
        if safe or k == len(sentences) - 1:
            separator = " " if safe else "\n"
            pieces.append(f'{proof[pos : sentence.end]}{separator}Redirect "{nonce}_{len(groups)}" Show.')
            groups.append(pending)
            pending, pos = [], sentence.end
    pieces.append(proof[pos:])
    head = (preamble.strip() + "\n" if preamble.strip() else "") + "Set Printing Unfocused.\n"
    source = f'{head}{stated}\nProof.\nRedirect "{nonce}_init" Show.\n{"".join(pieces)}\nAbort.\n'
    names = [f"{nonce}_init", *(f"{nonce}_{g}" for g in range(len(groups)))]
    return GoalProbe(source, names, groups, len(sentences))


def sentence_traces(probe: GoalProbe, reports: dict[str, str | None]) -> list[SentenceTrace]:
    """What Coq did with each sentence, read from the probe files of a run whose initial probe was written: a group
    is accepted iff its probe file was written (and every group before it was)."""
    steps: list[SentenceTrace] = [SentenceTrace(False, None, None) for _ in range(probe.sentences)]
    before = count_goals(reports[probe.reports[0]])
    running = True
    for g, members in enumerate(probe.groups):
        report = reports[probe.reports[g + 1]]
        running = running and bool(report)
        after = count_goals(report) if running and report else None
        for k in members:
            last = k == members[-1]
            steps[k] = SentenceTrace(running, before, after if last else None)
            before = after if last else None
    return steps


def tactic_spans(
    backend: ProofBackend,
    theorem: str,
    preamble: str,
    raw: str,
    offset: int,
    screening: _Screening,
    result: VerifierResult,
    timeout: float,
) -> list[SpanSignal]:
    """One ``tactic`` span per kept sentence of the script (see the module docstring); ``[]`` without a script.

    ``raw`` is the proof script as located in the completion, starting at ``offset``; ``result`` the outcome score
    (its ``details`` get ``spans_elapsed``/``spans_error``); the trace runs on ``backend`` with ``timeout``.
    """
    if not raw:
        return []
    rejected = result.status == "rejected"
    empty_meta = {"accepted": False, "goals_before": None, "goals_after": None, "delta_goals": None}
    if not screening.lexed:
        flags = ("rejected", "unlexable")
        return [SpanSignal(offset, offset + len(raw), 0.0, "tactic", "tactic:0", flags, dict(empty_meta))]
    sentences = screening.sentences
    if not sentences:
        return []
    if result.score is None:  # the row itself is unscorable: no signal
        result.details["spans_error"] = "not traced: the outcome check was unscorable"
        return []
    trace: GoalTrace | None = None
    if not rejected or all(f.rule in _RUNNABLE_REJECTIONS for f in screening.findings if f.reject):
        trace = backend.trace_goals(theorem, screening.body, timeout, preamble=preamble)
        result.details["spans_elapsed"] = trace.elapsed
        if trace.status in ("header_error", "crash") or len(trace.sentences) != len(sentences):
            result.details["spans_error"] = f"goal trace failed ({trace.status}): {trace.error[:300]}"
            if not rejected:
                return []
            trace = None
    # The outcome check compiled the whole script (it passed, or only its assumptions were refused): every
    # sentence was accepted, whatever a separate trace run that ran out of time says.
    compiled = result.score == 1.0 or "disallowed_axioms" in result.details
    if compiled and trace is not None and trace.status != "complete":
        result.details["spans_error"] = f"goal trace incomplete ({trace.status}) on a script that compiled"
    disallowed = result.details.get("disallowed_axioms") or []
    flags_of = _span_flags(screening, rejected, disallowed)
    spans: list[SpanSignal] = []
    for k, (sentence, flags) in enumerate(zip(sentences, flags_of, strict=True)):
        step = trace.sentences[k] if trace is not None else SentenceTrace(False, None, None)
        before, after = step.goals_before, step.goals_after
        meta = {
            "accepted": step.accepted or compiled,
            "goals_before": before,
            "goals_after": after,
            "delta_goals": after - before if before is not None and after is not None else None,
        }
        value = 1.0 if meta["accepted"] and not flags else 0.0
        start = offset + _code_start(raw, sentence.start, sentence.end)
        spans.append(SpanSignal(start, offset + sentence.end, value, "tactic", f"tactic:{k}", flags, meta))
    return spans
