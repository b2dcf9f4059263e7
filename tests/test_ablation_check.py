"""`trl-loo-gspo ablate` checks the whole plan before the first run: every key at every level, every run's config
(the baseline's too), all problems at once with the plan, the run and the key — and trains nothing."""

import pytest
import yaml

from trl_loo_gspo.experiment.ablation import runner
from trl_loo_gspo.experiment.ablation.plan import AblationPlan


@pytest.fixture
def no_training(monkeypatch):
    """Any attempt to build a policy or a trainer fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the plan check built a policy or a trainer")

    import trl_loo_gspo.demo.policy as policy

    monkeypatch.setattr(policy, "load_or_build_policy", forbidden)
    monkeypatch.setattr(runner, "_trainer_cls", forbidden)


def write(tmp_path, plan):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


BASE = {
    "output_dir": "unused",
    "task": "demo-addition",
    "seeds": [0, 1],
    "rollout_tokens": 1000,
    "baseline": {"name": "grpo", "config": {}},
    "variants": [{"name": "loo_gspo", "config": {}}],
}


def test_misspelled_keys_at_every_level_are_all_reported_with_a_close_match(tmp_path, no_training):
    plan = {
        **BASE,
        "rollout_token": 5,  # plan level
        "common": {"learning_rat": 1e-4},  # common config
        "variants": [
            {"name": "full", "confg": {"dynamic_sampling": True}},  # variant level: silently ignored before
            {"name": "loo", "config": {"advantage_estimatr": "loo"}},  # variant config
        ],
    }
    with pytest.raises(ValueError) as error:
        AblationPlan.from_yaml(write(tmp_path, plan))
    text = str(error.value)
    assert "4 problem(s), nothing was run" in text
    assert "plan: unknown key 'rollout_token' (did you mean 'rollout_tokens'?)" in text
    assert "common: unknown key 'learning_rat' (did you mean 'learning_rate'?)" in text
    assert "variant 'full': unknown key 'confg' (did you mean 'config'?)" in text
    assert "variant 'loo' config: unknown key 'advantage_estimatr' (did you mean 'advantage_estimator'?)" in text


def test_every_runs_config_is_built_before_the_first_run(tmp_path, no_training):
    plan = {
        **BASE,
        "baseline": {"name": "grpo", "config": {"loss_aggregation": "token_total"}},  # not with TRL's loss
        "variants": [
            {"name": "ok", "config": {}},
            {"name": "bad-estimator", "config": {"advantage_estimator": "loooo"}},
            {"name": "bad-clip", "config": {"log_ratio_clamp": 1e-6}},
        ],
    }
    with pytest.raises(ValueError) as error:
        AblationPlan.from_yaml(write(tmp_path, plan))
    text = str(error.value)
    assert "3 problem(s)" in text
    assert "baseline: loss_aggregation='token_total' needs our loss" in text
    assert "variant 'bad-estimator': advantage_estimator='loooo' is not a registered name" in text
    assert "variant 'bad-clip': log_ratio_clamp=1e-06 must be wider" in text
    assert "variant 'ok'" not in text


def test_a_valid_plan_passes_the_check(tmp_path, no_training):
    plan = AblationPlan.from_yaml(write(tmp_path, BASE))
    assert [name for name, *_ in plan.runs()] == ["grpo", "loo_gspo", "grpo", "loo_gspo"]


def test_the_command_line_prints_the_problems_without_a_traceback(tmp_path, no_training, capsys):
    from trl_loo_gspo.cli import main

    plan = {**BASE, "variants": [{"name": "loo_gspo", "confg": {}}]}
    assert main(["ablate", str(write(tmp_path, plan))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-loo-gspo ablate: error: ablation plan") and "did you mean 'config'?" in err
    assert "Traceback" not in err
    assert main(["ablate", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
