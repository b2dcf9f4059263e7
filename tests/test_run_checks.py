"""Degenerate input fails early naming its cause, and a run that trains nothing says so (run_checks)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from datasets import Dataset, IterableDataset

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.cli import train as train_cli
from trl_loo_gspo.trainer.checks import RewardTally, check_dataset, check_reward_output, nothing_trained_reason
from trl_loo_gspo.trainer.reporting import summary_rows

from .helpers import base_kwargs, reward_trainer, train_dataset

# ------------------------------------------------------------------ pure checks


def test_a_dataset_without_prompt_names_its_columns_and_the_rename():
    data = Dataset.from_dict({"question": ["1+1="], "answer": ["2"]})
    with pytest.raises(ValueError, match=r"train_dataset has no 'prompt' column \(columns: question, answer\)") as e:
        check_dataset(data, "train_dataset", require_rows=True)
    assert "rename_column('question', 'prompt')" in str(e.value)
    with pytest.raises(ValueError, match=r"eval_dataset\['val'\] has no 'prompt'"):
        check_dataset({"val": data}, "eval_dataset", require_rows=False)


def test_an_empty_dataset_is_refused_for_training_only():
    empty = Dataset.from_dict({"prompt": [], "answer": []})
    with pytest.raises(ValueError, match=r"train_dataset is empty \(0 rows\)"):
        check_dataset(empty, "train_dataset", require_rows=True)
    check_dataset(empty, "eval_dataset", require_rows=False)
    check_dataset(None, "train_dataset", require_rows=True)


def test_a_streaming_dataset_is_not_checked_up_front():
    stream = IterableDataset.from_generator(lambda: iter([{"question": "x"}]))
    check_dataset(stream, "train_dataset", require_rows=True)  # columns unknown until read: no false alarm


@pytest.mark.parametrize(
    "output, message",
    [
        (None, r"'f' returned None instead of a list of 2 rewards"),
        ("1.0", r"'f' returned a str, not a list of 2 rewards"),
        ({"a": 1.0}, r"'f' returned a dict"),
        (["1.0", 0.0], r"'f' returned '1.0' \(str\) for completion 0: .* convert it with float\(\)"),
        ([0.0, [1.0]], r"'f' returned \[1.0\] \(list\) for completion 1"),
        ([1.0], r"'f' returned 1 rewards for 2 completions"),
    ],
)
def test_bad_reward_outputs_name_the_function(output, message):
    with pytest.raises((TypeError, ValueError), match=message):
        check_reward_output(output, "f", 2)


@pytest.mark.parametrize(
    "output",
    [
        [1.0, None],
        (0, 1),
        [True, False],
        np.array([0.5, 1.0]),
        torch.tensor([0.5, 1.0]),
        [np.float32(1), torch.tensor(2.0)],
    ],
)
def test_good_reward_outputs_pass(output):
    check_reward_output(output, "f", 2)


def test_tally_counts_none_and_nan_apart():
    tally = RewardTally()
    tally.add([1.0, None, float("nan"), 0.0])
    tally.add(np.array([math.nan, 1.0]))
    assert (tally.calls, tally.completions, tally.none, tally.nan) == (2, 6, 1, 2)


def test_nothing_trained_reasons():
    unscorable = [{"rewards/frac_unscorable": 1.0}, {"rewards/frac_unscorable": 1.0}]
    assert "no optimizer step" in nothing_trained_reason(0, 0, [], {})
    assert nothing_trained_reason(3, 10, unscorable, {}) is None  # some answer carried a weight
    tally = RewardTally(calls=2, completions=32, none=32)
    assert "every answer was unscorable ('f' returned None/NaN for 32 of 32)" in nothing_trained_reason(
        3, 0, unscorable, {"f": tally}
    )
    assert "no group carried a comparison signal" in nothing_trained_reason(3, 0, [{"rewards/frac_unscorable": 0}], {})
    # a run shorter than logging_steps logs no metric: the tallies decide
    assert "every answer was unscorable" in nothing_trained_reason(3, 0, [], {"f": tally})
    scored = RewardTally(calls=2, completions=32, none=0)
    assert "no group carried a comparison signal" in nothing_trained_reason(3, 0, [], {"f": scored})


# ------------------------------------------------------------------ in the trainer


def test_dataset_problems_fail_before_the_model_is_loaded(tmp_path):
    args = LooGspoConfig(**base_kwargs(str(tmp_path)))
    no_prompt = train_dataset(4).rename_column("prompt", "problem")
    with pytest.raises(ValueError, match="has no 'prompt' column"):  # the model path does not exist: not reached
        LooGspoTrainer("/nonexistent/model", lambda completions, **_: [0.0] * len(completions), args, no_prompt)
    with pytest.raises(ValueError, match="train_dataset is empty"):
        LooGspoTrainer(
            "/nonexistent/model", lambda completions, **_: [], args=args, train_dataset=train_dataset(4).select([])
        )


def reward_strings(completions, **_):
    return ["1"] * len(completions)


def reward_bare_none(completions, **_):
    return None


async def reward_async_strings(completions, **_):
    return ["1"] * len(completions)


@pytest.mark.parametrize(
    "reward, message",
    [
        (reward_strings, r"'reward_strings' returned '1' \(str\) for completion 0"),
        (reward_bare_none, r"'reward_bare_none' returned None instead of a list"),
        (reward_async_strings, r"'reward_async_strings' returned '1' \(str\)"),
    ],
)
def test_a_bad_reward_function_is_named_at_the_first_step(tmp_path, reward, message):
    trainer = reward_trainer(tmp_path, reward)
    with pytest.raises((TypeError, ValueError), match=message):
        trainer.train()
    assert trainer.reward_funcs == [reward]  # the user's list is left as it was


def reward_none(completions, **_):
    return [None] * len(completions)


def test_an_all_unscorable_run_says_it_trained_nothing(tmp_path, caplog, capsys):
    trainer = reward_trainer(tmp_path, reward_none, max_steps=2, summary_table=True)
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.checks"):
        trainer.train()
    assert trainer.state.global_step == 2
    messages = [r.getMessage() for r in caplog.records]
    assert sum("could be scored" in m and "'reward_none' returned None for 16" in m for m in messages) == 1  # once
    assert any(m.startswith("This run trained nothing: every answer was unscorable ('reward_none'") for m in messages)
    rows = dict(summary_rows(trainer.state.log_history, trainer.run_facts()))
    assert rows["TRAINED NOTHING"].startswith("every answer was unscorable")
    assert rows["unscorable answers (mean)"] == "1.0000"
    assert "TRAINED NOTHING" in capsys.readouterr().out


def reward_constant(completions, **_):
    return [1.0] * len(completions)


def test_a_run_without_comparison_signal_says_so(tmp_path, caplog):
    trainer = reward_trainer(tmp_path, reward_constant, max_steps=1)
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.checks"):
        trainer.train()
    assert "the reward is constant over every group" in trainer.nothing_trained()
    assert any("This run trained nothing" in r.getMessage() for r in caplog.records)


def reward_half_nan(completions, **_):
    return [math.nan if i % 2 else float(i % 4 == 0) for i in range(len(completions))]


def test_nan_rewards_are_named_once_and_the_run_still_trains(tmp_path, caplog):
    trainer = reward_trainer(tmp_path, reward_half_nan, max_steps=2)
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.trainer.checks"):
        trainer.train()
    nan_notes = [r.getMessage() for r in caplog.records if "returned NaN" in r.getMessage()]
    assert len(nan_notes) == 1
    assert nan_notes[0].startswith("reward function 'reward_half_nan' returned NaN for 8 of 16")
    assert trainer.nothing_trained() is None and trainer.effective_tokens_total > 0
    rows = dict(summary_rows(trainer.state.log_history, trainer.run_facts()))
    assert rows["unscorable answers (mean)"] == "0.5000" and "TRAINED NOTHING" not in rows


def test_train_cli_exits_3_when_nothing_was_trained(monkeypatch, capsys):
    class Finished:
        def nothing_trained(self):
            return "every answer got advantage 0"

    monkeypatch.setattr(train_cli, "run", lambda *a: Finished())
    code = train_cli.main(["--model_name_or_path", "m", "--dataset_name", "d", "--output_dir", "/tmp/unused"])
    assert code == train_cli.NOTHING_TRAINED == 3
    assert "the run finished but trained nothing: every answer got advantage 0" in capsys.readouterr().err


def test_reward_functions_replaced_after_construction_are_the_ones_called_and_checked(tmp_path):
    trainer = reward_trainer(tmp_path, reward_constant, max_steps=1)
    trainer.reward_funcs = [reward_strings]  # TRL lets a user swap them; the checked list follows
    with pytest.raises(TypeError, match="'reward_strings' returned '1'"):
        trainer.train()
