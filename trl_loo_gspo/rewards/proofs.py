"""Formal-proof verifiers (method §2.1): a proof-checker backend interface, a Coq backend, a Lean stub.

A row of a proof dataset supplies the statement (column ``theorem``, e.g. ``Theorem add_0_r : forall n : nat, n + 0
= n.``) and optionally a ``preamble`` (``Require Import``/``Definition`` sentences the statement needs). Both are
trusted. The completion supplies only a *proof script* (located by
:func:`~trl_loo_gspo.rewards.coq_script.extract_proof_script`). :class:`CoqVerifier` builds the file

.. code-block:: coq

    <preamble>
    <theorem>
    Proof.
    <proof script>
    Qed.
    Redirect "<nonce>" Print Assumptions <name>.

runs ``coqc`` on it in a resource-limited sandbox and scores 1.0 when ``coqc`` accepts it and the theorem depends on
no axiom outside ``allowed_axioms`` (empty by default: the output must be "Closed under the global context").

The script is screened first, without running Coq; the rules (**tactics only**, a deny-list of vernacular keywords
and unsound tactics, a verbatim restatement of the dataset's preamble and theorem is stripped) are documented in
:mod:`trl_loo_gspo.rewards.coq_script`. ``coqc`` runs through :func:`~trl_loo_gspo.rewards.limited_run.run_limited`
(rlimits, process-group timeout, scrubbed environment, bubblewrap when available).

Scoring: 1.0 pass; 0.0 fail (rule rejection, ``coqc`` error, incomplete proof, disallowed assumptions, memory or
output limit, ``coqc`` crashing on the proof); 0.0 with anomaly ``"timeout"`` when the check runs out of time — a
proof that does not finish in the budget is the policy's failure, not an infrastructure one, but it is flagged so
that a too-small budget shows up in the anomaly metrics; 0.0 with anomaly ``"parse_failure"`` when no proof script
could be extracted; 0.0 with anomaly ``"oversize"`` for a completion over ``max_completion_chars`` (100 000), scored
without lexing or running anything.

Verdicts come from channels the proof cannot write
--------------------------------------------------
``None`` (unscorable) takes an answer out of the leave-one-out baseline, so a proof that could make its own failure
look unscorable would never be penalised — a learnable escape. Everything the proof's text or output could cause is
therefore 0.0, and ``None`` is kept for faults *shown* to lie in the infrastructure or the dataset, by evidence the
proof cannot forge; nothing ``coqc`` prints (a ``File "...", line N`` location, a ``bwrap: ...`` line, both
printable by ``idtac`` or ``fail "..."``) decides a verdict:

* ``None`` with ``"sandbox_failure"`` when bubblewrap's own status channel (``--json-status-fd``, see
  :mod:`~trl_loo_gspo.rewards.limited_run`) reports that ``coqc`` never ran;
* ``None`` with ``"verifier_exception"`` when the dataset row itself does not compile: the *statement check* — the
  preamble, the statement, ``Proof. Admitted.`` and the ``Print Assumptions`` footer, with no candidate text — fails.
  It runs only when a candidate's check failed, once per (preamble, statement, ``coqc`` version and arguments), and
  its verdict is cached (:meth:`CoqBackend.statement_check`); a statement whose check cannot conclude (it times
  out, or its sandbox fails) makes the row ``None`` with ``"sandbox_failure"``, uncached;
* when ``coqc`` ran and exited with an unexpected status (a signal, a code other than 0/1, or success without the
  assumption report), the statement check is run afresh as a known-good file in the same sandbox: when it compiles,
  the crash was the proof's doing (0.0); otherwise the row is ``None`` as above;
* a theorem column without a named statement, a missing column, or a bug in the verifier: ``None`` with
  ``"verifier_exception"``.

Residual risk: a proof that exhausts the *host* (not its own rlimits) while a statement check runs could make that
check inconclusive and its own row ``None``; the statement check is cached once conclusive, so this needs the
first failing completion of a row.

:meth:`CoqVerifier.hack_score` is a static P_hack detector (placeholders, new axioms, statement tampering, escapes).

Span signals (``CoqVerifier(emit_spans=True)``, method §6)
--------------------------------------------------------
One ``tactic`` span per sentence of the checked script: the sentences :func:`_lex_sentences` cuts after the
restatement, ``Proof.`` and ``Qed.`` are stripped, numbered from 0 (``key="tactic:<k>"``). **Bullets, braces and
goal selectors belong to the sentence they precede** (``- reflexivity.``, ``} { simpl.``, ``2: auto.`` are one span
each); a closing ``}`` at the very end with no tactic after it is a span of its own. ``start``/``end`` are offsets
into the completion text ``verify`` receives; the span starts at the first character that is neither blank nor in a
comment and ends after the sentence's ``.``. Value 1.0 when Coq accepted the sentence, 0.0 for the first failing
sentence and every one after it (never run); ``meta`` = ``accepted``, ``goals_before``, ``goals_after``,
``delta_goals`` (open goals: focused + unfocused, shelved ones not counted; ``None`` where unknown).

Goals and acceptance come from **one extra** ``coqc`` run (:meth:`CoqBackend.trace_goals`, same sandbox, limits and
timeout as the outcome check) in which ``Redirect "<random nonce>_<g>" Show.`` follows each sentence; ``coqc`` stops
at the first error, so exactly the accepted sentences have their probe file. The outcome check is untouched and
stays the only authority on the score (spans never change it). Measured cost (this machine, bwrap sandbox, a
10-tactic ``induction`` proof, median of 15): 0.16 s per ``verify`` without spans, 0.23 s with (+0.07 s, ~1.45x; the
trace run has no ``Qed``/``Print Assumptions``). A proof that times out costs two timeouts.

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

import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from .base import SpanSignal, Verifier, VerifierResult
from .coq_script import (
    _RUNNABLE_REJECTIONS,
    _STATEMENT_RE,
    HACK_WEIGHTS,
    ScriptFinding,
    _code_start,
    _lex_sentences,
    _locate_proof_script,
    _screen_coq_script,
    _Screening,
    _span_flags,
    _strip_comments,
    analyze_coq_script,
    extract_proof_script,
)
from .limited_run import _OUTPUT_CAP, RunOutcome, run_limited

__all__ = [
    "Availability",
    "CoqBackend",
    "CoqVerifier",
    "GoalTrace",
    "LeanBackend",
    "ProofBackend",
    "ProofCheck",
    "ScriptFinding",
    "SentenceTrace",
    "StatementCheck",
    "analyze_coq_script",
    "extract_proof_script",
]

COQ_INSTALL_HINT = "install Coq (Debian/Ubuntu: `apt-get install -y coq`; or `opam install coq`)"
LEAN_INSTALL_HINT = (
    "install Lean 4 with elan (`curl https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh -sSf | sh`)"
    " so that `lean` (and `lake` for Mathlib projects) is on PATH, or point a future REPL-server backend at a running"
    " Lean REPL"
)


# --------------------------------------------------------------------------------------------------------------------
# Backend interface
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Availability:
    """Whether a backend can run here; falsy when not, with the reason."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class ProofCheck:
    """The outcome of checking one proof with a backend.

    Attributes:
        status: ``"pass"``, ``"fail"``, ``"timeout"``, ``"header_error"`` (the trusted preamble/statement does not
            compile on its own: the statement check failed), ``"crash"`` (the sandbox did not run ``coqc``, or the
            statement check could not conclude).
        assumptions: axioms the theorem depends on (``None`` when not computed).
        error: an excerpt of the checker's error message (for ``"header_error"``: the statement check's).
        error_location: ``{"region": "preamble"|"proof"|"end"|..., "line": n, "chars": [a, b]}`` with ``line``
            relative to the proof script's first line when ``region == "proof"``. Informational only — never used
            for a verdict (the proof can print text that looks like a location); for ``"header_error"`` it comes
            from the statement check, whose file holds no candidate text.
        unsafe: non-axiom entries of the assumption report (type-in-type, unchecked guard/positivity, ...).
        basis: what the verdict rests on, in words (the channel that decided it).
    """

    status: str
    assumptions: list[str] | None = None
    error: str = ""
    error_location: dict[str, Any] | None = None
    unsafe: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    output: str = ""
    basis: str = ""


@dataclass
class StatementCheck:
    """Whether a dataset row compiles on its own: preamble, statement, ``Proof. Admitted.``, ``Print Assumptions``.

    Attributes:
        status: ``"ok"`` (it compiles and the assumption report was written), ``"broken"`` (``coqc`` ran and
            rejected it: the dataset's fault), ``"inconclusive"`` (time-out, the sandbox did not run ``coqc``, or
            an unexpected exit status; never cached).
        error: an excerpt of ``coqc``'s error (``"broken"``) or what went wrong (``"inconclusive"``).
        error_location: where ``coqc`` located the error (``"broken"``); see :class:`ProofCheck`.
        cached: this result was read from the cache (no ``coqc`` run).
    """

    status: str
    error: str = ""
    error_location: dict[str, Any] | None = None
    elapsed: float = 0.0
    cached: bool = False


class _StatementSlot:
    """One cache entry of :meth:`CoqBackend.statement_check`: its lock (one ``coqc`` run per key, even across
    threads) and its conclusive result, once known."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.result: StatementCheck | None = None


#: Rows whose statement check is remembered (least recently used first out).
_STATEMENT_CACHE_SIZE = 4096


@dataclass
class SentenceTrace:
    """What Coq did with one sentence of a proof script (see :meth:`CoqBackend.trace_goals`).

    Attributes:
        accepted: Coq executed it without error (``False`` for the first failing sentence and all later ones).
        goals_before, goals_after: open goals (focused + unfocused, shelved ones not counted) before and after it;
            ``None`` when unknown (not reached, or inside a group of sentences that shared one probe).
    """

    accepted: bool
    goals_before: int | None
    goals_after: int | None


@dataclass
class GoalTrace:
    """The outcome of one probed run of a proof script (:meth:`CoqBackend.trace_goals`).

    Attributes:
        status: ``"complete"`` (every sentence accepted; the proof may still have open goals), ``"fail"`` (a
            sentence failed), ``"timeout"``, ``"header_error"`` (the trusted preamble/statement did not compile),
            ``"crash"`` (checker or sandbox failure). With ``"header_error"``/``"crash"`` (and a timeout before the
            proof started) ``sentences`` is empty.
        sentences: one entry per sentence of :func:`_lex_sentences` (proof).
        initial_goals: open goals right after ``Proof.``.
    """

    status: str
    sentences: list[SentenceTrace]
    initial_goals: int | None
    elapsed: float = 0.0
    error: str = ""


_GOALS_HEADER_RE = re.compile(r"(\d+) (?:focused )?goals?(?: |$)")
_GOAL_ENTRY_RE = re.compile(r"goal \d+ is:$")


def _count_goals(report: str | None) -> int | None:
    """Open goals (focused + unfocused) in the output of ``Show.`` under ``Set Printing Unfocused``; ``None`` if odd.

    Formats (Coq 8.16 ``Printer.pr_open_subgoals``): ``No more goals.`` / ``All the remaining goals are on the
    shelf.`` (0); ``This subproof is complete, but there are some unfocused goals.`` ... ``N goals`` followed by
    the N unfocused goals (N); ``N goals`` or ``N focused goals (shelved: k)`` with the focused goals, then, when
    there are unfocused ones, ``*** Unfocused goals:`` and one ``goal k is:`` line each (N + their number). Only
    lines that begin outside a string literal are read — the ``"`` characters before them are even in number, as
    Coq prints a quote inside a string as ``""`` and identifiers cannot contain one — so a goal that mentions a
    string such as ``"\n*** Unfocused goals:\ngoal 9 is:"`` cannot change the count.
    """
    if not report:
        return None
    lines: list[str] = []
    quotes = 0
    for line in report.splitlines():
        if quotes % 2 == 0:
            lines.append(line)
        quotes += line.count('"')
    if not lines:
        return None
    if lines[0].startswith(("No more goals", "All the remaining goals are on the shelf")):
        return 0
    complete = lines[0].startswith("This subproof is complete")
    headers = [(i, match) for i, match in enumerate(map(_GOALS_HEADER_RE.match, lines)) if match is not None]
    if not headers or not (complete or headers[0][0] == 0):
        return None  # a format this parser does not know
    count = int(headers[0][1].group(1))
    if complete:
        return count
    rest = lines[1:]
    if "*** Unfocused goals:" in rest:
        rest = rest[rest.index("*** Unfocused goals:") + 1 :]
        count += sum(1 for line in rest if _GOAL_ENTRY_RE.match(line))
    return count


class ProofBackend(ABC):
    """A proof checker: given a trusted preamble and statement and an untrusted proof script, check it."""

    #: Short identifier of the prover ("coq", "lean").
    name: str = "prover"

    @abstractmethod
    def available(self) -> Availability:
        """Whether the checker can run here (falsy, with the reason, when not)."""

    @abstractmethod
    def version(self) -> str:
        """The checker's version string (recorded with the experiment)."""

    @abstractmethod
    def check(self, theorem: str, proof: str, timeout: float, preamble: str = "") -> ProofCheck:
        """Check ``proof`` (a tactic script, already screened by the verifier) against ``theorem``."""


def theorem_name(theorem: str) -> str:
    """The name declared by a Coq statement (``Theorem add_0_r : ...`` → ``add_0_r``); ``ValueError`` otherwise."""
    match = _STATEMENT_RE.match(_strip_comments(theorem))
    if match is None:
        raise ValueError(f"cannot find a named Theorem/Lemma/... declaration in the theorem column: {theorem[:200]!r}")
    return match.group(1)


class CoqBackend(ProofBackend):
    """``coqc`` in a sandbox: bubblewrap when available (``sandbox="auto"``), always rlimits and a timeout.

    Args:
        coqc: path or name of ``coqc``.
        sandbox: ``"auto"`` (bubblewrap if it works here, else rlimits only), ``"bwrap"`` (required), ``"none"``.
        memory_mb: address-space limit of the checker.
        coqc_args: extra ``coqc`` arguments (e.g. ``["-Q", "/data/lib", "MyLib"]`` for a dataset library; its
            directory must be readable inside the sandbox: pass it in ``extra_ro`` too).
        extra_ro: extra paths bound read-only into the bubblewrap sandbox.
    """

    name = "coq"

    def __init__(
        self,
        coqc: str = "coqc",
        *,
        sandbox: str = "auto",
        memory_mb: int = 4096,
        coqc_args: Sequence[str] = (),
        extra_ro: Sequence[str] = (),
    ) -> None:
        path = shutil.which(coqc)
        if path is None:
            raise RuntimeError(f"`{coqc}` not found on PATH: {COQ_INSTALL_HINT}")
        if sandbox not in ("auto", "bwrap", "none"):
            raise ValueError(f"sandbox must be 'auto', 'bwrap' or 'none', not {sandbox!r}")
        self.coqc = path
        self.memory_mb = memory_mb
        self.coqc_args = list(coqc_args)
        real = os.path.realpath(path)
        self.extra_ro = [os.path.dirname(os.path.dirname(real)), *extra_ro]
        probe = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            raise RuntimeError(f"`{path} --version` failed: {probe.stderr.strip()[:500]}")
        self._version = " ".join(probe.stdout.split()[:6])
        where = subprocess.run([path, "-where"], capture_output=True, text=True, timeout=60).stdout.strip()
        if where:
            self.extra_ro.append(where)
        self._statements: OrderedDict[str, _StatementSlot] = OrderedDict()
        self._statements_lock = threading.Lock()
        self.use_bwrap = False
        if sandbox != "none":
            ok, why = self._probe_bwrap()
            if sandbox == "bwrap" and not ok:
                raise RuntimeError(f"bubblewrap sandbox requested but unusable: {why}")
            self.use_bwrap = ok
            self.sandbox_note = "bwrap+rlimits" if ok else f"rlimits only ({why})"
        else:
            self.sandbox_note = "rlimits only (sandbox='none')"

    def _probe_bwrap(self) -> tuple[bool, str]:
        if shutil.which("bwrap") is None:
            return False, "bwrap not on PATH"
        with tempfile.TemporaryDirectory(prefix="coq-probe-") as workdir:
            outcome = run_limited(
                [self.coqc, "--version"], workdir, 30, memory_mb=self.memory_mb, use_bwrap=True, extra_ro=self.extra_ro
            )
        if outcome.returncode == 0 and "Coq" in outcome.stdout:
            return True, ""
        return False, (outcome.stderr or outcome.stdout).strip()[:300] or f"exit code {outcome.returncode}"

    def available(self) -> Availability:
        """Always available once constructed (the constructor raises otherwise)."""
        return Availability(True, f"{self.coqc} ({self._version}; {self.sandbox_note})")

    def version(self) -> str:
        """``coqc --version``'s first words, e.g. ``The Coq Proof Assistant, version 8.16.1``."""
        return self._version

    def _compile(
        self, source: str, timeout: float, reports: Sequence[str]
    ) -> tuple[RunOutcome, dict[str, str | None]]:
        """Compile ``source`` as ``Check.v`` in a fresh sandboxed directory (the one place ``coqc`` is run).

        Returns the outcome and, for each name in ``reports``, the first 64 KiB of the file ``<name>.out`` that a
        ``Redirect "<name>" ...`` command wrote (``None`` when it was not written).
        """
        with tempfile.TemporaryDirectory(prefix="coq-check-") as workdir:
            with open(os.path.join(workdir, "Check.v"), "w", encoding="utf-8", errors="replace") as handle:
                handle.write(source)
            outcome = run_limited(
                [self.coqc, "-q", *self.coqc_args, "Check.v"],
                workdir,
                timeout,
                memory_mb=self.memory_mb,
                use_bwrap=self.use_bwrap,
                extra_ro=self.extra_ro,
            )
            found: dict[str, str | None] = {}
            for name in reports:
                path = os.path.join(workdir, name + ".out")
                found[name] = None
                if os.path.exists(path):
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        found[name] = handle.read(_OUTPUT_CAP)
        return outcome, found

    def check(self, theorem: str, proof: str, timeout: float, preamble: str = "") -> ProofCheck:
        """Compile ``preamble + theorem + Proof. + proof + Qed.`` and report the theorem's assumptions.

        The verdict rests only on channels the proof cannot write (see "Verdicts come from channels the proof
        cannot write" in the module docstring): our own clock, bubblewrap's status channel, ``coqc``'s exit status,
        the nonce-named assumption report, and the statement check (:meth:`statement_check`) — never on
        ``coqc``'s printed text.
        """
        name = theorem_name(theorem)
        header, first_proof_line = _header(theorem, preamble)
        proof = proof.strip("\n")
        end_line = first_proof_line + proof.count("\n") + 1  # the line of our Qed.
        nonce = "assumptions_" + secrets.token_hex(8)
        source = f'{header}{proof}\nQed.\nRedirect "{nonce}" Print Assumptions {name}.\n'
        outcome, reports = self._compile(source, timeout, [nonce])
        report = reports[nonce]
        output = (outcome.stdout + outcome.stderr).strip()
        base = {"elapsed": round(outcome.elapsed, 3), "output": output[-2000:]}
        if outcome.timed_out:
            return ProofCheck("timeout", error=f"coqc exceeded {timeout:g}s", basis="the wall clock", **base)
        if not outcome.started:
            error = "the sandbox did not run coqc: " + (outcome.stderr.strip()[:1000] or f"exit {outcome.returncode}")
            return ProofCheck("crash", error=error, basis="bubblewrap's status channel reported no exit", **base)
        if outcome.returncode == 0 and report is not None:
            assumptions, unsafe = _parse_assumptions(report)
            return ProofCheck(
                "pass", assumptions=assumptions, unsafe=unsafe, basis="coqc exit 0 and the assumption report", **base
            )
        error = self._failure_excerpt(outcome, output, report is not None)
        location = _error_location(outcome.stderr or output, first_proof_line, end_line)
        clean_error = outcome.returncode == 1  # coqc rejected the file: an ordinary Coq error
        statement = (self.statement_check if clean_error else self._run_statement)(theorem, preamble, timeout)
        basis = f"coqc exit {outcome.returncode}; statement check {statement.status}" + (
            " (cached)" if statement.cached else ""
        )
        if statement.status == "broken":
            error = f"the statement alone does not compile: {statement.error}"
            return ProofCheck(
                "header_error", error=error, error_location=statement.error_location, basis=basis, **base
            )
        if statement.status == "inconclusive":
            error = f"the statement check could not conclude ({statement.error}); the proof's run: {error}"
            return ProofCheck("crash", error=error, basis=basis, **base)
        return ProofCheck("fail", error=error, error_location=location, basis=basis, **base)

    @staticmethod
    def _failure_excerpt(outcome: RunOutcome, output: str, reported: bool) -> str:
        """A short description of a failed run (for ``details["error"]``; never used for a verdict)."""
        if outcome.returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            return "output/file size limit exceeded"
        if outcome.returncode == 0 and not reported:
            return "coqc succeeded but wrote no assumption report"
        if outcome.returncode != 1:
            return f"coqc exited with {outcome.returncode}: {output[-1000:]}"
        return _error_excerpt(output)

    def statement_check(self, theorem: str, preamble: str, timeout: float) -> StatementCheck:
        """:class:`StatementCheck` of a dataset row, run at most once per (preamble, statement, ``coqc`` version and
        arguments) and cached when conclusive (``cached=True`` on later calls); thread-safe."""
        key = hashlib.sha256(
            "\0".join([self._version, *self.coqc_args, preamble.strip(), theorem.strip()]).encode("utf-8", "replace")
        ).hexdigest()
        with self._statements_lock:
            slot = self._statements.get(key)
            if slot is None:
                slot = self._statements[key] = _StatementSlot()
                if len(self._statements) > _STATEMENT_CACHE_SIZE:
                    self._statements.popitem(last=False)
            else:
                self._statements.move_to_end(key)
        with slot.lock:
            if slot.result is not None:
                return replace(slot.result, cached=True)
            result = self._run_statement(theorem, preamble, timeout)
            if result.status != "inconclusive":
                slot.result = result
            return result

    def _run_statement(self, theorem: str, preamble: str, timeout: float) -> StatementCheck:
        """Compile the row with ``Proof. Admitted.`` and its ``Print Assumptions`` footer (no candidate text): the
        statement check, uncached — also the known-good file that tells a proof's crash from a broken sandbox."""
        name = theorem_name(theorem)
        header, first_proof_line = _header(theorem, preamble)
        nonce = "statement_" + secrets.token_hex(8)
        source = f'{header}Admitted.\nRedirect "{nonce}" Print Assumptions {name}.\n'
        outcome, reports = self._compile(source, timeout, [nonce])
        output = (outcome.stdout + outcome.stderr).strip()
        elapsed = round(outcome.elapsed, 3)
        if outcome.timed_out:
            return StatementCheck("inconclusive", f"the statement alone exceeded {timeout:g}s", elapsed=elapsed)
        if not outcome.started:
            return StatementCheck("inconclusive", "the sandbox did not run coqc", elapsed=elapsed)
        if outcome.returncode == 0 and reports[nonce] is not None:
            return StatementCheck("ok", elapsed=elapsed)
        if outcome.returncode == 1:
            location = _error_location(outcome.stderr or output, first_proof_line, first_proof_line)
            return StatementCheck("broken", _error_excerpt(output), location, elapsed)
        return StatementCheck("inconclusive", f"coqc exited with {outcome.returncode}", elapsed=elapsed)

    def trace_goals(self, theorem: str, proof: str, timeout: float, preamble: str = "") -> GoalTrace:
        """Run ``proof`` once with a goal probe after every sentence: which sentences Coq accepted, and open goals.

        The file is ``preamble``, ``Set Printing Unfocused.``, the statement, ``Proof.``, then the proof with
        ``Redirect "<nonce>_<g>" Show.`` inserted after each sentence that ends in ``.`` + blank (where Coq's own
        lexer ends a sentence, so the insertion never changes how the proof parses), ``Redirect "<nonce>_init"
        Show.`` before it, and ``Abort.`` at the end. Sentences between two probes form one group (a ``.`` that
        :func:`_lex_sentences` cut but Coq may not, e.g. ``x.(f)``); a group is accepted iff its probe file was
        written, because ``coqc`` stops at the first error (or the time limit) and every later probe is missing.
        The probe files are named with a fresh random nonce and only the probes write files (the screening rejects
        ``Redirect`` in proofs), so nothing the proof prints can be mistaken for a probe. Sandbox and limits are
        those of :meth:`check` (same :meth:`_compile`). ``ValueError`` when ``proof`` cannot be lexed.
        """
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
        outcome, reports = self._compile(source, timeout, names)
        output = (outcome.stdout + outcome.stderr).strip()
        elapsed = round(outcome.elapsed, 3)
        initial = reports[names[0]]
        if not initial:  # the proof never started
            if outcome.timed_out:
                status = "timeout"
            elif outcome.started and self.statement_check(theorem, preamble, timeout).status == "broken":
                status = "header_error"
            else:  # the proof never ran (coqc runs sentence by sentence): nothing of its own failed
                status = "crash"
            return GoalTrace(status, [], None, elapsed, _error_excerpt(output))
        steps: list[SentenceTrace] = [SentenceTrace(False, None, None) for _ in sentences]
        before = _count_goals(initial)
        running = True
        for g, members in enumerate(groups):
            report = reports[names[g + 1]]
            running = running and bool(report)
            after = _count_goals(report) if running and report else None
            for k in members:
                last = k == members[-1]
                steps[k] = SentenceTrace(running, before, after if last else None)
                before = after if last else None
        if all(step.accepted for step in steps):
            status = "complete"
        else:
            status = "timeout" if outcome.timed_out else "fail"
        return GoalTrace(status, steps, _count_goals(initial), elapsed, "" if status == "complete" else output[-1000:])


class LeanBackend(ProofBackend):
    """Placeholder for a Lean 4 backend (a local ``lean``/``lake`` or a Lean REPL server).

    It is a real backend class so that configuration and tests can ask :meth:`available`; checking is not implemented
    yet and :meth:`check` raises a ``RuntimeError`` explaining how to install Lean.
    """

    name = "lean"

    def __init__(self, lean: str = "lean") -> None:
        self.lean = lean

    def available(self) -> Availability:
        """Falsy, with the reason: ``lean`` is missing, or (when present) the backend is not implemented yet."""
        if shutil.which(self.lean) is None:
            return Availability(False, f"`{self.lean}` not found on PATH: {LEAN_INSTALL_HINT}")
        return Availability(False, "`lean` found, but the Lean 4 backend is not implemented yet (only CoqBackend is)")

    def version(self) -> str:
        """The ``lean --version`` string; ``RuntimeError`` when Lean is unavailable."""
        if shutil.which(self.lean) is None:
            raise RuntimeError(self.available().reason)
        return subprocess.run([self.lean, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()

    def check(self, theorem: str, proof: str, timeout: float, preamble: str = "") -> ProofCheck:
        """Not available yet: raises ``RuntimeError`` with installation instructions."""
        raise RuntimeError(f"LeanBackend cannot check proofs: {self.available().reason}")


def _parse_assumptions(report: str) -> tuple[list[str], list[str]]:
    """Axiom names, and other (unsafe) entries, from ``Print Assumptions`` output."""
    text = report.strip()
    if text.startswith("Closed under the global context"):
        return [], []
    axioms: list[str] = []
    unsafe: list[str] = []
    section = None
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue  # continuation of a multi-line type
        if line.rstrip().endswith(":") and " : " not in line:
            section = line.rstrip()[:-1]
            if section != "Axioms":
                unsafe.append(section)
            continue
        match = re.match(r"^(\S+) :", line)
        if match and section == "Axioms":
            axioms.append(match.group(1))
        elif match:
            unsafe.append(f"{section}: {match.group(1)}")
        else:
            unsafe.append(f"unrecognised: {line[:200]}")
    return axioms, unsafe


#: The location line of ``coqc``'s error: at the start of a line and directly followed by ``Error``; the first one
#: is taken (``coqc`` stops at its first error; text a failing tactic prints comes after it).
_LOCATION_RE = re.compile(r'^File "[^"\n]*", line (\d+), characters (\d+)-(\d+):\n?Error', re.M)


def _header(theorem: str, preamble: str) -> tuple[str, int]:
    """The trusted head of a checked file — the preamble, the statement (with its final ``.``) and ``Proof.`` — and
    the number of the first line after it."""
    statement = theorem.strip()
    if not statement.endswith("."):
        statement += "."
    header = (preamble.strip() + "\n" if preamble.strip() else "") + statement + "\nProof.\n"
    return header, header.count("\n") + 1


def _error_location(output: str, first_proof_line: int, end_line: int) -> dict[str, Any] | None:
    """Where ``coqc`` located its error (see :data:`_LOCATION_RE`), by region of the checked file; informational:
    a proof can print a line that looks like one, so no verdict depends on it."""
    match = _LOCATION_RE.search(output)
    if match is None:
        return None
    line, start, stop = (int(g) for g in match.groups())
    if line < first_proof_line - 1:
        region = "preamble"  # the trusted preamble or statement
    elif line == first_proof_line - 1:
        region = "proof_keyword"
    elif line < end_line:
        region = "proof"
    elif line == end_line:
        region = "qed"
    else:
        region = "footer"
    rel = line - first_proof_line + 1 if region == "proof" else line
    return {"region": region, "line": rel, "chars": [start, stop]}


def _error_excerpt(output: str) -> str:
    index = output.find("Error")
    return (output[index:] if index >= 0 else output)[:1000].strip()


# --------------------------------------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------------------------------------


class CoqVerifier(Verifier):
    """Scores a Coq proof script against the dataset's ``theorem`` (and optional ``preamble``) columns.

    Args:
        allowed_axioms: axiom names the proof may depend on (as ``Print Assumptions`` prints them, or qualified:
            ``"Classical_Prop.classic"`` allows a printed ``classic``). Empty: the proof must be closed.
        timeout: seconds per check (wall clock; CPU limit slightly above).
        backend: a :class:`CoqBackend`; built with ``sandbox``/``memory_mb`` when omitted (``RuntimeError`` with the
            install command when ``coqc`` is missing).
        max_workers: parallel ``coqc`` processes in :meth:`verify_batch`.
        emit_spans: also fill ``VerifierResult.spans`` with one ``tactic`` span per proof sentence (see "Span
            signals" in the module docstring); costs one extra sandboxed ``coqc`` run per scored completion.
        max_completion_chars: completions longer than this score 0.0, ``"fail"``, anomaly ``"oversize"`` in
            :meth:`safe_verify` (and the TRL interface), without being lexed or run; ``None``: no cap. Default
            100 000 (a proof script is short; the screening is linear, but a megabyte still costs ~0.3 s).
    """

    name = "coq"
    version = "2"
    max_completion_chars: int | None = 100_000

    def __init__(
        self,
        allowed_axioms: Sequence[str] = (),
        timeout: float = 20.0,
        backend: CoqBackend | None = None,
        *,
        max_workers: int | None = None,
        sandbox: str = "auto",
        memory_mb: int = 4096,
        emit_spans: bool = False,
        max_completion_chars: int | None = 100_000,
    ) -> None:
        super().__init__()
        self.emit_spans = emit_spans
        self.max_completion_chars = max_completion_chars
        self.backend = backend if backend is not None else CoqBackend(sandbox=sandbox, memory_mb=memory_mb)
        self.allowed_axioms = tuple(allowed_axioms)
        self.timeout = timeout
        self.max_workers = max_workers or min(8, os.cpu_count() or 1)

    def _allowed(self, axiom: str) -> bool:
        return any(axiom == a or a.endswith("." + axiom) or axiom.endswith("." + a) for a in self.allowed_axioms)

    def verify(self, completion: str, **columns: Any) -> VerifierResult:
        """Extract, screen and check the proof (see the module docstring); with ``emit_spans``, also the spans."""
        theorem = columns.get("theorem")
        if not isinstance(theorem, str) or not theorem.strip():
            raise ValueError("CoqVerifier needs a non-empty 'theorem' column")
        preamble = columns.get("preamble") or ""
        raw, offset = _locate_proof_script(completion)
        screening = _screen_coq_script(raw, theorem, preamble)
        result = self._score(theorem, preamble, screening.body, screening.findings)
        if self.emit_spans:
            result.spans = self._spans(theorem, preamble, raw, offset, screening, result)
        return result

    def _score(self, theorem: str, preamble: str, script: str, findings: list[ScriptFinding]) -> VerifierResult:
        """The outcome score of a screened script: the final ``coqc`` check with ``Print Assumptions``."""
        name = theorem_name(theorem)
        details: dict[str, Any] = {"theorem_name": name, "findings": [f.__dict__ for f in findings]}
        rejected = [f for f in findings if f.reject]
        if rejected:
            details["rule"] = rejected[0].rule
            details["reason"] = f"proof script rejected ({rejected[0].category}): {rejected[0].excerpt[:120]!r}"
            return VerifierResult(0.0, "rejected", None, details)
        if not script:
            details["reason"] = "no proof script found in the completion"
            return VerifierResult(0.0, "fail", "parse_failure", details)
        check = self.backend.check(theorem, script, self.timeout, preamble=preamble)
        details.update(elapsed=check.elapsed, assumptions=check.assumptions)
        if getattr(check, "basis", ""):
            details["verdict_basis"] = check.basis
        if check.error:
            details["error"] = check.error
        if check.error_location:
            details["error_location"] = check.error_location
        if check.status == "timeout":
            return VerifierResult(0.0, "timeout", "timeout", details)
        if check.status == "crash":
            details["output"] = check.output
            return VerifierResult(None, "unscorable", "sandbox_failure", details)
        if check.status == "header_error":
            details["reason"] = "the dataset's preamble/statement does not compile on its own (with Proof. Admitted.)"
            return VerifierResult(None, "unscorable", "verifier_exception", details)
        if check.status != "pass":
            return VerifierResult(0.0, "fail", None, details)
        disallowed = [a for a in check.assumptions or [] if not self._allowed(a)]
        if disallowed or check.unsafe:
            details.update(disallowed_axioms=disallowed, unsafe=check.unsafe)
            details["reason"] = "the proof depends on assumptions outside the allow-list"
            return VerifierResult(0.0, "fail", None, details)
        return VerifierResult(1.0, "pass", None, details)

    def _spans(
        self, theorem: str, preamble: str, raw: str, offset: int, screening: _Screening, result: VerifierResult
    ) -> list[SpanSignal]:
        """One ``tactic`` span per kept sentence of the script (see the class docstring); ``[]`` without a script."""
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
            trace = self.backend.trace_goals(theorem, screening.body, self.timeout, preamble=preamble)
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

    def verify_batch(self, completions: list[str], columns: list[dict[str, Any]]) -> list[VerifierResult]:
        """Check in parallel (``max_workers`` processes); each row through :meth:`safe_verify`."""
        if len(completions) != len(columns):
            raise ValueError("completions and columns differ in length")
        if self.max_workers <= 1 or len(completions) <= 1:
            return super().verify_batch(completions, columns)
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(
                pool.map(lambda pair: self.safe_verify(pair[0], **pair[1]), zip(completions, columns, strict=True))
            )

    def hack_score(self, completion: str, **columns: Any) -> float:
        """A static P_hack detector in [0, 1] (method §2.1): the largest weight among the script's findings.

        1.0: placeholders (``admit``, ``Admitted``, ``Abort``), new axioms (``Axiom``/``Parameter``/``Hypothesis``/
        ``Variable``/``Conjecture``), statement tampering (a different restated statement, ``Theorem``/``Reset``/
        ``Back``/``Qed`` mid-script ...), escapes (``Load``, ``Require``, ``Redirect``, ``Drop``, ``Declare`` ...);
        0.8: strings that mimic the assumption report; 0.5: ``*_no_check`` tactics; 0.3: other vernacular; 0 else.
        No ``coqc`` run is needed. A completion over :attr:`max_completion_chars` scores 1.0 without being read
        (:meth:`safe_verify` scores it 0.0 unchecked; padding past the cap must not be a way around this penalty).
        """
        if self.is_oversize(completion):
            return 1.0
        theorem = columns.get("theorem") or ""
        _, findings = analyze_coq_script(extract_proof_script(completion), theorem, columns.get("preamble") or "")
        return max((HACK_WEIGHTS.get(f.category, 0.3) for f in findings), default=0.0)

    def describe(self) -> dict[str, str]:
        """Name, version, and the checker's version and sandbox."""
        return {
            **super().describe(),
            "checker": self.backend.version(),
            "sandbox": getattr(self.backend, "sandbox_note", ""),
            "allowed_axioms": ",".join(self.allowed_axioms),
        }
