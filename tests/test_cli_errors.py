"""The ``trl-loo-gspo`` command line on a user's mistakes: one ``error:`` line and exit status 2 (no traceback,
``--debug`` shows it), recipe values unset or overridden from the command line, fast ``--help``, and the offline /
no-GPU route of the recipes (issue #36)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from trl_loo_gspo.algorithms import aggregation
from trl_loo_gspo.cli import main
from trl_loo_gspo.cli.help_cache import SHIPPED, cached_help, help_key, live_help, shipped_key, sources_key
from trl_loo_gspo.config.objective import TRL_LOSS_TYPES
from trl_loo_gspo.experiment.build import make_parser
from trl_loo_gspo.trainer.checkpoints import CheckpointError, check_checkpoint

from .recipe_fixtures import RECIPES, REPO, cpu_overrides, save_tiny_model, write_raw

MATH = str(REPO / "recipes" / "math-lora.yaml")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"), chat_template=False)


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def _one_error_line(code: int, err: str, prog: str = "trl-loo-gspo train") -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error: ")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------------------------------ train: user errors


def test_a_missing_recipe_file_is_named(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    line = _one_error_line(*_run(["train", "--config", "recipes/math-lora.yml"], capsys))
    assert "recipe file not found: --config recipes/math-lora.yml" in line and "recipes/math-lora.yaml" in line


def test_a_recipe_that_is_not_yaml_names_the_line(tmp_path, capsys):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("task: math\nlearning_rate: [1e-5\n")
    line = _one_error_line(*_run(["train", "--config", str(recipe)], capsys))
    assert f"recipe {recipe} is not valid YAML" in line


def test_a_yaml_key_typo_suggests_the_known_key(tmp_path, capsys):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("task: math\ndynamic_samplng: true\n")
    line = _one_error_line(*_run(["train", "--config", str(recipe)], capsys))
    assert "unknown key 'dynamic_samplng' (did you mean dynamic_sampling?)" in line and str(recipe) in line


def test_a_flag_typo_suggests_the_known_flag(capsys):
    line = _one_error_line(*_run(["train", "--config", MATH, "--dynamic_samplng", "true"], capsys))
    assert "unknown flag --dynamic_samplng (did you mean --dynamic_sampling?)" in line


def test_a_recipe_without_config_suggests_it(capsys):
    line = _one_error_line(*_run(["train", MATH], capsys))
    assert f"unexpected argument '{MATH}' (did you mean --config {MATH}?)" in line


def test_bf16_on_a_machine_without_a_bf16_gpu_names_the_fix(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the recipe's bf16 is accepted")
    line = _one_error_line(*_run(["train", "--config", MATH], capsys))
    assert f"bf16=true (set by the recipe {MATH})" in line and "add --bf16 false --dtype float32 to" in line
    assert "use_cpu if you want" not in line  # not transformers' advice


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--num_generations", "7"], "must be divisible by num_generations (7)"),
        (
            ["--loss_type", "grpo", "--loss_aggregation", "token_total"],
            "loss_aggregation='token_total' needs our loss",
        ),
        (["--loss_type", "loo_gspo", "--delta", "2.0"], "contradicts delta=2.0"),
        (["--loss_aggregation", "nope"], "loss_aggregation='nope' is not a registered name"),
        (["--learning_rate", "fast"], "invalid float value: 'fast'"),
    ],
    ids=["num_generations", "trl-loss-with-our-aggregation", "our-loss-with-trl-option", "bad-choice", "bad-type"],
)
def test_bad_and_contradictory_values(flags, expected, capsys):
    line = _one_error_line(*_run(["train", "--config", MATH, "--bf16", "false", *flags], capsys))
    assert expected in line


def test_an_unwritable_output_directory_is_named(tmp_path, capsys, tiny_model_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["train", "--model_name_or_path", str(tiny_model_dir), "--dataset_name", "x.jsonl"]
    line = _one_error_line(*_run([*argv, "--output_dir", str(blocker / "out")], capsys))
    assert f"output_dir {blocker / 'out'} cannot be written" in line


def test_a_hub_model_offline_names_the_field_and_the_local_route(capsys, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    data = write_raw(tmp_path, "math")
    argv = ["train", "--config", MATH, "--bf16", "false", "--dataset_name", str(data), "--output_dir", str(tmp_path)]
    line = _one_error_line(*_run(argv, capsys))
    assert "model_name_or_path='Qwen/Qwen2.5-Math-1.5B-Instruct'" in line and "HF_HUB_OFFLINE is set" in line
    assert "--model_name_or_path <model folder>" in line and "local-setup" in line and "dataset_name" not in line


def test_a_hub_dataset_offline_and_not_cached_names_the_field_and_the_local_route(
    capsys, monkeypatch, tmp_path, tiny_model_dir
):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # nothing cached
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    argv = [*cpu_overrides(tiny_model_dir, tmp_path / "out"), "--dataset_name", "nobody/no-such-dataset"]
    line = _one_error_line(*_run(["train", "--config", MATH, *argv], capsys))
    assert "dataset_name='nobody/no-such-dataset' could not be loaded" in line
    assert "--dataset_name <file.jsonl>" in line and "local-setup" in line


def test_an_unreachable_hub_is_tried_once(capsys, monkeypatch, tmp_path):
    import huggingface_hub

    tries = []

    class Refused:
        def head(self, url, timeout):
            tries.append(url)
            raise ConnectionError("connection refused")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_session", lambda: Refused())
    argv = ["train", "--config", MATH, "--bf16", "false", "--output_dir", str(tmp_path)]
    line = _one_error_line(*_run(argv, capsys))
    assert len(tries) == 1
    assert "model_name_or_path='Qwen/Qwen2.5-Math-1.5B-Instruct' and dataset_name='openai/gsm8k'" in line
    assert "connection refused" in line and "--dataset_name <file.jsonl>" in line


def test_a_damaged_checkpoint_names_the_folder_and_the_file(tmp_path, capsys, tiny_model_dir):
    checkpoint = _checkpoint(tmp_path)
    (checkpoint / "optimizer.pt").write_bytes((checkpoint / "optimizer.pt").read_bytes()[:-40])
    argv = [
        "train",
        *cpu_overrides(tiny_model_dir, tmp_path / "out"),
        "--dataset_name",
        str(write_raw(tmp_path, "math")),
        "--resume_from_checkpoint",
        str(checkpoint),
    ]
    line = _one_error_line(*_run(argv, capsys))
    assert f"checkpoint {checkpoint}: optimizer.pt is damaged" in line and "weights_only" not in line


def test_debug_shows_the_traceback(capsys, monkeypatch):
    with pytest.raises(Exception, match="unknown flag"):
        main(["train", "--config", MATH, "--dynamic_samplng", "true", "--debug"])
    monkeypatch.setenv("TRL_LOO_GSPO_DEBUG", "1")
    with pytest.raises(Exception, match="recipe file not found"):
        main(["train", "--config", "missing.yaml"])


def test_the_spawned_command_prints_one_line_and_exits_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("TRL_LOO_GSPO_DEBUG", None)
    cases = [["train", "--config", str(tmp_path / "missing.yaml")], ["demo", "--minutes", "-1"]]
    for argv in cases:
        child = subprocess.run([sys.executable, "-m", "trl_loo_gspo", *argv], capture_output=True, text=True, env=env)
        assert child.returncode == 2 and "Traceback" not in child.stderr, child.stderr
        assert "error: " in child.stderr.splitlines()[-1]


# ---------------------------------------------------------------------------------------- checkpoints (unit)


def _checkpoint(root: Path) -> Path:
    folder = root / "checkpoint-2"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    torch.save({"state": {0: {"exp_avg": torch.ones(64)}}}, folder / "optimizer.pt")
    torch.save({"lr": 1.0}, folder / "scheduler.pt")
    from safetensors.torch import save_file

    save_file({"w": torch.ones(32)}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize(
    "name, damage",
    [
        ("optimizer.pt", lambda b: b[: len(b) // 2]),
        ("optimizer.pt", lambda b: b[:-200] + bytes(200)),  # the tail zeroed: the archive's directory is gone
        ("model.safetensors", lambda b: b[:-16]),
        ("trainer_state.json", lambda b: b[:5]),
    ],
)
def test_check_checkpoint_names_the_damaged_file(tmp_path, name, damage):
    folder = _checkpoint(tmp_path)
    check_checkpoint(folder)  # intact: no error
    path = folder / name
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError) as error:
        check_checkpoint(folder)
    message = str(error.value)
    assert str(folder) in message and name in message and "weights_only" not in message


def test_check_checkpoint_names_a_missing_or_foreign_folder(tmp_path):
    with pytest.raises(CheckpointError, match="no such directory"):
        check_checkpoint(tmp_path / "checkpoint-9")
    with pytest.raises(CheckpointError, match="no trainer_state.json"):
        check_checkpoint(tmp_path)


# ------------------------------------------------------------------------------------------------ demo errors


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--rollout-tokens", "0"], "--rollout-tokens: must be a whole number > 0"),
        (["--rollout-tokens", "-5"], "--rollout-tokens: must be a whole number > 0"),
        (["--minutes", "0"], "--minutes: must be > 0"),
        (["--minutes", "1", "--rollout-tokens", "10"], "not allowed with argument"),
        (["--learning-rate", "-1"], "--learning-rate: must be > 0"),
    ],
)
def test_bad_demo_budgets_exit_2(flags, expected, capsys):
    with pytest.raises(SystemExit) as stop:  # argparse's own errors: usage, then `error:`
        main(["demo", *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and expected in err and "Traceback" not in err


def test_an_unwritable_demo_output_directory_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = _one_error_line(*_run(["demo", "--output-dir", str(blocker / "out")], capsys), "trl-loo-gspo demo")
    assert f"--output_dir {blocker / 'out'}" in line


def test_a_bad_ablation_plan_is_one_line(tmp_path, capsys):
    line = _one_error_line(*_run(["ablate", str(tmp_path / "missing.yaml")], capsys), "trl-loo-gspo ablate")
    assert "missing.yaml" in line


# ------------------------------------------------------------------------------- unsetting recipe values


def _parse(argv: list[str]):
    return make_parser().parse_args_and_config(args=argv)


def _recipe_keys():
    for recipe in RECIPES:
        for key in yaml.safe_load(recipe.read_text()):
            yield pytest.param(recipe, key, id=f"{recipe.stem}:{key}")


def _base(recipe: Path, key: str, tmp_path: Path) -> list[str]:
    """A CPU parse of ``recipe`` without the overrides of ``key`` (so that the key keeps the recipe's value)."""
    overrides = ["--bf16", "false", "--output_dir", str(tmp_path), "--model_name_or_path", "local/model"]
    pairs = list(zip(overrides[::2], overrides[1::2], strict=True))
    return ["--config", str(recipe), *[x for flag, value in pairs if flag != f"--{key}" for x in (flag, value)]]


@pytest.mark.parametrize("recipe, key", list(_recipe_keys()))
def test_every_recipe_value_can_be_unset_from_the_command_line(recipe, key, tmp_path):
    """``--KEY None`` parses to what the recipe without its ``KEY:`` line parses to."""
    settings = yaml.safe_load(recipe.read_text())
    del settings[key]
    without = tmp_path / recipe.name
    without.write_text(yaml.safe_dump(settings))
    base = _base(recipe, key, tmp_path)
    unset = [dataclasses.asdict(args) for args in _parse([*base, f"--{key}", "None"])]
    expected = [dataclasses.asdict(args) for args in _parse([*base[:1], str(without), *base[2:]])]
    holder = next(i for i, fields in enumerate(expected) if key in fields)
    assert unset[holder][key] == expected[holder][key]
    assert unset[1] == expected[1]  # the whole training config (its objective included)
    if key == "system_prompt":  # the chat-template case of issue #36: every spelling clears it
        for spelling in ("", "null"):
            assert _parse([*base, "--system_prompt", spelling])[0].system_prompt is None
        assert _parse([*base, f"--{key}=None"])[0].system_prompt is None


def test_a_recipe_value_can_be_overridden_by_each_spelling(tmp_path):
    base = _base(RECIPES[1], "", tmp_path)
    assert _parse([*base, "--reference_kl_logging_steps", "None"])[1].reference_kl_logging_steps is None
    assert _parse([*base, "--loss_aggregation", "sequence_mean"])[1].objective.loss_aggregation == "sequence_mean"
    assert _parse([*base, "--epsilon=1e-3"])[1].objective.epsilon_low == 1e-3


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
@pytest.mark.parametrize("loss_type", TRL_LOSS_TYPES)
def test_a_trl_loss_type_on_the_command_line_replaces_the_recipes_objective(recipe, loss_type, tmp_path, capsys):
    training_args = _parse([*_base(recipe, "", tmp_path), "--loss_type", loss_type])[1]
    objective = training_args.objective
    assert objective.loss_type == loss_type
    assert training_args.loss_aggregation is None and training_args.log_ratio_clamp is None
    if not objective.uses_own_loss:
        assert objective.epsilon_low == 0.2  # TRL's own clip range, not the recipe's GSPO-scale 3e-4
    assert "the recipe's advantage_estimator='loo'" in capsys.readouterr().err


def test_objective_fields_given_with_the_loss_type_are_kept(tmp_path):
    argv = [*_base(RECIPES[1], "", tmp_path), "--loss_type", "dapo", "--importance_sampling_level", "sequence"]
    training_args = _parse([*argv, "--epsilon", "3e-4", "--epsilon_high", "4e-4"])[1]
    assert training_args.epsilon == 3e-4 and training_args.objective.uses_own_loss  # TRL's GSPO form: our loss


def test_a_registered_aggregation_is_accepted_by_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setitem(aggregation.AGGREGATIONS, "my_mean", aggregation.AGGREGATIONS["sequence_mean"])
    training_args = _parse([*_base(RECIPES[1], "", tmp_path), "--loss_aggregation", "my_mean"])[1]
    assert training_args.objective.loss_aggregation == "my_mean"
    training_args = _parse([*_base(RECIPES[1], "", tmp_path), "--loss_aggregation", "None"])[1]
    assert training_args.objective.loss_aggregation == "token_total"  # unset: the default of our loss


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipes_use_transformers_current_spelling_without_a_deprecation_warning(recipe, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training_args = _parse(_base(recipe, "", tmp_path))[1]
    assert training_args.activation_checkpointing is True and training_args.gradient_checkpointing is True
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]


def test_the_new_spelling_is_read_as_the_old_by_an_older_transformers():
    parser = make_parser()
    del parser._accepts_none["activation_checkpointing"]  # as on transformers < 5.23
    parser.set_defaults_with_config(activation_checkpointing=True)
    action = next(a for a in parser._actions if a.dest == "gradient_checkpointing")
    assert action.default is True


# ----------------------------------------------------------------------------------------------------- --help


def test_the_shipped_train_help_is_current():
    shipped = shipped_key() or "-"
    assert shipped.split("-")[0] == sources_key(), (
        f"{SHIPPED.name} is stale (the flags' sources changed): run `python -m trl_loo_gspo.cli.help_cache`"
    )
    if shipped != help_key():  # built with other TRL/transformers versions: never shown here, built live instead
        assert cached_help() is None or cached_help() == live_help()
        pytest.skip(f"{SHIPPED.name} was built with other library versions than these (key {shipped})")
    assert cached_help() == live_help()


HELP_PROBE = """
import contextlib, io, json, sys
from trl_loo_gspo.cli import main
answers = {}
for command in ([], ["train"], ["demo"], ["ablate"], ["local-setup"]):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            code = main([*command, "--help"])
        except SystemExit as stop:
            code = stop.code
    answers[" ".join(command) or "(none)"] = [code, buffer.getvalue().startswith("usage:")]
heavy = [name for name in ("torch", "transformers", "trl", "datasets", "accelerate", "peft") if name in sys.modules]
print(json.dumps({"answers": answers, "heavy": heavy}))
"""


def test_help_of_every_command_imports_no_heavy_library(tmp_path):
    """``--help`` of every command answers from lazy imports (no torch, transformers, TRL, ...): what makes it fast on
    any machine; the time itself is not asserted (no wall-clock thresholds in tests). One interpreter asks every
    command in turn. Where the shipped train help was built with other library versions, one first run builds it live
    and caches it (that run imports the libraries: it is the warm-up, not the probe)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TRL_LOO_GSPO_CACHE": str(tmp_path)}
    if shipped_key() != help_key():
        warm = subprocess.run([sys.executable, "-m", "trl_loo_gspo", "train", "--help"], capture_output=True, env=env)
        assert warm.returncode == 0, warm.stderr
    child = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["answers"] == {name: [0, True] for name in ("(none)", "train", "demo", "ablate", "local-setup")}
    assert result["heavy"] == [], result
    if shipped_key() == help_key():  # the shipped copy fits these libraries: nothing built and cached
        assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------- the shipped local route


@pytest.mark.slow
def test_local_setup_writes_what_the_printed_command_trains_on_offline(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # nothing may come from the Hub
    assert main(["local-setup", str(tmp_path / "try")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"Wrote a tiny local model to {tmp_path / 'try' / 'model'}") for line in printed)
    argv = shlex.split(printed[-1])
    assert argv[:5] == ["trl-loo-gspo", "train", "--config", "recipes/math-lora.yaml", "--model_name_or_path"]
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    assert "Objective: loss_type=loo_gspo" in out and f"Model and card saved to {tmp_path / 'try' / 'out'}" in out
    assert (tmp_path / "try" / "out" / "adapter_model.safetensors").exists()


def test_ctrl_c_during_ablate_is_one_line_and_status_130(tmp_path, monkeypatch, capsys):
    # the fresh-clone walk-through (#46) met a 40-line traceback here; the finished runs' records stay on disk
    import trl_loo_gspo.experiment.ablation as ablation
    from trl_loo_gspo.cli.main import main

    def interrupted(plan, reuse_stale=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(ablation, "run_ablation", interrupted)
    plan = Path(__file__).resolve().parent.parent / "recipes" / "ablations" / "demo.yaml"
    status = main(["ablate", str(plan), "--output_dir", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == 130 and "Traceback" not in out + err
    assert out.strip().startswith("Interrupted (Ctrl-C)") and str(tmp_path / "out") in out and "continues" in out
