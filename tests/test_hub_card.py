"""The model card's method section describes the objective that trained (issue #23, defect 10), and every § it cites
is a section of docs/method.md with the title the card gives it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from trl_loo_gspo.config import LooGspoConfig
from trl_loo_gspo.config.objective import FIELDS, Objective
from trl_loo_gspo.records.card import card_sections, method_section
from trl_loo_gspo.trainer.run_plan import RunPlan

ROOT = Path(__file__).resolve().parent.parent


def _objective(**changes):
    """An objective (``trl_loo_gspo.config.objective.Objective``): LOO-GSPO unless changed."""
    values = dict(
        loss_type="loo_gspo",
        uses_own_loss=True,
        policy_loss="response_clip",
        advantage_estimator="loo",
        loss_aggregation="token_total",
        importance_sampling_level="sequence",
        epsilon_low=3e-4,
        epsilon_high=4e-4,
        scale_rewards="none",
    )
    values.update(changes)
    return Objective(**values)


def _args(**changes):
    """The settings the card reads by field name, as a run plan's flags and TRL's values give them (components off
    unless changed)."""
    values = dict(
        loss_type="loo_gspo",
        advantage_estimator="loo",
        scale_rewards="none",
        importance_sampling_level="sequence",
        loss_aggregation="token_total",
        epsilon=3e-4,
        epsilon_high=4e-4,
        log_ratio_clamp=None,
        dynamic_sampling=False,
        group_filter="zero_variance",
        probe_generations=None,
        adaptive_group_size=False,
        entropy_feedback=False,
        process_advantage_coef=0.0,
        beta=0.0,
        num_generations=8,
        max_completion_length=256,
        temperature=1.0,
        learning_rate=1e-6,
    )
    values.update(changes)
    return values


TRL_GRPO = dict(
    loss_type="grpo", uses_own_loss=False, policy_loss=None, loss_aggregation=None, importance_sampling_level="token"
)
TRL_GRPO_ARGS = dict(
    loss_type="grpo", loss_aggregation=None, importance_sampling_level="token", epsilon=0.2, epsilon_high=0.2
)


def _paragraph(section: str) -> str:
    return section.split("\n\n")[1]


def test_our_loss_with_loo_advantages_is_described_as_loo_gspo():
    section = method_section(_args(), _objective())
    assert section.startswith("## Method: LOO-GSPO")
    text = _paragraph(section)
    assert "leave-one-out" in text and "response-level" in text and "global count of valid tokens" in text
    assert "dynamic sampling" not in text.lower() and "entropy feedback" not in text  # off: not claimed


@pytest.mark.parametrize(
    "advantages",
    [
        dict(advantage_estimator="trl", scale_rewards="group"),  # stock TRL GRPO
        dict(advantage_estimator="loo"),  # TRL's loss with our advantages
    ],
)
def test_a_trl_loss_is_never_described_as_response_level_clipping(advantages):
    objective = _objective(**TRL_GRPO, **advantages)
    section = method_section(_args(**TRL_GRPO_ARGS, **advantages), objective)
    text = _paragraph(section)
    assert "LOO-GSPO" not in section.split("\n")[0]
    assert "TRL's `grpo` loss" in text
    assert "response-level clipped loss and its global valid-token denominator were not used" in text
    assert "one clipping decision per answer" not in text and "global count of valid tokens" not in text
    assert "| `loss_aggregation` |" not in section and "response-level ratio" not in section
    if advantages["advantage_estimator"] == "trl":
        assert section.startswith("## Method: TRL's `grpo` loss with TRL's advantages")
        assert "leave-one-out" not in text and "divided by the group's standard deviation" in text
    else:
        assert "trl-loo-gspo's `loo` advantages (leave-one-out" in text


def test_our_loss_with_group_mean_advantages_does_not_claim_leave_one_out():
    section = method_section(_args(advantage_estimator="group_mean"), _objective(advantage_estimator="group_mean"))
    assert "leave-one-out" not in section and "LOO-GSPO" not in section
    assert "group's mean reward" in _paragraph(section) and "response-level" in _paragraph(section)


def test_sequence_mean_aggregation_is_named():
    section = method_section(_args(loss_aggregation="sequence_mean"), _objective(loss_aggregation="sequence_mean"))
    assert "equal weight per answer" in _paragraph(section) and "global count" not in _paragraph(section)


def test_optional_components_are_mentioned_only_when_on():
    args = _args(
        dynamic_sampling=True, probe_generations=4, entropy_feedback=True, process_advantage_coef=0.1, beta=0.01
    )
    text = _paragraph(method_section(args, _objective()))
    assert "dynamic sampling, with a two-stage probe of 4 answers" in text and "method §3.1" in text
    assert "entropy feedback (method §5.1)" in text and "(method §6)" in text and "β = 0.01" in text


def test_the_card_reads_the_one_resolution_of_the_objective(tmp_path):
    config = LooGspoConfig(str(tmp_path), bf16=False, loss_type="grpo")  # fields left unset: TRL's values train
    section = method_section(_args(), RunPlan.resolve(config).objective)
    assert section.startswith("## Method: TRL's `grpo` loss with TRL's advantages")
    table = section.split("| flag | value | meaning |")[1]
    for name, value in config.objective.field_values().items():
        assert f"| `{name}` |" not in table or f"| `{name}` | `{value}` |" in table, name
    assert "| `epsilon` | `0.2` |" in table and "| `scale_rewards` | `group` |" in table
    assert set(config.objective.field_values()) == set(FIELDS)
    own = RunPlan.resolve(LooGspoConfig(str(tmp_path), bf16=False), num_generations=8)
    settings = {**_args(), **own.flags()}  # the plan's flags, as the trainer's card reads them
    assert "| `policy_loss` | `response_clip` |" in method_section(settings, own.objective)
    assert "| `dynamic_sampling` | `False` |" in method_section(settings, own.objective)  # the config's default
    registered = replace(own.objective, policy_loss="user_loss")
    assert "the registered policy loss `user_loss`" in _paragraph(method_section(settings, registered))


def _method_sections() -> dict[str, str]:
    text = (ROOT / "docs" / "method.md").read_text()
    return dict(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? (.+)$", text, flags=re.M))


# The topic each cited section must be about (a word of its title in docs/method.md).
TOPICS = {
    "2": "registers",
    "2.2": "Leave-one-out",
    "3.1": "comparison signal",
    "3.2": "clipping",
    "3.3": "valid tokens",
    "5.1": "entropy feedback",
    "5.2": "equal budget",
    "6": "Process feedback",
}


def test_every_section_the_card_cites_exists_with_that_topic():
    sections = _method_sections()
    args = _args(
        dynamic_sampling=True,
        probe_generations=4,
        adaptive_group_size=True,
        entropy_feedback=True,
        log_ratio_clamp=5.0,
        process_advantage_coef=0.1,
        beta=0.01,
    )
    card = card_sections(args, [], {"spec": "method §2 registration"}, _objective())
    cited = set(re.findall(r"method §(\d+(?:\.\d+)?)", card))  # the sources' § are the papers' own
    assert {"2", "2.2", "3.1", "3.2", "3.3", "5.1", "5.2", "6"} <= cited
    for number in cited:
        assert number in sections, f"the card cites method §{number}, which docs/method.md does not have"
        assert TOPICS[number].lower() in sections[number].lower(), (number, sections[number])
    table = card.split("| flag | value | meaning |")[1]
    assert "| `dynamic_sampling` | `True` | dynamic sampling (method §3.1) |" in table


def test_the_math_recipe_cites_the_dynamic_sampling_section():
    recipe = (ROOT / "recipes" / "math-lora.yaml").read_text()
    line = next(line for line in recipe.splitlines() if line.startswith("dynamic_sampling:"))
    assert "method §3.1" in line and "comparison signal" in _method_sections()["3.1"]


def test_sequence_level_dapo_is_described_as_our_loss_with_trls_advantages():
    objective = _objective(loss_type="dapo", advantage_estimator="trl", scale_rewards="group")
    section = method_section(_args(loss_type="dapo", advantage_estimator=None), objective)
    assert section.startswith("## Method: trl-loo-gspo's response-level loss with TRL's advantages")
    text = _paragraph(section)
    assert "TRL's own advantages" in text and "leave-one-out" not in text and "one clipping decision" in text
    assert "| `advantage_estimator` | `trl` |" in section  # the resolved value, not the unset field
