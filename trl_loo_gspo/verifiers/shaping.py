"""Reward shaping (method §2.1): ``R = R_verifier − λ_len · P_overlong − λ_hack · P_hack``, each term switchable.

``P_overlong`` is DAPO's *soft* overlong penalty on the completion's token count, computed by TRL's
``get_soft_overlong_punishment`` (reaching the limit is not proof that the reasoning is wrong: a truncated answer
is still verified). ``P_hack`` ∈ [0, 1] comes from a detector of identified reward-hacking behaviour (each
verifier offers ``hack_score``). With both λ = 0 the reward is exactly the verifier's.

Each component is logged every step through TRL's ``log_metric`` — ``shaping/<name>/verifier`` (mean verifier
score), ``shaping/<name>/overlong`` and ``.../overlong_triggered`` (mean penalty, fraction with a non-zero one),
``shaping/<name>/hack`` and ``.../hack_triggered`` — and per sample through ``log_extra`` (TRL's completions table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trl.rewards import get_soft_overlong_punishment

from .base import RewardOutput, Verifier, completion_text


class ShapedReward:
    """A TRL reward function wrapping a verifier with optional overlong and reward-hacking penalties.

    Args:
        verifier: any :class:`~trl_loo_gspo.verifiers.Verifier` (or TRL reward function returning floats/None).
        lambda_len: λ_len ≥ 0; 0 turns the overlong term off.
        max_completion_length: L_max of the soft overlong penalty (usually the config's ``max_completion_length``).
        soft_punish_cache: L_cache: the penalty ramps from 0 at L_max − L_cache to 1 at L_max.
        lambda_hack: λ_hack ≥ 0; 0 turns the hack term off.
        hack_detector: ``f(completion_text, **columns) -> float in [0, 1]``; defaults to ``verifier.hack_score``.
        name: the reward's name in TRL's logs (default ``"<verifier>_shaped"``).
    """

    def __init__(
        self,
        verifier: Verifier | Callable,
        lambda_len: float = 0.0,
        max_completion_length: int | None = None,
        soft_punish_cache: int | None = None,
        lambda_hack: float = 0.0,
        hack_detector: Callable[..., float] | None = None,
        name: str | None = None,
    ) -> None:
        if lambda_len < 0 or lambda_hack < 0:
            raise ValueError(f"lambda_len and lambda_hack must be >= 0, got {lambda_len} and {lambda_hack}")
        self.verifier = verifier
        self.lambda_len, self.lambda_hack = lambda_len, lambda_hack
        self._overlong = None
        if lambda_len > 0:
            if max_completion_length is None or soft_punish_cache is None:
                raise ValueError("lambda_len > 0 needs max_completion_length and soft_punish_cache")
            if not 0 <= soft_punish_cache <= max_completion_length:
                raise ValueError("soft_punish_cache must be in [0, max_completion_length]")
            self._overlong = get_soft_overlong_punishment(max_completion_length, soft_punish_cache)
        self.hack_detector = hack_detector or getattr(verifier, "hack_score", None)
        if lambda_hack > 0 and self.hack_detector is None:
            raise ValueError("lambda_hack > 0 needs a hack_detector (the verifier has no hack_score)")
        self.name = name or f"{getattr(verifier, 'name', getattr(verifier, '__name__', 'reward'))}_shaped"
        self.__name__ = self.name

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        """TRL reward-function interface: the shaped scores of :meth:`score_batch`."""
        return list(
            self.score_batch(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs).scores
        )

    def score_batch(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> RewardOutput:
        """The shaped scores, with the wrapped verifier's per-answer results (unshaped; ``None`` when the wrapped
        reward is a plain function without ``score_batch``)."""
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        call = dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        score_batch = getattr(self.verifier, "score_batch", None)
        if callable(score_batch):
            inner = score_batch(**call)
            base, results = list(inner.scores), inner.results
        else:
            base, results = self.verifier(**call), None
        n = len(base)
        overlong = [0.0] * n
        if self._overlong is not None:
            overlong = [-value for value in self._overlong(completion_ids)]  # TRL returns −P_overlong
        hack = [0.0] * n
        if self.lambda_hack > 0:
            per_row = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}
            texts = [completion_text(c) for c in completions]
            hack = [
                float(self.hack_detector(text, **{k: v[i] for k, v in per_row.items()}))
                for i, text in enumerate(texts)
            ]
        shaped: list[float | None] = []
        for r, p_len, p_hack in zip(base, overlong, hack, strict=True):
            if r is None:
                shaped.append(None)  # unscorable stays unscorable: no penalty turns it into a number
                continue
            value = r
            if self.lambda_len > 0:
                value -= self.lambda_len * p_len
            if self.lambda_hack > 0:
                value -= self.lambda_hack * p_hack
            shaped.append(value)
        if log_metric is not None and n:
            scored = [r for r in base if r is not None]
            log_metric(f"shaping/{self.name}/verifier", sum(scored) / len(scored) if scored else float("nan"))
            if self._overlong is not None:
                log_metric(f"shaping/{self.name}/overlong", sum(overlong) / n)
                log_metric(f"shaping/{self.name}/overlong_triggered", sum(p > 0 for p in overlong) / n)
            if self.lambda_hack > 0:
                log_metric(f"shaping/{self.name}/hack", sum(hack) / n)
                log_metric(f"shaping/{self.name}/hack_triggered", sum(p > 0 for p in hack) / n)
        if log_extra is not None and n:
            if self._overlong is not None:
                log_extra(f"{self.name}/p_overlong", overlong)
            if self.lambda_hack > 0:
                log_extra(f"{self.name}/p_hack", hack)
        return RewardOutput(tuple(shaped), results)
