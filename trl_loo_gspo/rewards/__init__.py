"""Verifiers (math, sandboxed code, Coq proofs) and reward shaping (SPEC §2.1).

Public names: :class:`VerifierResult`, :class:`Verifier`, :class:`MathVerifier`, and — as they land —
``CodeVerifier`` and ``CoqVerifier``. Every verifier is a TRL reward function.
"""

from .base import ANOMALY_KINDS, Verifier, VerifierResult, completion_text
from .math import MathVerifier

__all__ = ["ANOMALY_KINDS", "MathVerifier", "Verifier", "VerifierResult", "completion_text"]
