"""Formal-proof verifiers (method §2.1): the :class:`ProofBackend` interface (:mod:`.backend`), the Coq backend and
verifier (:mod:`.coq`), the proof-script screening (:mod:`.script`) and a Lean stub."""

from .backend import Availability, GoalTrace, LeanBackend, ProofBackend, ProofCheck, SentenceTrace, StatementCheck
from .coq import CoqBackend, CoqVerifier, theorem_name
from .script import HACK_WEIGHTS, ScriptFinding, analyze_coq_script, extract_proof_script

__all__ = [
    "HACK_WEIGHTS",
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
    "theorem_name",
]
