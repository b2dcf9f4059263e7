"""Registries a config selects: ``policy_loss``, ``loss_aggregation`` and ``advantage_estimator`` resolve against
the live registries (config/objective.py), so a user-registered loss, aggregation and estimator train end to end,
from Python and from a recipe through ``trl-loo-gspo train`` (its ``plugins:`` are imported before the config is
checked)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

from . import registry_plugin as plugin
from .helpers import base_kwargs, make_model_and_tokenizer, param_delta, parity_trainer
from .recipe_fixtures import REPO, cpu_overrides, data_override, save_tiny_model

USER_NAMES = dict(policy_loss=plugin.LOSS, loss_aggregation=plugin.AGGREGATION, advantage_estimator=plugin.ESTIMATOR)


@pytest.mark.parametrize(
    ("field", "decorator"),
    [
        ("policy_loss", "register_loss"),
        ("loss_aggregation", "register_aggregation"),
        ("advantage_estimator", "register_advantage_estimator"),
    ],
)
def test_an_unknown_name_is_refused_naming_the_field_and_the_registered_names(tmp_path, field, decorator):
    with pytest.raises(ValueError, match=rf"{field}='nope' is not a registered name") as error:
        LooGspoConfig(str(tmp_path), bf16=False, **{field: "nope"})
    assert decorator in str(error.value)
    assert repr(USER_NAMES[field]) in str(error.value)  # the live registry: the user's name is listed


def test_unset_policy_loss_is_todays_loss_and_trl_losses_refuse_it(tmp_path):
    assert LooGspoConfig(str(tmp_path), bf16=False).objective.policy_loss == "response_clip"
    token = LooGspoConfig(str(tmp_path), bf16=False, loss_type="loo_gspo", importance_sampling_level="token")
    assert token.objective.policy_loss == "token_clip"
    assert LooGspoConfig(str(tmp_path), bf16=False, loss_type="grpo").objective.policy_loss is None
    with pytest.raises(ValueError, match="policy_loss='response_clip' needs our loss"):
        LooGspoConfig(str(tmp_path), bf16=False, loss_type="grpo", policy_loss="response_clip")
    with pytest.raises(ValueError, match="contradicts policy_loss='token_clip'"):
        LooGspoConfig(
            str(tmp_path), bf16=False, loss_type="dapo", importance_sampling_level="sequence", policy_loss="token_clip"
        )


@pytest.mark.slow
def test_a_user_registered_loss_aggregation_and_estimator_train_from_python(tmp_path):
    model, tokenizer = make_model_and_tokenizer()
    model0 = copy.deepcopy(model)
    args = LooGspoConfig(**base_kwargs(str(tmp_path), **USER_NAMES))
    objective = args.objective
    assert (objective.policy_loss, objective.loss_aggregation, objective.advantage_estimator) == tuple(
        USER_NAMES.values()
    )
    assert objective.denominator_count == "answers"  # the registered aggregation's count
    calls = dict(plugin.CALLS)
    trainer = parity_trainer(LooGspoTrainer, model, tokenizer, args)
    trainer.train()
    for name in USER_NAMES.values():
        assert plugin.CALLS[name] > calls.get(name, 0), name
    assert trainer.state.global_step == 1
    log = trainer.state.log_history[0]
    assert log["tokens/loss_denominator"] == int(log["tokens/loss_denominator"])  # a count of answers
    assert any(delta.abs().max() > 0 for delta in param_delta(trainer.model, model0).values())


@pytest.mark.slow
def test_a_user_registered_loss_aggregation_and_estimator_train_from_a_recipe(tmp_path):
    recipe = REPO / "recipes" / "math-lora.yaml"
    settings = yaml.safe_load(recipe.read_text())
    settings.update(USER_NAMES, plugins=[plugin.__name__])
    path = tmp_path / "user-recipe.yaml"
    path.write_text(yaml.safe_dump(settings))
    out, calls = tmp_path / "out", tmp_path / "calls.json"
    argv = ["--config", str(path), *cpu_overrides(save_tiny_model(tmp_path / "model"), out)]
    argv += data_override(recipe, tmp_path)
    env = {"OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "REGISTRY_PLUGIN_CALLS": str(calls)}
    result = subprocess.run(
        [sys.executable, "-m", "trl_loo_gspo", "train", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,  # the plugin module is tests.registry_plugin, importable from the repository root
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    counts = json.loads(calls.read_text())
    assert all(counts.get(name, 0) > 0 for name in USER_NAMES.values()), counts
    record = json.loads((out / "experiment.json").read_text())
    assert {key: record["config"][key] for key in USER_NAMES} == USER_NAMES
