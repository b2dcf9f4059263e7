"""The trainer side of process feedback (method §6): collect the verifiers' span signals with the rewards, turn them
into per-token advantages (``inputs["process_advantages"]``) and log the safeguards. The math is in
:mod:`trl_loo_gspo.process`; ``LooGspoTrainer`` calls these hooks from ``_calculate_rewards`` and
``_generate_and_score_completions``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter, deque
from typing import Any

import torch
from accelerate.utils import gather_object

from . import process


def span_sources(reward_funcs: list[Any]) -> list[tuple[int, Any]]:
    """``(reward index, verifier)`` of every reward function that emits spans (a shaped reward counts through its
    wrapped verifier)."""
    sources = []
    for index, func in enumerate(reward_funcs):
        verifier = getattr(func, "verifier", func)
        if getattr(verifier, "emit_spans", False):
            sources.append((index, verifier))
    return sources


class ProcessFeedbackMixin:
    """Mixed into ``LooGspoTrainer``; active when ``args.process_advantage_coef > 0``."""

    def _init_process(self) -> None:
        self._span_sources = span_sources(list(self.reward_funcs))
        if self.args.process_advantage_coef > 0 and not self._span_sources:
            raise ValueError(
                "process_advantage_coef > 0 needs a reward function that is a verifier with emit_spans=True (e.g. "
                "CoqVerifier(emit_spans=True), CodeVerifier(emit_spans=True), MultiStepVerifier(emit_spans=True)); "
                "none of the reward functions emits span signals."
            )
        self._last_signals: list | None = None
        window = self.args.process_divergence_window
        self._process_signal_history: deque[float] = deque(maxlen=window)
        self._process_pass_history: deque[float] = deque(maxlen=window)
        self._warned_divergence = False
        self._warned_quadratic_spans = False

    @property
    def _process_on(self) -> bool:
        return self.args.process_advantage_coef > 0

    def _collect_signals(self, num_local_rows: int) -> None:
        """After a reward call: the span lists of every row of all ranks (aligned with the gathered rewards)."""
        if not self._process_on:
            return
        replay = getattr(self, "_replay", None)
        if replay is not None:
            self._last_signals = replay.span_signals
            return
        # Per row: the spans of every span-emitting verifier, and the first one's own (unshaped) final score.
        local: list[dict] = [{"spans": [], "final": None} for _ in range(num_local_rows)]
        for source, (_, verifier) in enumerate(self._span_sources):
            results = verifier.last_results
            if len(results) != num_local_rows:
                raise RuntimeError(
                    f"{type(verifier).__name__}.last_results has {len(results)} results for {num_local_rows} rows"
                )
            for row, result in enumerate(results):
                local[row]["spans"].extend(result.spans or [])
                if source == 0:
                    local[row]["final"] = result.score
        self._last_signals = gather_object(local)

    def _process_token_advantages(self, output: dict, rewards: torch.Tensor, group_ids: torch.Tensor) -> None:
        """Set ``output["process_advantages"]`` (local rows × completion tokens) and log the safeguards.

        ``rewards``: the combined rewards of every row of all ranks (NaN = unscorable: no process signal)."""
        if not self._process_on or self._last_signals is None:
            return
        rewards = rewards.cpu()
        entries = self._last_signals
        spans = [None if math.isnan(r) else e["spans"] for r, e in zip(rewards.tolist(), entries, strict=True)]
        finals = torch.tensor([math.nan if e["final"] is None else float(e["final"]) for e in entries])
        values, keys = process.span_value_matrix(spans)
        advantages = process.process_advantages(values, group_ids.cpu())
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
        coef = self.args.process_advantage_coef
        output["process_advantages"] = (
            (coef * torch.stack(rows)).to(output["advantages"].dtype).to(output["advantages"].device)
        )
        self._log_process(spans, values, keys, advantages, finals.masked_fill(torch.isnan(rewards), math.nan))

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

    def _log_process(self, spans, values, keys, advantages, final: torch.Tensor) -> None:
        """``final``: the first span-emitting verifier's own score per row (before any shaping); NaN = unscorable."""
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
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
        if mode != "train":
            return
        self._process_signal_history.append(signal)
        self._process_pass_history.append(pass_rate)
        args = self.args
        diverging = process.divergence(
            self._process_signal_history,
            self._process_pass_history,
            args.process_divergence_window,
            args.process_divergence_margin,
        )
        metrics["process/divergence"].append(float(diverging))
        if diverging and not self._warned_divergence:
            warnings.warn(
                f"process feedback: over the last {args.process_divergence_window} steps the process signal rose "
                "while the final pass rate fell (method §6: intermediate progress is not final correctness). Check "
                "process/corr_final/* and process/flagged/*; consider a smaller process_advantage_coef. Warning "
                "once; process/divergence logs every step.",
                stacklevel=2,
            )
            self._warned_divergence = True
