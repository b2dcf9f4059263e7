"""The proof-checker interface (method §2.1): what a backend reports, :class:`ProofBackend`, and the Lean stub.

:class:`~trl_loo_gspo.verifiers.proofs.coq.CoqBackend` is the one implemented backend;
:class:`~trl_loo_gspo.verifiers.proofs.coq.CoqVerifier` drives it.
"""

from __future__ import annotations

import shutil
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LEAN_INSTALL_HINT",
    "Availability",
    "GoalTrace",
    "LeanBackend",
    "ProofBackend",
    "ProofCheck",
    "SentenceTrace",
    "StatementCheck",
]

LEAN_INSTALL_HINT = (
    "install Lean 4 with elan (`curl https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh -sSf | sh`)"
    " so that `lean` (and `lake` for Mathlib projects) is on PATH, or point a future REPL-server backend at a running"
    " Lean REPL"
)


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
