"""A first run on a CPU machine: the README's snippet, ``LooGspoTrainer(args=None)`` and ``trl-loo-gspo train``
without flags work or say what is missing, and ``train --help`` starts with the usage the README teaches."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.cli.train import main as train_main
from trl_loo_gspo.config import precision
from trl_loo_gspo.experiment.build import make_parser

from .helpers import make_model_and_tokenizer, train_dataset

README = Path(__file__).resolve().parent.parent / "README.md"
no_bf16_here = pytest.mark.skipif(precision.bf16_supported(False), reason="this machine has a bf16 accelerator")


@pytest.fixture
def fresh_note(monkeypatch):
    monkeypatch.setattr(precision, "_NOTED", False)


@pytest.mark.parametrize(
    "fields, supported, expected",
    [
        (dict(bf16=None, fp16=False, use_cpu=False), False, False),  # unset, no accelerator: float32
        (dict(bf16=None, fp16=False, use_cpu=False), True, None),  # a bf16 GPU: TRL's default stays
        (dict(bf16=True, fp16=False, use_cpu=False), False, True),  # the user's choice stays (and fails later)
        (dict(bf16=None, fp16=True, use_cpu=False), False, None),  # fp16 chosen
    ],
)
def test_resolve_bf16_only_fills_an_unset_value_without_accelerator(
    fields, supported, expected, monkeypatch, fresh_note
):
    monkeypatch.setattr(precision, "bf16_supported", lambda use_cpu: supported)
    args = SimpleNamespace(**fields)
    precision.resolve_bf16(args)
    assert args.bf16 is expected


@no_bf16_here
def test_config_without_precision_trains_in_float32_and_says_so_once(tmp_path, caplog, fresh_note):
    with caplog.at_level(logging.WARNING, logger="trl_loo_gspo.config.precision"):
        first = LooGspoConfig(output_dir=str(tmp_path), report_to=[])
        second = LooGspoConfig(output_dir=str(tmp_path), report_to=[])
    assert first.bf16 is False and second.bf16 is False and first.mixed_precision == "no"
    notes = [r.getMessage() for r in caplog.records if "bf16" in r.getMessage()]
    assert notes == [precision.CPU_PRECISION_NOTE]


@no_bf16_here
def test_readme_drop_in_arguments_construct_on_cpu(tmp_path, monkeypatch):
    line = next(ln for ln in README.read_text().splitlines() if ln.startswith("args = LooGspoConfig("))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"LooGspoConfig": LooGspoConfig}
    exec(line.split("  #")[0], namespace)  # the README's own line, comment dropped
    assert namespace["args"].bf16 is False


@no_bf16_here
def test_trainer_without_args_builds_on_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, tokenizer = make_model_and_tokenizer()
    model.config._name_or_path = "tiny/qwen"
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [1.0] * len(completions),
        args=None,
        train_dataset=train_dataset(8),
        processing_class=tokenizer,
    )
    assert trainer.args.output_dir.endswith("qwen-LooGspo") and trainer.args.bf16 is False


def test_train_without_model_names_what_is_required(capsys):
    assert train_main([]) == 2
    err = capsys.readouterr().err
    assert "--model_name_or_path" in err and "--dataset_name" in err and "required" in err
    assert err.startswith("trl-loo-gspo train: error: ") and "Traceback" not in err
    assert len(err.splitlines()) == 1  # one message, not 1,500 lines of flags


def test_train_with_model_but_no_data_names_only_the_data(capsys):
    assert train_main(["--model_name_or_path", "some/model"]) == 2
    err = capsys.readouterr().err
    assert "--dataset_name" in err and "--model_name_or_path (" not in err


def _help(flag: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        make_parser().parse_args_and_config(args=[flag])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_help_starts_with_the_readme_usage_then_groups(capsys):
    text = _help("--help", capsys)
    assert text.startswith("usage: trl-loo-gspo train --config RECIPE.yaml")
    assert "--config RECIPE.yaml" in text.split("\n\n")[0] and "--help-all" in text
    titles = [ln for ln in text.splitlines() if re.match(r"^\S.*:$", ln) and not ln.startswith("usage")]
    order = ["task, data", "the method", "model, dtype", "GRPO arguments", "training arguments"]
    positions = [next(i for i, t in enumerate(titles) if t.startswith(o)) for o in order]
    assert positions == sorted(positions), titles
    assert len(text.splitlines()) < 450  # the stock TrlParser help is ~1,600 lines


def test_help_names_every_flag_and_help_all_describes_them(capsys):
    short = _help("--help", capsys)
    full = _help("--help-all", capsys)
    from trl import ModelConfig

    from trl_loo_gspo.experiment.build import LooGspoScriptArguments

    for cls in (LooGspoScriptArguments, LooGspoConfig, ModelConfig):
        for f in dataclasses.fields(cls):
            if f.init:
                assert re.search(rf"--{f.name}\b", short), f"--{f.name} missing from --help"
                assert re.search(rf"--{f.name}\b", full), f"--{f.name} missing from --help-all"
    # our method flags are described in full in the short help, TRL's are listed by name
    assert "leave-one-out" in short and "Whether to use bf16" not in short and "Whether to use bf16" in full


@no_bf16_here
def test_readme_offline_drop_in_trains_on_the_local_setup(tmp_path, monkeypatch):
    from trl_loo_gspo.demo.local import local_setup

    text = README.read_text()
    start = text.index("```python", text.index("Offline, on a CPU, the same lines run")) + len("```python")
    block = text[start : text.index("```", start)]
    assert "/tmp/try" in block and "trl-loo-gspo local-setup /tmp/try" in text
    local_setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(block.replace("/tmp/try", str(tmp_path)), namespace)  # the README's own lines, on this test's folder
    assert namespace["trainer"].state.global_step == 2
