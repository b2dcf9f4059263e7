"""The registry of hack-detector families (mirroring ``ADVANTAGE_ESTIMATORS`` and ``register_advantage_estimator``).

A family is one function ``detect(tree, source, ctx) -> set[str]`` registered under its name with
:func:`register_detector`: ``tree`` is the parsed program (``None`` when it does not parse), ``source`` its text
(``None`` when only a tree is analysed, e.g. one function of it), ``ctx`` the :class:`~.context.ScanContext` with the
row and the facts every family shares. It returns the signals it found (usually ``set()`` or its own one).
:func:`run_detectors` runs every registered family in registration order; a family that raises adds
``unanalysable`` and the others still run.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from .context import ScanContext

__all__ = ["HACK_DETECTORS", "Detector", "register_detector", "run_detectors"]

#: ``detect(tree, source, ctx) -> signals``.
Detector = Callable[[ast.AST | None, str | None, ScanContext], set[str]]

#: Family name -> detector, in registration order (the modules of this package register theirs on import).
HACK_DETECTORS: dict[str, Detector] = {}


def register_detector(family: str) -> Callable[[Detector], Detector]:
    """Decorator: add a detector to :data:`HACK_DETECTORS` under ``family`` (``ValueError`` if already taken)."""

    def register(function: Detector) -> Detector:
        if family in HACK_DETECTORS:
            raise ValueError(f"hack detector family {family!r} is already registered")
        HACK_DETECTORS[family] = function
        return function

    return register


def run_detectors(ctx: ScanContext) -> set[str]:
    """The union of every registered family's signals on ``ctx``; ``unanalysable`` for each family that fails
    (a malformed or pathologically large tree). Never raises."""
    signals: set[str] = set()
    for detect in HACK_DETECTORS.values():
        try:
            signals |= detect(ctx.tree, ctx.source, ctx)
        except Exception:  # Unanalysable, RecursionError, MemoryError, a malformed node
            signals.add("unanalysable")
    return signals
