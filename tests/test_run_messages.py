"""What a run says about itself (issue #36): no warning on ε's size (#43: the clip warning follows what the run
measured), the resolved objective in one line, reward errors with their context, advice that fits why nothing
trained, and "—" for what was not measured."""

from __future__ import annotations

import re
import warnings

import pytest

from trl_loo_gspo import LooGspoConfig
from trl_loo_gspo.trainer.checks import RewardFunctionError, RewardTally, nothing_trained_reason
from trl_loo_gspo.trainer.reporting import RunFacts, objective_line, summary_rows

from .helpers import base_kwargs, reward_trainer


def _config(tmp_path, **overrides) -> LooGspoConfig:
    kwargs = base_kwargs(str(tmp_path))
    kwargs.pop("epsilon"), kwargs.pop("epsilon_high")
    return LooGspoConfig(**{**kwargs, **overrides})


def _clip_notices(tmp_path, **overrides) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _config(tmp_path, **overrides)
    return [str(w.message) for w in caught if "clip" in str(w.message).lower()]


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # GSPO's defaults
        {"epsilon": 0.2},  # a token-scale ε on the sequence ratio: whether it clips is measured in the run (#43)
        {"epsilon": 0.01, "epsilon_high": 0.0133},
        {"loss_type": "grpo", "epsilon": 0.2},
        {"loss_type": "cispo", "importance_sampling_level": "sequence", "epsilon_high": 5.0},
    ],
    ids=["defaults", "token-scale", "re-chosen", "grpo-token", "cispo"],
)
def test_the_config_judges_no_clip_range_by_its_size(tmp_path, overrides):
    """The clip warning follows the measurement (tests/test_clip_stats.py), not ε's magnitude: ε = 0.01 clipped 17%
    of the chain study's answers, where the old rule said it clips almost nothing."""
    assert _clip_notices(tmp_path, **overrides) == []


def test_the_objective_line_names_what_was_resolved(tmp_path):
    line = objective_line(_config(tmp_path, log_ratio_clamp=10.0).objective)
    assert line == (
        "Objective: loss_type=loo_gspo, our loss (response_clip, token_total over the global count), "
        "advantages=loo (scale_rewards=none), ratio=sequence, epsilon=[0.0003, 0.0004], log_ratio_clamp=10"
    )
    line = objective_line(_config(tmp_path, loss_type="grpo").objective)
    assert "loss_type=grpo, TRL's loss, advantages=trl (scale_rewards=group), ratio=token" in line


def reward_divides(completions, answer, **_):
    return [1.0 / 0 if int(a) % 2 == 0 else 0.0 for a in answer]  # fails on the rows of an even sum


def reward_needs_solution(completions, solution, **_):
    return [float(c == s) for c, s in zip(completions, solution, strict=True)]


def test_the_objective_is_printed_once_when_training_starts(tmp_path, capsys):
    trainer = reward_trainer(tmp_path, lambda completions, **_: [float(len(c) % 2) for c in completions])
    trainer.train()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Objective: ")]
    assert lines == [objective_line(trainer.objective)]


def test_a_raising_reward_names_the_function_the_row_and_the_columns(tmp_path):
    trainer = reward_trainer(tmp_path, reward_divides)
    with pytest.raises(RewardFunctionError) as error:
        trainer.train()
    message = str(error.value)
    assert message.startswith("reward function 'reward_divides' raised ZeroDivisionError: float division by zero")
    row = re.search(r"on row (\d+) of a batch of 16 \(prompt '(\d+)\+(\d+)=", message)
    assert row and (int(row[2]) + int(row[3])) % 2 == 0, message  # the row shown is one that fails
    assert "keyword arguments: answer, completion_ids, completions, prompts." in message
    assert isinstance(error.value.__cause__, ZeroDivisionError)


def test_a_reward_missing_a_column_names_the_columns_there_are(tmp_path):
    trainer = reward_trainer(tmp_path, reward_needs_solution)
    with pytest.raises(RewardFunctionError) as error:
        trainer.train()
    message = str(error.value)
    assert "'reward_needs_solution' raised TypeError" in message and "on row 0" in message
    assert "columns as keyword arguments: answer, completion_ids, completions, prompts" in message
    assert message.endswith("there is no column 'solution'.")


def test_a_constant_reward_with_dynamic_sampling_says_the_reward_is_constant(tmp_path):
    trainer = reward_trainer(
        tmp_path, lambda completions, **_: [1.0] * len(completions), dynamic_sampling=True, max_sampling_rounds=2
    )
    trainer.train()
    reason = trainer.nothing_trained()
    assert reason.startswith("the reward is constant over every group") and "returned 1 for every" in reason
    assert "cannot help" in reason and "Raise max_sampling_rounds" not in reason
    rows = dict(summary_rows(trainer.state.log_history, trainer.run_facts()))
    assert rows["entropy (mean, nats/token)"] == "—" and rows["clip fraction (answers, mean)"] == "—"


def test_padding_advice_stays_when_the_reward_does_vary():
    varied = RewardTally(calls=1, completions=4, low=0.0, high=1.0)
    reason = nothing_trained_reason(3, 0, [], {"r": varied}, padding="max_sampling_rounds=2")
    assert "Raise max_sampling_rounds" in reason


def test_unmeasured_metrics_show_a_dash_not_zero():
    history = [
        {"loss": 0.0, "entropy": 0.0, "clip_ratio/region_answers": 0.0, "tokens/valid": 0.0},
        {"loss": 0.1, "entropy": 2.0, "clip_ratio/region_answers": 0.5, "tokens/valid": 12.0},
    ]
    facts = RunFacts(global_step=2, generated_tokens=0, effective_tokens=0)
    rows = dict(summary_rows(history, facts))
    assert rows["entropy (mean, nats/token)"] == "2.0000" and rows["clip fraction (answers, mean)"] == "0.5000"
    assert dict(summary_rows(history[:1], facts))["entropy (mean, nats/token)"] == "—"
