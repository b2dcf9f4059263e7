"""The verifiers as reward functions of other RL frameworks (docs/rewards.md, "Outside TRL").

Every verifier already is a TRL reward function (:meth:`~trl_loo_gspo.verifiers.base.Verifier.__call__`) and scores
one completion with :meth:`~trl_loo_gspo.verifiers.base.Verifier.safe_verify` (never raises; ``None`` = unscorable).
This module adds the one other calling convention that needs glue: verl's custom reward function,
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` (verl's reward managers call it with
those keyword arguments, one completion at a time, and accept a float or a dict with a ``"score"`` key whose other
keys are logged). Standard library only: importing it loads no torch, transformers or TRL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .base import Verifier


def _gold_column(verifier: Verifier) -> str:
    column = verifier.gold_column
    if column is None:
        raise ValueError(
            f"verifier {verifier.name!r} has no gold column: set its `gold_column` attribute to the dataset column "
            "that verl's `ground_truth` should fill"
        )
    return column


def _gold_value(column: str, ground_truth: Any) -> Any:
    """verl datasets store test lists as JSON text; the code verifier's ``tests`` column is a list of asserts."""
    if column == "tests" and isinstance(ground_truth, str):
        text = ground_truth.strip()
        if text.startswith("["):
            return [str(t) for t in json.loads(text)]
        return [text]
    return ground_truth


def verl_compute_score(
    verifiers: Mapping[str, Verifier], default: str | None = None, unscorable_score: float = 0.0
) -> Callable[..., dict[str, Any]]:
    """A verl ``compute_score`` that routes each sample to one of ``verifiers``.

    The verifier is ``verifiers[extra_info["verifier"]]`` when the sample's ``extra_info`` names one, else
    ``verifiers[data_source]``, else ``verifiers[default]``; an unknown name raises ``ValueError`` listing the
    known ones (a configuration error, raised at the first sample). ``ground_truth`` fills the verifier's gold
    column (``answer``, ``tests``, ``theorem``; a JSON list of tests is parsed); ``extra_info["columns"]`` (a dict)
    supplies any other columns (``io_cases``, ``preamble``, ...).

    Returns a dict: ``score`` (the verifier's reward; ``unscorable_score`` where the verifier returned ``None``,
    since verl has no unscorable reward — filter on ``unscorable`` to keep such samples out of a baseline),
    ``unscorable`` (bool), ``status`` and ``anomaly`` (``""`` for none), as verl logs them per sample.
    """
    if not verifiers:
        raise ValueError("verl_compute_score needs at least one verifier")
    if default is not None and default not in verifiers:
        raise ValueError(f"default {default!r} is not one of the verifiers {sorted(verifiers)}")

    def compute_score(
        data_source: str | None = None,
        solution_str: str = "",
        ground_truth: Any = None,
        extra_info: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        info = dict(extra_info or {})
        key = info.get("verifier") or (data_source if data_source in verifiers else default)
        if key not in verifiers:
            raise ValueError(
                f"no verifier for data_source {data_source!r} (extra_info verifier: {info.get('verifier')!r}); "
                f"known: {sorted(verifiers)}; pass default= to route the rest"
            )
        verifier = verifiers[key]
        columns = dict(info.get("columns") or {})
        column = _gold_column(verifier)
        if ground_truth is not None:
            columns.setdefault(column, _gold_value(column, ground_truth))
        result = verifier.safe_verify(solution_str, **columns)
        return {
            "score": unscorable_score if result.score is None else float(result.score),
            "unscorable": result.score is None,
            "status": result.status,
            "anomaly": result.anomaly or "",
        }

    return compute_score
