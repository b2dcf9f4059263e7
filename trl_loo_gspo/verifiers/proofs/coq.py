"""The Coq proof verifier (method §2.1): :class:`CoqBackend` (``coqc`` in a sandbox) and :class:`CoqVerifier`.

The backend interface (:class:`~.backend.ProofBackend`, the result types) and the Lean stub are in :mod:`.backend`;
reading ``coqc``'s output is in :mod:`.output`, screening the proof script in :mod:`.script`, the span signals in
:mod:`.spans`.

A row of a proof dataset supplies the statement (column ``theorem``, e.g. ``Theorem add_0_r : forall n : nat, n + 0
= n.``) and optionally a ``preamble`` (``Require Import``/``Definition`` sentences the statement needs). Both are
trusted. The completion supplies only a *proof script* (located by
:func:`~trl_loo_gspo.verifiers.proofs.script.extract_proof_script`). :class:`CoqVerifier` builds the file

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
:mod:`.script`. ``coqc`` runs through :func:`~trl_loo_gspo.sandbox.limited_run.run_limited`
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
  :mod:`~trl_loo_gspo.sandbox.limited_run`) reports that ``coqc`` never ran;
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
One ``tactic`` span per sentence of the checked script, valued by what Coq did with it (from one extra probed
``coqc`` run, :meth:`CoqBackend.trace_goals`) and zeroed by the hack detectors; the rules, the cost and the flags
are documented in :mod:`.spans`. Spans never change the score.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ...sandbox.limited_run import OUTPUT_CAP, RunOutcome, run_limited
from ..base import SpanSignal, Verifier, VerifierResult
from .backend import (
    Availability,
    GoalTrace,
    ProofBackend,
    ProofCheck,
    StatementCheck,
)
from .output import count_goals, error_excerpt, error_location, parse_assumptions, trusted_header
from .script import (
    _STATEMENT_RE,
    HACK_WEIGHTS,
    ScriptFinding,
    _locate_proof_script,
    _screen_coq_script,
    _Screening,
    _strip_comments,
    analyze_coq_script,
    extract_proof_script,
)
from .spans import goal_probe, sentence_traces, tactic_spans

# the interface; the screening names above are the package's (``trl_loo_gspo.verifiers.proofs`` exports them)
__all__ = ["COQ_INSTALL_HINT", "CoqBackend", "CoqVerifier", "theorem_name"]

COQ_INSTALL_HINT = "install Coq (Debian/Ubuntu: `apt-get install -y coq`; or `opam install coq`)"


class _StatementSlot:
    """One cache entry of :meth:`CoqBackend.statement_check`: its lock (one ``coqc`` run per key, even across
    threads) and its conclusive result, once known."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.result: StatementCheck | None = None


#: Rows whose statement check is remembered (least recently used first out).
_STATEMENT_CACHE_SIZE = 4096


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
                        found[name] = handle.read(OUTPUT_CAP)
        return outcome, found

    def check(self, theorem: str, proof: str, timeout: float, preamble: str = "") -> ProofCheck:
        """Compile ``preamble + theorem + Proof. + proof + Qed.`` and report the theorem's assumptions.

        The verdict rests only on channels the proof cannot write (see "Verdicts come from channels the proof
        cannot write" in the module docstring): our own clock, bubblewrap's status channel, ``coqc``'s exit status,
        the nonce-named assumption report, and the statement check (:meth:`statement_check`) — never on
        ``coqc``'s printed text.
        """
        name = theorem_name(theorem)
        header, first_proof_line = trusted_header(theorem, preamble)
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
            assumptions, unsafe = parse_assumptions(report)
            return ProofCheck(
                "pass", assumptions=assumptions, unsafe=unsafe, basis="coqc exit 0 and the assumption report", **base
            )
        error = self._failure_excerpt(outcome, output, report is not None)
        location = error_location(outcome.stderr or output, first_proof_line, end_line)
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
        return error_excerpt(output)

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
        header, first_proof_line = trusted_header(theorem, preamble)
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
            location = error_location(outcome.stderr or output, first_proof_line, first_proof_line)
            return StatementCheck("broken", error_excerpt(output), location, elapsed)
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
        those of :meth:`check` (same :meth:`_compile`). ``ValueError`` when ``proof`` cannot be lexed. The file is
        built by :func:`~.spans.goal_probe`, its probe files read by :func:`~.spans.sentence_traces`.
        """
        probe = goal_probe(theorem, proof, preamble)
        outcome, reports = self._compile(probe.source, timeout, probe.reports)
        output = (outcome.stdout + outcome.stderr).strip()
        elapsed = round(outcome.elapsed, 3)
        initial = reports[probe.reports[0]]
        if not initial:  # the proof never started
            if outcome.timed_out:
                status = "timeout"
            elif outcome.started and self.statement_check(theorem, preamble, timeout).status == "broken":
                status = "header_error"
            else:  # the proof never ran (coqc runs sentence by sentence): nothing of its own failed
                status = "crash"
            return GoalTrace(status, [], None, elapsed, error_excerpt(output))
        steps = sentence_traces(probe, reports)
        if all(step.accepted for step in steps):
            status = "complete"
        else:
            status = "timeout" if outcome.timed_out else "fail"
        return GoalTrace(status, steps, count_goals(initial), elapsed, "" if status == "complete" else output[-1000:])


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
        emit_spans: also fill ``VerifierResult.spans`` with one ``tactic`` span per proof sentence (see
            :mod:`.spans`); costs one extra sandboxed ``coqc`` run per scored completion.
        max_completion_chars: completions longer than this score 0.0, ``"fail"``, anomaly ``"oversize"`` in
            :meth:`safe_verify` (and the TRL interface), without being lexed or run; ``None``: no cap. Default
            100 000 (a proof script is short; the screening is linear, but a megabyte still costs ~0.3 s).
    """

    name = "coq"
    gold_column = "theorem"
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
        """One ``tactic`` span per kept sentence of the script (:func:`~.spans.tactic_spans`); ``[]`` without a
        script."""
        return tactic_spans(self.backend, theorem, preamble, raw, offset, screening, result, self.timeout)

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
