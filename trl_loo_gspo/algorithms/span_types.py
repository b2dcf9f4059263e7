"""The span signal a verifier attaches to a stretch of a completion (method §6); standard library only.

:class:`SpanSignal` is shared by the verifiers, which produce span signals (:mod:`trl_loo_gspo.verifiers`), and the
process-feedback algorithms, which compare them across the answers of a group (:mod:`trl_loo_gspo.algorithms.spans`);
it lives here so that neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SpanSignal"]


@dataclass
class SpanSignal:
    """An intermediate verifier signal on one character span of the completion text (method §6).

    Attributes:
        start, end: character offsets into the completion text (``end`` exclusive).
        value: the intermediate score in [0, 1] (1 = this step/tactic/function is right as far as the verifier can
            tell; 0 = wrong, failed, or flagged by a hack detector).
        kind: what the span is: ``"step"``, ``"tactic"``, ``"function"``, ``"code_block"``, ...
        key: spans with the same key are compared across the answers of a group (``"step:0"`` with ``"step:0"``,
            ``"function:add"`` with ``"function:add"``); defaults to ``kind``.
        flags: hack-detector findings on this span (``"unrelated"``, ``"trivial"``, ``"unsound"``, ...); a flagged
            span's value is 0.
        meta: verifier-specific facts (e.g. open goals before and after a tactic).
    """

    start: int
    end: int
    value: float
    kind: str
    key: str = ""
    flags: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"span needs 0 <= start <= end, got ({self.start}, {self.end})")
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"span value must be in [0, 1], got {self.value}")
        if not self.key:
            self.key = self.kind
