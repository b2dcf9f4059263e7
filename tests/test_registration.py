"""Registration (method §2): experiment.json before training, and refusal of overlapping train/validation splits."""

import hashlib
import json
import os
from pathlib import Path

import pytest
from datasets import Dataset

import trl_loo_gspo
from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.tiny import addition_dataset, digit_fraction_reward
from trl_loo_gspo.records.registration import content_fingerprint, row_hashes, split_overlap, weights_fingerprint
from trl_loo_gspo.verifiers import MathVerifier
from trl_loo_gspo.verifiers.shaping import ShapedReward

from .helpers import base_kwargs, make_model_and_tokenizer


def test_content_fingerprint_is_order_independent_and_content_sensitive():
    a = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}])
    b = Dataset.from_list([{"prompt": "2+2=", "answer": "4"}, {"prompt": "1+1=", "answer": "2"}])
    c = Dataset.from_list([{"prompt": "2+2=", "answer": "5"}, {"prompt": "1+1=", "answer": "2"}])
    assert content_fingerprint(a)["sha256"] == content_fingerprint(b)["sha256"] != content_fingerprint(c)["sha256"]
    assert content_fingerprint(a)["rows"] == 2 and content_fingerprint(None) is None


def test_split_overlap_by_prompt_content():
    chat = [{"role": "user", "content": "x"}]
    train = Dataset.from_list([{"prompt": chat}, {"prompt": [{"role": "user", "content": "b"}]}])
    validation = Dataset.from_list([{"prompt": [{"role": "user", "content": "a"}]}, {"prompt": chat}])
    assert split_overlap(train, validation) == [1]
    plain = Dataset.from_list([{"prompt": "1+1="}, {"prompt": "2+2="}])
    assert split_overlap(plain, Dataset.from_list([{"prompt": "2+2="}, {"prompt": "3+3="}])) == [0]


def test_weights_fingerprint_changes_with_the_weights():
    model, _ = make_model_and_tokenizer(seed=0)
    same, _ = make_model_and_tokenizer(seed=0)
    other, _ = make_model_and_tokenizer(seed=1)
    assert weights_fingerprint(model) == weights_fingerprint(same) != weights_fingerprint(other)


def trainer_for(tmp_path, eval_dataset=None, **overrides):
    model, tokenizer = make_model_and_tokenizer()
    kwargs = base_kwargs(str(tmp_path), max_steps=1, experiment_task="addition")
    kwargs.update(overrides)
    return LooGspoTrainer(
        model=model,
        reward_funcs=[digit_fraction_reward, ShapedReward(MathVerifier())],
        args=LooGspoConfig(**kwargs),
        train_dataset=addition_dataset(32, seed=0),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
    )


@pytest.mark.slow
def test_experiment_json_is_written_before_training_with_the_spec_fields(tmp_path):
    validation = Dataset.from_list([{"prompt": "999+1=", "answer": "1000"}] * 4)
    trainer = trainer_for(tmp_path, eval_dataset=validation, eval_strategy="no")
    seen = {}

    def first_step_check(*args, **kwargs):  # the record exists before the first training step
        seen["exists"] = (tmp_path / "experiment.json").exists()
        return original(*args, **kwargs)

    original = trainer.training_step
    trainer.training_step = first_step_check
    trainer.train()
    assert seen["exists"]
    record = json.loads((tmp_path / "experiment.json").read_text())
    assert record["task"] == "addition"
    assert len(record["base_model"]["weights_sha256"]) == 64 and record["base_model"]["parameters"] > 0
    assert record["data"]["train"]["rows"] == 32 and record["data"]["validation"]["rows"] == 4
    assert record["verifiers"][0]["name"] == "digit_fraction_reward"
    assert record["verifiers"][1]["verifier"]["name"] == "math" and "version" in record["verifiers"][1]["verifier"]
    assert record["limits"]["max_completion_length"] == trainer.args.max_completion_length
    assert record["sampling"]["num_generations"] == 4 and record["optimizer"]["optim"].lower().endswith("sgd")
    assert record["budget"]["max_steps"] == 1 and record["seeds"]["seed"] == 7
    assert record["config"]["advantage_estimator"] is None  # as the user wrote it
    assert record["objective"]["advantage_estimator"] == "loo"  # what it resolved to
    assert record["versions"]["trl"].startswith("1.16") and record["versions"]["torch"]
    assert "git_commit" in record


def test_training_refuses_a_validation_split_that_overlaps_training(tmp_path):
    train = addition_dataset(32, seed=0)
    leaked = Dataset.from_list([train[3], {"prompt": "999+1=", "answer": "1000"}])
    trainer = trainer_for(tmp_path, eval_dataset=leaked, eval_strategy="no")
    with pytest.raises(ValueError, match="shares 1 of its 2 prompts"):
        trainer.train()
    assert not (tmp_path / "experiment.json").exists()


def test_registration_can_be_turned_off(tmp_path):
    train = addition_dataset(32, seed=0)
    trainer = trainer_for(tmp_path, eval_dataset=Dataset.from_list([train[0]]), register_experiment=False)
    trainer.train()  # no refusal, no record
    assert not (tmp_path / "experiment.json").exists()


@pytest.mark.slow
def test_the_record_goes_into_the_model_card(tmp_path):
    trainer = trainer_for(tmp_path, save_strategy="steps", save_steps=1)
    trainer.train()
    card = (
        (tmp_path / "checkpoint-1" / "README.md").read_text()
        if (tmp_path / "checkpoint-1" / "README.md").exists()
        else ""
    )
    card = card or (tmp_path / "README.md").read_text()
    assert "Experiment registration (method §2)" in card and '"weights_sha256"' in card


def test_registration_hashes_the_weights_and_each_dataset_once_per_trainer(tmp_path, monkeypatch):
    """A second ``train()`` (a resume, a continued run) used to hash every weight and every row again."""
    from trl_loo_gspo.trainer import publishing

    calls = {"weights": 0, "rows": 0}
    weights, rows = publishing.weights_fingerprint, publishing.content_fingerprint

    def counted_weights(*args, **kwargs):
        calls["weights"] += 1
        return weights(*args, **kwargs)

    def counted_rows(*args, **kwargs):
        calls["rows"] += 1
        return rows(*args, **kwargs)

    monkeypatch.setattr(publishing, "weights_fingerprint", counted_weights)
    monkeypatch.setattr(publishing, "content_fingerprint", counted_rows)
    validation = Dataset.from_list([{"prompt": "999+1=", "answer": "1000"}] * 4)
    trainer = trainer_for(tmp_path, eval_dataset=validation)
    first = trainer.register_experiment()
    second = trainer.register_experiment()
    assert calls == {"weights": 1, "rows": 2}  # the base weights once, train and validation once each
    assert first["base_model"]["weights_sha256"] == second["base_model"]["weights_sha256"]
    assert first["base_model"]["weights_sha256"] == weights(trainer.model)
    assert first["data"] == second["data"] and first["data"]["train"] == rows(trainer.train_dataset)
    trainer.train_dataset = addition_dataset(16, seed=3)  # replaced rows are fingerprinted anew
    assert trainer.register_experiment()["data"]["train"]["rows"] == 16 and calls["rows"] == 3


def test_row_hashes_read_in_batches_equal_row_by_row_hashes():
    rows = [{"prompt": [{"role": "user", "content": f"{i}+1="}], "answer": str(i + 1), "n": i} for i in range(5000)]
    dataset = Dataset.from_list(rows)
    expected = [hashlib.sha256(json.dumps(dict(row), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
                for row in dataset]  # fmt: skip
    assert row_hashes(dataset) == expected


def _git(cwd, *args):
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env = {**os.environ, **env}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_git_commit_is_the_packages_own_checkout_or_nothing(tmp_path, monkeypatch):
    import shutil

    from trl_loo_gspo.experiment.ablation import provenance
    from trl_loo_gspo.records.registration import git_commit

    user = tmp_path / "user-project"  # the user's own repository
    (user / "tracked").mkdir(parents=True)
    (user / "tracked" / "code.py").write_text("x = 1\n")
    _git(user, "init", "-q")
    _git(user, "add", "tracked")
    _git(user, "commit", "-q", "-m", "user's commit")
    users_commit = _git(user, "rev-parse", "HEAD")
    assert git_commit(user / "tracked") == users_commit  # a checkout that tracks the code: its commit
    # an export of the package unpacked inside the user's repository (untracked there): no commit, not the user's
    export = user / "vendor" / "trl_loo_gspo"
    shutil.copytree(Path(__file__).resolve().parents[1] / "trl_loo_gspo" / "records", export / "records")
    assert git_commit(export) is None and git_commit(export / "records") is None
    assert git_commit(tmp_path) is None  # no git checkout at all
    # the record's commit is the one of the checkout the package was imported from, whatever the working directory
    monkeypatch.chdir(user)
    own = git_commit()
    package = Path(trl_loo_gspo.__file__).resolve().parent
    assert own == git_commit(package) and own != users_commit
    assert provenance.git_commit() in (own, None)
