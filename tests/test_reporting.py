"""The registration record reaches the ``report_to`` trackers, and the end-of-training summary table."""

from __future__ import annotations

import json
import logging

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward
from trl_loo_gspo.trainer.reporting import RECORD_KEY, RunFacts, SummaryTable, send_record_to_trackers, summary_rows

from .helpers import base_kwargs, make_model_and_tokenizer


@pytest.mark.slow
def test_tensorboard_receives_the_record(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(str(tmp_path / "out"), max_steps=1)
    kwargs["report_to"] = ["tensorboard"]
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=addition_dataset(16),
        processing_class=tokenizer,
    )
    trainer.train()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    tag = f"{RECORD_KEY}/text_summary"
    assert tag in events.Tags()["tensors"], events.Tags()
    text = events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
    record = json.loads(text.split("```json\n")[1].split("\n```")[0])
    assert record == json.loads((tmp_path / "out" / "experiment.json").read_text())
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss", "train/tokens/generated_total", "train/clip_ratio/region_answers"} <= scalars, scalars


class _Config(dict):
    def update(self, values, allow_val_change=False):
        assert allow_val_change
        super().update(values)


class WandbCallback:  # same class name and attributes as transformers' integration callback
    def __init__(self):
        self._wandb = type("wandb", (), {"run": object(), "config": _Config()})()


class TrackioCallback:
    def __init__(self):
        self._initialized = True
        self._trackio = type("trackio", (), {"config": _Config()})()


class TensorBoardCallback:  # not set up yet: skipped, not an error
    tb_writer = None


def test_wandb_and_trackio_get_the_record_in_their_config_shape():
    record = {"task": "addition", "base_model": {"weights_sha256": "ab", "parameters": 5}, "seeds": [1, None]}
    wandb, trackio = WandbCallback(), TrackioCallback()
    reached = send_record_to_trackers([wandb, trackio, TensorBoardCallback(), object()], record)
    assert reached == ["WandbCallback", "TrackioCallback"]
    assert wandb._wandb.config == {RECORD_KEY: record}
    assert trackio._trackio.config == {  # trackio's config holds scalars: nested keys flattened
        f"{RECORD_KEY}/task": "addition",
        f"{RECORD_KEY}/base_model/weights_sha256": "ab",
        f"{RECORD_KEY}/base_model/parameters": 5,
        f"{RECORD_KEY}/seeds": "[1, null]",
    }


def test_a_failing_tracker_is_reported_not_raised(caplog):
    class WandbCallback:
        _wandb = type("wandb", (), {"run": object(), "config": None})()  # config.update raises AttributeError

    with caplog.at_level(logging.WARNING):
        assert send_record_to_trackers([WandbCallback()], {"task": "x"}) == []
    assert "Could not send the registration record to WandbCallback" in caplog.text


def test_summary_rows_from_a_log_history():
    facts = RunFacts(global_step=3, generated_tokens=1200, effective_tokens=900)
    history = [
        {"rollout_tokens": 0.0, "eval/pass_at_1": 0.25, "eval/pass_rate": 0.2},
        {"loss": 0.1, "reward": 0.2, "clip_ratio/region_answers": 0.1, "entropy": 2.0, "sampling/frac_filtered": 0.5},
        {"loss": 0.2, "reward": 0.6, "clip_ratio/region_answers": 0.3, "entropy": 1.0, "sampling/frac_filtered": 0.0},
        {"rollout_tokens": 1200.0, "eval/pass_at_1": 0.5, "eval/pass_rate": 0.45},
    ]
    rows = dict(summary_rows(history, facts))
    assert rows["optimizer steps"] == "3"
    assert rows["generated tokens"] == "1,200" and rows["effective tokens"] == "900"
    assert rows["reward (first → last logged)"] == "0.2000 → 0.6000"
    assert rows["clip fraction (answers, mean)"] == "0.2000"
    assert rows["entropy (mean, nats/token)"] == "1.5000"
    assert rows["filtered fraction (mean)"] == "0.2500"
    assert rows["groups with signal (mean)"] == "—"  # not logged: shown as missing, not as 0
    assert rows["validation pass rate (first → last)"] == "0.2000 → 0.4500"
    assert rows["validation pass@1 (first → last)"] == "0.2500 → 0.5000"


@pytest.mark.slow
def test_the_trainer_prints_the_summary_at_the_end(tmp_path, capsys):
    model, tokenizer = make_model_and_tokenizer()
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path), max_steps=2)),
        train_dataset=addition_dataset(16),
        processing_class=tokenizer,
    )
    trainer.train()
    table = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, SummaryTable))
    assert dict(table.rows)["optimizer steps"] == "2"
    assert "LOO-GSPO run summary" in capsys.readouterr().out
    off = LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward],
        args=LooGspoConfig(**base_kwargs(str(tmp_path), max_steps=1, summary_table=False)),
        train_dataset=addition_dataset(16),
        processing_class=tokenizer,
    )
    assert not any(isinstance(cb, SummaryTable) for cb in off.callback_handler.callbacks)
