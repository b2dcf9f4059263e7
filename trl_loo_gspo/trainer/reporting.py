"""Reporting around a run: the registration record sent to the ``report_to`` trackers, and a summary table at the
end of training (``rich``).

transformers' integration callbacks (TensorBoard, Weights & Biases, Trackio, MLflow) log the training arguments
and the metrics; none of them knows our method §2 registration record, so :class:`RegistrationToTrackers` hands it to
each active tracker after that tracker has set itself up (its own ``on_train_begin`` runs first: integration
callbacks are registered at ``Trainer.__init__``, before ours).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

RECORD_KEY = "experiment_registration"


def _flat_scalars(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {"a/b": scalar}, for trackers whose config holds scalars (lists and None as JSON text)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(_flat_scalars(value, name))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def send_record_to_trackers(callbacks: list[Any], record: dict[str, Any]) -> list[str]:
    """Give the record to every set-up tracker callback among ``callbacks``; returns the trackers it reached."""
    text = json.dumps(record, indent=2, default=str)
    reached: list[str] = []
    for callback in callbacks:
        kind = type(callback).__name__
        try:
            if kind == "TensorBoardCallback" and getattr(callback, "tb_writer", None) is not None:
                callback.tb_writer.add_text(RECORD_KEY, f"```json\n{text}\n```")
                callback.tb_writer.flush()
            elif kind == "WandbCallback" and getattr(getattr(callback, "_wandb", None), "run", None) is not None:
                callback._wandb.config.update({RECORD_KEY: record}, allow_val_change=True)
            elif kind == "TrackioCallback" and getattr(callback, "_initialized", False):
                callback._trackio.config.update(
                    {f"{RECORD_KEY}/{k}": v for k, v in _flat_scalars(record).items()}, allow_val_change=True
                )
            elif kind == "MLflowCallback" and getattr(callback, "_initialized", False):
                callback._ml_flow.log_dict(record, "experiment.json")
            else:
                continue
        except Exception as err:  # a tracker problem must not stop training; say so
            logger.warning("Could not send the registration record to %s: %s", kind, err)
            continue
        reached.append(kind)
    return reached


def objective_line(objective: Any) -> str:
    """The resolved objective (:class:`trl_loo_gspo.config.Objective`) in one line, printed when training starts."""
    if objective.uses_own_loss:
        loss = f"our loss ({objective.policy_loss}, {objective.loss_aggregation} over the global count)"
    else:
        loss = "TRL's loss"
    clamp = "" if objective.log_ratio_clamp is None else f", log_ratio_clamp={objective.log_ratio_clamp:g}"
    if objective.epsilon_low is None:  # a policy loss without a clip range: the guard is its only bound
        clip = "no clip range"
    else:
        clip = f"epsilon=[{objective.epsilon_low:g}, {objective.epsilon_high:g}]"
    return (
        f"Objective: loss_type={objective.loss_type}, {loss}, advantages={objective.advantage_estimator} "
        f"(scale_rewards={objective.scale_rewards}), ratio={objective.importance_sampling_level}, {clip}{clamp}"
    )


class RegistrationToTrackers(TrainerCallback):
    """At the start of training, print the resolved objective in one line and send the registration record (if any)
    to the ``report_to`` trackers.

    Args:
        objective: the run plan's resolved objective (``None``: nothing printed).
        record: returns the registration record when training starts (``None`` when registration is off).
        callbacks: the trainer's callback list (the trackers' integration callbacks are read from it then).
    """

    def __init__(self, objective: Any, record: Callable[[], dict | None], callbacks: list) -> None:
        self.objective, self.record, self.callbacks = objective, record, callbacks
        self.reached: list[str] = []

    def on_train_begin(self, args, state, control, **kwargs):
        if self.objective is not None and state.is_world_process_zero:  # the resolved objective, once, in one line
            print(objective_line(self.objective), flush=True)
        record = self.record()
        if record is not None and state.is_world_process_zero:
            self.reached = send_record_to_trackers(self.callbacks, record)
        return control


@dataclass(frozen=True)
class RunFacts:
    """What the end-of-run summary reads besides the log history (``LooGspoTrainer.run_facts()``)."""

    global_step: int
    generated_tokens: int
    effective_tokens: int
    clip_summary: dict | None = None  # the run's clip tally (``ClipControl.summary()``); None: nothing measured
    nothing_trained: str | None = None  # why the run trained nothing, or None


def _last(history: list[dict[str, Any]], key: str) -> float | None:
    for entry in reversed(history):
        value = entry.get(key)
        if isinstance(value, (int, float)) and not math.isnan(value):
            return float(value)
    return None


def _mean(history: list[dict[str, Any]], key: str) -> float | None:
    values = [
        entry[key] for entry in history if isinstance(entry.get(key), (int, float)) and not math.isnan(entry[key])
    ]
    return sum(values) / len(values) if values else None


def summary_rows(log_history: list[dict[str, Any]], facts: RunFacts) -> list[tuple[str, str]]:
    """(name, value) rows of the end-of-training summary, from the log history and the run's ``facts``."""

    def fmt(value: float | None, spec: str = ".4f") -> str:
        return "—" if value is None else format(value, spec)

    training = [entry for entry in log_history if "loss" in entry]
    # steps whose loss saw no token (all dynamic-sampling padding) measured no entropy or clipping: "—", not 0
    measured = [entry for entry in training if entry.get("tokens/valid", 1) > 0]
    rows = [
        ("optimizer steps", str(facts.global_step)),
        ("generated tokens", f"{facts.generated_tokens:,}"),
        ("effective tokens", f"{facts.effective_tokens:,}"),
        ("reward (first → last logged)", f"{fmt(_first(training, 'reward'))} → {fmt(_last(training, 'reward'))}"),
        ("clip fraction (answers, mean)", fmt(_mean(measured, "clip_ratio/region_answers"))),
        ("entropy (mean, nats/token)", fmt(_mean(measured, "entropy"))),
        ("groups with signal (mean)", fmt(_mean(training, "groups/frac_with_signal"))),
        ("unscorable answers (mean)", fmt(_mean(training, "rewards/frac_unscorable"))),
        ("filtered fraction (mean)", fmt(_mean(training, "sampling/frac_filtered"))),
    ]
    rows += clip_rows(facts.clip_summary)
    if facts.nothing_trained:
        rows.insert(0, ("TRAINED NOTHING", facts.nothing_trained))
    evals = [entry for entry in log_history if "eval/pass_rate" in entry]
    if evals:
        rows.append(
            (
                "validation pass rate (first → last)",
                f"{fmt(_first(evals, 'eval/pass_rate'))} → {fmt(_last(evals, 'eval/pass_rate'))}",
            )
        )
        rows.append(
            (
                "validation pass@1 (first → last)",
                f"{fmt(_first(evals, 'eval/pass_at_1'))} → {fmt(_last(evals, 'eval/pass_at_1'))}",
            )
        )
    return rows


def clip_range_text(epsilon_low: float | None, epsilon_high: float | None) -> str:
    """A clip range as the summary prints it; a policy loss without one (``response_unclipped``): the outer guard
    alone bounds it."""
    if epsilon_low is None or epsilon_high is None:
        return "none (outer guard only)"
    return f"[1 - {epsilon_low:.3g}, 1 + {epsilon_high:.3g}]"


def clip_rows(stats: dict | None) -> list[tuple[str, str]]:
    """Where the clip bit over the run (``stats``: our loss's tally, ``ClipControl.summary()``), for the summary;
    none for TRL's loss (``None``)."""
    if stats is None:
        return []
    offpolicy, every = stats["offpolicy"], stats["all"]

    def share(value: float | None) -> str:
        return "—" if value is None else f"{value:.1%}"

    def magnitude(value: float | None) -> str:
        return "—" if value is None else f"{value:.2e}"

    by_position = ", ".join(
        f"{p}: {share(f['clipped_fraction'])}" for p, f in stats["by_position"].items() if int(p) >= 1
    )
    rows = [
        ("clipped off-policy answers (Â ≠ 0)", share(offpolicy["clipped_fraction"])),
        ("… by step in round", by_position or "— (no off-policy step)"),
        (
            "|log s_i| off-policy (p50 / p90)",
            f"{magnitude(offpolicy['abs_log_ratio_p50'])} / {magnitude(offpolicy['abs_log_ratio_p90'])}",
        ),
        ("answers that carried a gradient", f"{every['gradient_answers']:,} of {every['answers']:,}"),
        ("clip range at the end", clip_range_text(stats["epsilon_low"], stats["epsilon_high"])),
    ]
    if stats["target_fraction"] is not None:
        rows.append(("clip target (controller)", share(stats["target_fraction"])))
    return rows


def _first(history: list[dict[str, Any]], key: str) -> float | None:
    return _last(list(reversed(history)), key)


class SummaryTable(TrainerCallback):
    """Print a ``rich`` table of the run's key figures when training ends (main process only); ``facts()``: the
    run's :class:`RunFacts` then."""

    def __init__(self, facts: Callable[[], RunFacts]) -> None:
        self.facts = facts
        self.rows: list[tuple[str, str]] = []

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control
        from rich.console import Console

        self.rows = summary_rows(state.log_history, self.facts())
        Console().print(summary_table(self.rows, f"LOO-GSPO run summary: {args.output_dir}"))
        return control


def summary_table(rows: list[tuple[str, str]], title: str):
    """The rows of :func:`summary_rows` as a ``rich`` table."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table
