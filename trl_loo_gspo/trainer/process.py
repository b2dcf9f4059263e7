"""The trainer side of process feedback (method §6): collect the verifiers' span signals from the outputs of the reward
call that produced them (:class:`~trl_loo_gspo.trainer.checks.RewardOutputs`, never an attribute of the verifier),
carry them in the round's data (``RoundData.span_signals``), turn them into per-token advantages
(``inputs["process_advantages"]``) and log the safeguards. The math is in :mod:`trl_loo_gspo.algorithms.spans`;
``LooGspoTrainer`` owns one :class:`ProcessFeedback` and calls it after each reward call and each generation round.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter, deque
from typing import Any

import torch
from accelerate.utils import gather_object

from ..algorithms import spans as process
from .checks import RewardOutputs
from .rows import RoundData
from .run_plan import ProcessFeedbackPlan


def span_sources(reward_funcs: list[Any]) -> list[tuple[int, Any]]:
    """``(reward index, verifier)`` of every reward function that emits spans (a shaped reward counts through its
    wrapped verifier)."""
    sources = []
    for index, func in enumerate(reward_funcs):
        verifier = getattr(func, "verifier", func)
        if getattr(verifier, "emit_spans", False):
            sources.append((index, verifier))
    return sources


class ProcessFeedback:
    """Active when the plan's coefficient (``process_advantage_coef``) is > 0; holds the divergence detector's
    windows (checkpointed)."""

    def __init__(
        self, plan: ProcessFeedbackPlan, reward_funcs: list[Any], processing_class: Any, accelerator: Any
    ) -> None:
        self.plan, self.processing_class, self.accelerator = plan, processing_class, accelerator
        self.coef = plan.coef
        self.sources = span_sources(list(reward_funcs))
        if self.coef > 0 and not self.sources:
            raise ValueError(
                "process_advantage_coef > 0 needs a reward function that is a verifier with emit_spans=True (e.g. "
                "CoqVerifier(emit_spans=True), CodeVerifier(emit_spans=True), MultiStepVerifier(emit_spans=True)); "
                "none of the reward functions emits span signals."
            )
        window = plan.window
        self.signal_history: deque[float] = deque(maxlen=window)
        self.pass_history: deque[float] = deque(maxlen=window)
        self.warned_divergence = False
        self._warned_quadratic_spans = False

    @property
    def on(self) -> bool:
        return self.coef > 0

    def collect_signals(self, outputs: RewardOutputs, num_local_rows: int) -> list[dict] | None:
        """After a reward call: the span entries of every row of all ranks, aligned with the gathered rewards
        (``None`` when process feedback is off). ``outputs``: what that call's reward functions returned
        (filled by the functions of :meth:`~trl_loo_gspo.trainer.checks.RewardChecks.checked`), read nowhere
        else."""
        if not self.on:
            return None
        # Per row: the spans of every span-emitting verifier, and the first one's own (unshaped) final score.
        local: list[dict] = [{"spans": [], "final": None} for _ in range(num_local_rows)]
        for source, (index, verifier) in enumerate(self.sources):
            output = outputs.get(index)
            results = None if output is None else output.results
            if results is None:
                raise RuntimeError(
                    f"reward function {index} ({type(verifier).__name__}) emits spans but its reward call returned no "
                    "per-answer results: a span-emitting reward function must offer score_batch(...) -> RewardOutput "
                    "(every Verifier and ShapedReward does)"
                )
            if len(results) != num_local_rows:
                raise RuntimeError(
                    f"{type(verifier).__name__}.score_batch returned {len(results)} results for {num_local_rows} rows"
                )
            for row, result in enumerate(results):
                local[row]["spans"].extend(result.spans or [])
                if source == 0:
                    local[row]["final"] = result.score
        return gather_object(local)

    def token_advantages(
        self, output: dict, rewards: torch.Tensor, round_data: RoundData, metrics: dict[str, list], training: bool
    ) -> None:
        """Set ``output["process_advantages"]`` (local rows × completion tokens) and log the safeguards into
        ``metrics``.

        ``rewards``: the combined rewards of every row of all ranks (NaN = unscorable: no process signal); padding
        rows carry no span entry of their own (:data:`~trl_loo_gspo.trainer.rows.NO_SPANS`)."""
        entries = round_data.span_signals
        if not self.on or entries is None:
            return
        rewards = rewards.cpu()
        spans = [None if math.isnan(r) else e["spans"] for r, e in zip(rewards.tolist(), entries, strict=True)]
        finals = torch.tensor([math.nan if e["final"] is None else float(e["final"]) for e in entries])
        values, keys = process.span_value_matrix(spans)
        advantages = process.process_advantages(values, round_data.group_ids.cpu())
        local_rows = output["completion_ids"].size(0)
        first = self.accelerator.process_index * local_rows
        lengths = output["completion_mask"].sum(-1).tolist()
        width = output["completion_ids"].size(1)

        def decode(batch: list[list[int]]) -> list[str]:
            return self.processing_class.batch_decode(batch, skip_special_tokens=True)

        rows = []
        for r in range(local_rows):
            g = first + r
            ids = output["completion_ids"][r, : int(lengths[r])].tolist()
            of_key = {key: float(advantages[g, k]) for k, key in enumerate(keys)}
            ends = self._char_ends(decode, ids) if spans[g] else []
            rows.append(process.token_advantages(spans[g] or [], of_key, ends, width))
        output["process_advantages"] = (
            (self.coef * torch.stack(rows)).to(output["advantages"].dtype).to(output["advantages"].device)
        )
        final = finals.masked_fill(torch.isnan(rewards), math.nan)
        self._log(metrics, training, spans, values, keys, advantages, final)

    def _char_ends(self, decode, ids: list[int]) -> list[int]:
        """Character end of each token in the completion text: streamed (linear) when the tokenizer allows it and
        the streamed text is exactly TRL's decoded text, else by exact prefix decoding."""
        backend = getattr(self.processing_class, "_tokenizer", None)
        if backend is not None:
            ends = process.token_char_ends_streaming(backend, ids, decode([ids])[0])
            if ends is not None:
                return ends
        if not self._warned_quadratic_spans:
            reason = "it has no fast backend" if backend is None else "its streamed text differs from batch_decode"
            warnings.warn(
                f"process feedback maps spans to tokens by decoding every prefix of each answer (O(T²) per answer) "
                f"because the tokenizer cannot be streamed ({reason}). Use a fast tokenizer whose decode is "
                "streamable to make this linear. Warning once.",
                stacklevel=2,
            )
            self._warned_quadratic_spans = True
        return process.token_char_ends(decode, ids)

    def _log(self, metrics, training: bool, spans, values, keys, advantages, final: torch.Tensor) -> None:
        """``final``: the first span-emitting verifier's own score per row (before any shaping); NaN = unscorable."""
        scored = ~torch.isnan(final)
        passed = (final >= 1.0) & scored
        present = ~torch.isnan(values)
        kinds = sorted({key.split(":")[0] for key in keys})
        for kind in kinds:
            columns = [k for k, key in enumerate(keys) if key.split(":")[0] == kind]
            per_row = values[:, columns].nanmean(dim=1)  # NaN where the answer has no span of this kind
            per_row = per_row.masked_fill(~scored, math.nan)
            metrics[f"process/corr_final/{kind}"].append(process.point_biserial(per_row, passed))
        metrics["process/positive_in_failed"].append(process.positive_in_failed(advantages, present, passed))
        signal = float(values[present].mean()) if present.any() else math.nan
        pass_rate = float(passed[scored].double().mean()) if scored.any() else math.nan
        metrics["process/signal_mean"].append(signal)
        metrics["process/pass_rate"].append(pass_rate)
        all_spans = [span for row in spans if row for span in row]
        flags = Counter(flag for span in all_spans for flag in span.flags)
        metrics["process/frac_flagged"].append(
            sum(bool(span.flags) for span in all_spans) / len(all_spans) if all_spans else 0.0
        )
        for flag, count in flags.items():
            metrics[f"process/flagged/{flag}"].append(count / len(all_spans))
        if not training:
            return
        self.signal_history.append(signal)
        self.pass_history.append(pass_rate)
        plan = self.plan
        diverging = process.divergence(self.signal_history, self.pass_history, plan.window, plan.margin)
        metrics["process/divergence"].append(float(diverging))
        if diverging and not self.warned_divergence:
            warnings.warn(
                f"process feedback: over the last {plan.window} steps the process signal rose "
                "while the final pass rate fell (method §6: intermediate progress is not final correctness). Check "
                "process/corr_final/* and process/flagged/*; consider a smaller process_advantage_coef. Warning "
                "once; process/divergence logs every step.",
                stacklevel=2,
            )
            self.warned_divergence = True

    def state_dict(self) -> dict[str, Any]:
        """The divergence detector's windows."""
        return {
            "signal": list(self.signal_history),
            "pass_rate": list(self.pass_history),
            "warned": self.warned_divergence,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.signal_history.clear()
        self.signal_history.extend(state["signal"])
        self.pass_history.clear()
        self.pass_history.extend(state["pass_rate"])
        self.warned_divergence = bool(state["warned"])
