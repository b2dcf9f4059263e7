"""Verifiers (math, sandboxed code, Coq proofs) and reward shaping (method §2.1).

Public names: :class:`VerifierResult`, :class:`Verifier`, :class:`MathVerifier`, :class:`CoqVerifier` (with the
:class:`ProofBackend` interface, :class:`CoqBackend` and :class:`LeanBackend`) and :class:`CodeVerifier` (Python
in a bubblewrap sandbox, :mod:`trl_loo_gspo.sandbox`).
Every verifier is a TRL reward function; :meth:`Verifier.score_batch` returns the scores with the per-answer results
(:class:`RewardOutput`).

Layout: :mod:`.base` (the contract), :mod:`.math`, :mod:`.code` (the code verifier, its span signals and its static
hack detectors), :mod:`.proofs` (Coq), :mod:`.shaping` (reward shaping), :mod:`.text` (fenced blocks).
"""

from .base import ANOMALY_KINDS, RewardOutput, SpanSignal, Verifier, VerifierResult, completion_text
from .code import CodeVerifier
from .math import MathVerifier
from .proofs import CoqBackend, CoqVerifier, LeanBackend, ProofBackend

__all__ = [
    "ANOMALY_KINDS",
    "CodeVerifier",
    "CoqBackend",
    "CoqVerifier",
    "LeanBackend",
    "MathVerifier",
    "ProofBackend",
    "RewardOutput",
    "SpanSignal",
    "Verifier",
    "VerifierResult",
    "completion_text",
]
