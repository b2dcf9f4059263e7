"""What a pushed model carries beyond TRL's model card: the method, the validation figures, the registration
record and the sources (pure functions over the config, the validation history and the record).

``LooGspoTrainer.create_model_card`` appends :func:`card_sections` to TRL's card; ``LooGspoTrainer.save_model``
writes the merged model when ``hub_merge_adapter`` is set (see ``docs/recipes.md`` for checking a push).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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

#: ``loss_type`` of trl-loo-gspo's own response-level loss (``LooGspoConfig``'s default).
OWN_LOSS_TYPE = "loo_gspo"
#: ``advantage_estimator`` value meaning TRL's own advantages.
TRL_ADVANTAGES = "trl"

# What TRL's ``scale_rewards`` does to the centred rewards (TRL's advantages only).
_TRL_SCALING = {
    "group": "divided by the group's standard deviation",
    "batch": "divided by the batch's standard deviation",
    "none": "not divided by any standard deviation",
}
# trl-loo-gspo's advantage estimators (``advantage_estimator``), over per-row group ids (method §2.2).
_OUR_ADVANTAGES = {
    "loo": "leave-one-out: each answer's reward minus the mean reward of the other answers of its group, on the "
    "reward scale, not divided by the group's standard deviation",
    "group_mean": "each answer's reward minus its group's mean reward, on the reward scale, not divided by the "
    "group's standard deviation",
    "grpo": "GRPO's: each answer's reward minus its group's mean reward, divided by the group's standard deviation",
}
_AGGREGATIONS = {
    "token_total": "each answer's loss put on each of its valid tokens, summed and divided by one global count of "
    "valid tokens per optimizer step",
    "sequence_mean": "the answers' losses averaged with equal weight per answer, GSPO's original aggregation",
}


def _on(settings: Mapping[str, Any], name: str) -> bool:
    """Whether an optional component is on (``True``, a positive number, a set value)."""
    value = settings.get(name)
    return bool(value) and value is not None


def method_title(objective: Any) -> str:
    """The name of the objective that trained, as the card's method heading states it."""
    estimator = objective.advantage_estimator
    if objective.uses_own_loss:
        if estimator == "loo":
            return "LOO-GSPO (trl-loo-gspo)"
        if estimator == TRL_ADVANTAGES:
            return "trl-loo-gspo's response-level loss with TRL's advantages"
        return f"trl-loo-gspo's response-level loss with `{estimator}` advantages"
    if estimator == TRL_ADVANTAGES:
        return f"TRL's `{objective.loss_type}` loss with TRL's advantages (TRL's GRPO objective)"
    return f"TRL's `{objective.loss_type}` loss with trl-loo-gspo's `{estimator}` advantages"


def method_summary(objective: Any, settings: Mapping[str, Any]) -> str:
    """One paragraph that is true of the objective that trained: the advantages, the ratio and clipping, the
    aggregation, and the optional components that were on (dynamic sampling, the probe, entropy feedback, ...)."""
    estimator = objective.advantage_estimator
    if estimator == TRL_ADVANTAGES:
        scaling = _TRL_SCALING.get(
            str(objective.scale_rewards), f"scaled as `scale_rewards={objective.scale_rewards}`"
        )
        advantages = f"TRL's own advantages (each answer's reward minus its group's mean reward, {scaling})"
    else:
        what = _OUR_ADVANTAGES.get(estimator, "a registered estimator over the answers of each group")
        advantages = f"trl-loo-gspo's `{estimator}` advantages ({what}; method §2.2)"
    sentences = [
        "Trained with `trl_loo_gspo.LooGspoTrainer` (a subclass of TRL's `GRPOTrainer`); rewards from automatic "
        f"verifiers; {advantages}."
    ]
    if objective.uses_own_loss:
        bounds = f"ε_low = {objective.epsilon_low}, ε_high = {objective.epsilon_high}"
        if not objective.has_clip_range:
            bounds = f"no clip range: the outer guard |log s_i| ≤ {objective.log_ratio_clamp} is its only bound"
        if objective.policy_loss == "response_clip":
            ratio = (
                "GSPO's length-normalised sequence ratio with response-level asymmetric clipping, one clipping "
                f"decision per answer ({bounds}; method §3.2)"
            )
        elif objective.policy_loss == "token_clip":
            ratio = f"a token-level ratio clipped per token ({bounds})"
        elif objective.policy_loss == "response_unclipped":
            ratio = f"GSPO's length-normalised sequence ratio with no clipping, ℓ_i = −s_i Â_i ({bounds}; method §5.1)"
        else:
            ratio = f"the registered policy loss `{objective.policy_loss}` ({bounds})"
        aggregation = _AGGREGATIONS.get(str(objective.loss_aggregation), f"`{objective.loss_aggregation}` aggregation")
        same = "" if objective.loss_type == OWN_LOSS_TYPE else ", the objective of TRL's sequence-level loss"
        sentences.append(
            f"Loss: trl-loo-gspo's own (`loss_type={objective.loss_type}`{same}): {ratio}; {aggregation} "
            "(method §3.3)."
        )
    else:
        sentences.append(
            f"Loss: TRL's `{objective.loss_type}` loss, computed by TRL's `GRPOTrainer` code with a "
            f"{objective.importance_sampling_level}-level importance ratio and TRL's clipping and normalisation; "
            "trl-loo-gspo's response-level clipped loss and its global valid-token denominator were not used."
        )
    if _on(settings, "dynamic_sampling"):
        probe = ""
        if _on(settings, "probe_generations"):
            probe = f", with a two-stage probe of {settings['probe_generations']} answers per prompt first"
        if _on(settings, "adaptive_group_size"):
            probe += " and per-prompt group sizes"
        sentences.append(
            f"Groups without a comparison signal were dropped and refilled with new prompts (dynamic sampling"
            f"{probe}; method §3.1)."
        )
    if _on(settings, "entropy_feedback"):
        sentences.append("The upper clip bound ε_high was moved by entropy feedback (method §5.1).")
    clamp = objective.log_ratio_clamp
    if clamp is not None and objective.uses_own_loss:
        sentences.append(f"The log sequence ratio was clamped to ±{clamp} (outer guard, method §5.1).")
    if _on(settings, "beta"):
        sentences.append(f"A reference KL penalty with β = {settings['beta']} was added (method §5.1).")
    if _on(settings, "process_advantage_coef"):
        sentences.append(
            f"Per-token process advantages from span signals were added with coefficient "
            f"{settings['process_advantage_coef']} (method §6)."
        )
    return " ".join(sentences)


def _flag_rows(objective: Any) -> tuple[tuple[str, str], ...]:
    """(flag, meaning) rows of the card's table: what each flag means for this objective."""
    own = objective.uses_own_loss
    rows: list[tuple[str, str]] = [
        ("loss_type", "the loss: trl-loo-gspo's response-level loss (method §3.2)" if own else "the loss: TRL's code"),
        ("advantage_estimator", "advantages (method §2.2)"),
    ]
    if objective.advantage_estimator == TRL_ADVANTAGES:
        rows.append(("scale_rewards", "TRL's reward scaling"))
    rows.append(("importance_sampling_level", "unit of the importance ratio (method §3.2)"))
    if own:
        rows += [("policy_loss", "policy loss (method §3.2)"), ("loss_aggregation", "aggregation (method §3.3)")]
        if objective.has_clip_range:  # a policy loss without a clip range reads no ε
            rows += [
                ("epsilon", "ε_low of the response-level ratio (method §3.2)"),
                ("epsilon_high", "ε_high of the response-level ratio (method §3.2)"),
            ]
        rows.append(("log_ratio_clamp", "outer log-ratio guard (method §5.1)"))
    else:
        rows += [("epsilon", "TRL's lower clip parameter"), ("epsilon_high", "TRL's upper clip parameter")]
    rows += [
        ("dynamic_sampling", "dynamic sampling (method §3.1)"),
        ("group_filter", "group filter (method §3.1)"),
        ("probe_generations", "two-stage probe: answers in the first stage (method §3.1)"),
        ("adaptive_group_size", "per-prompt group sizes (method §3.1)"),
        ("entropy_feedback", "entropy feedback on ε_high (method §5.1)"),
        ("process_advantage_coef", "process feedback from span signals (method §6)"),
        ("beta", "reference KL coefficient β (method §5.1)"),
        ("num_generations", "answers per prompt K"),
        ("max_completion_length", "completion limit (tokens)"),
        ("temperature", "sampling temperature"),
        ("learning_rate", "learning rate"),
    ]
    return tuple(rows)


def method_section(settings: Mapping[str, Any], objective: Any) -> str:
    """The objective that trained, in one paragraph, and its flags.

    ``settings``: the run's values by field name: the run plan's, as resolved
    (:meth:`~trl_loo_gspo.trainer.run_plan.RunPlan.flags`), and TRL's (``beta``, ``num_generations``,
    ``max_completion_length``, ``temperature``, ``learning_rate``). ``objective``: the resolved objective
    (``trl_loo_gspo.config.objective.Objective``, the run plan's: the one resolution the trainer, the card and the
    registration record read). The paragraph
    names the loss and the advantages that actually trained (ours, TRL's, or TRL's loss with ours), and the optional
    components only when they were on; the table shows each resolved field's value that trained."""
    lines = [
        f"## Method: {method_title(objective)}",
        "",
        method_summary(objective, settings),
        "",
        "| flag | value | meaning |",
        "|---|---|---|",
    ]
    resolved = objective.field_values()
    for name, meaning in _flag_rows(objective):
        if name in resolved:  # the value that trained, not the unset field
            lines.append(f"| `{name}` | `{resolved[name]}` | {meaning} |")
        elif name in settings:
            lines.append(f"| `{name}` | `{settings[name]}` | {meaning} |")
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


def card_sections(
    settings: Mapping[str, Any], history: list[dict[str, float]], record: dict[str, Any] | None, objective: Any
) -> str:
    """Everything appended to TRL's model card, in order (``objective``: see :func:`method_section`)."""
    parts = [
        method_section(settings, objective),
        validation_section(history),
        registration_section(record),
        sources_section(),
    ]
    return "\n" + "\n".join(part for part in parts if part)
