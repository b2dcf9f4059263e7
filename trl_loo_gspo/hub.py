"""What a pushed model carries beyond TRL's model card: the method, the validation figures, the registration
record and the sources (pure functions over the config, the validation history and the record).

``LooGspoTrainer.create_model_card`` appends :func:`card_sections` to TRL's card; ``LooGspoTrainer.save_model``
writes the merged model when ``hub_merge_adapter`` is set (see ``docs/recipes.md`` for checking a push).
"""

from __future__ import annotations

import json
from typing import Any

# The four sources the method builds on (docs/method.md, "Sources"), without links.
SOURCES = (
    "Yu et al. DAPO: An Open-Source LLM Reinforcement Learning System at Scale. 2025. §3, Algorithm 1: dynamic "
    "sampling, token-level aggregation, overlong reward shaping.",
    "Ahmadian et al. Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in "
    "LLMs. 2024 (v2). §2.3: leave-one-out baseline, sequence-level gradient.",
    "MAI-Thinking-1 technical report. 2026. §3.1: two-stage sampling, entropy feedback, outer clipping.",
    "Zheng et al. Group Sequence Policy Optimization. 2025. §4: geometric-mean ratio, response-level clipping.",
)

# Flags that define the method, with the value that means "component off" where there is one.
_METHOD_FLAGS = (
    ("advantage_estimator", "advantages (method §2.2)"),
    ("loss_aggregation", "aggregation (method §3.3)"),
    ("epsilon", "ε_low of the response-level ratio (method §3.2)"),
    ("epsilon_high", "ε_high (method §3.2)"),
    ("log_ratio_clamp", "outer log-ratio guard (method §5.1)"),
    ("dynamic_sampling", "dynamic sampling (method §4)"),
    ("group_filter", "group filter"),
    ("probe_generations", "two-stage probe: answers in the first stage"),
    ("adaptive_group_size", "per-prompt group sizes"),
    ("entropy_feedback", "entropy feedback on ε_high (method §5.1)"),
    ("beta", "reference KL coefficient β"),
    ("num_generations", "answers per prompt K"),
    ("max_completion_length", "completion limit (tokens)"),
    ("temperature", "sampling temperature"),
    ("learning_rate", "learning rate"),
)


def method_section(args: Any) -> str:
    """The method in one paragraph and the flags that were set (component on/off), from a ``LooGspoConfig``."""
    lines = [
        "## Method: LOO-GSPO (trl-loo-gspo)",
        "",
        "Trained with `trl_loo_gspo.LooGspoTrainer` (a subclass of TRL's `GRPOTrainer`): rewards from automatic "
        "verifiers; leave-one-out advantages on the reward scale; GSPO's length-normalised sequence ratio with "
        "response-level asymmetric clipping; the loss summed over valid tokens and divided by one global token "
        "count per optimizer step; optional dynamic filtering of groups without a comparison signal.",
        "",
        "| flag | value | meaning |",
        "|---|---|---|",
    ]
    for name, meaning in _METHOD_FLAGS:
        if hasattr(args, name):
            lines.append(f"| `{name}` | `{getattr(args, name)}` | {meaning} |")
    return "\n".join(lines) + "\n"


def validation_section(history: list[dict[str, float]]) -> str:
    """The validation figures measured during training (``ValidationCallback.history``), or a plain statement."""
    lines = ["## Validation (independent split, method §5.2)", ""]
    if not history:
        return "\n".join(lines + ["No validation set was evaluated during this run.", ""])
    first, last = history[0], history[-1]
    lines += [
        "| rollout tokens | pass@1 (greedy) | pass rate (sampled) |",
        "|---|---|---|",
    ]
    for point in (first, last) if len(history) > 1 else (last,):
        lines.append(
            f"| {point['rollout_tokens']:,.0f} | {point['eval/pass_at_1']:.4f} | {point['eval/pass_rate']:.4f} |"
        )
    lines += ["", f"{len(history)} evaluations in all; the full curve is in the training logs."]
    return "\n".join(lines) + "\n"


def registration_section(record: dict[str, Any] | None) -> str:
    """The method §2 registration record as a JSON block (also uploaded as ``experiment.json``)."""
    if record is None:
        return ""
    block = json.dumps(record, indent=2, default=str)
    return f"## Experiment registration (method §2)\n\n```json\n{block}\n```\n"


def sources_section() -> str:
    """The four source papers of the method, as plain text (no links)."""
    return "## Sources\n\n" + "\n".join(f"{i}. {text}" for i, text in enumerate(SOURCES, start=1)) + "\n"


def card_sections(args: Any, history: list[dict[str, float]], record: dict[str, Any] | None) -> str:
    """Everything appended to TRL's model card, in order."""
    parts = [method_section(args), validation_section(history), registration_section(record), sources_section()]
    return "\n" + "\n".join(part for part in parts if part)
