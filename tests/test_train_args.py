"""`trl-loo-gspo train` argument handling without a trainer: validation of the script arguments, data splits from a
local file, verifiers and reward functions built from the arguments."""

from __future__ import annotations

import pytest

from trl_loo_gspo.experiment.build import LooGspoScriptArguments, build_reward_funcs, build_verifier, load_splits
from trl_loo_gspo.records.registration import split_overlap
from trl_loo_gspo.verifiers import CodeVerifier, MathVerifier
from trl_loo_gspo.verifiers.shaping import ShapedReward

from .recipe_fixtures import write_raw


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"task": "chess"}, "task"),
        ({"prompt_format": "xml"}, "prompt_format"),
        ({"validation_size": -1}, "validation"),
    ],
)
def test_invalid_script_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LooGspoScriptArguments(dataset_name="x", **kwargs)


def test_a_local_file_gets_a_held_out_validation_split_without_shared_prompts(tmp_path):
    path = write_raw(tmp_path, "math", copies=5)  # 20 rows
    args = LooGspoScriptArguments(dataset_name=str(path), task="math", dataset_mapper="gsm8k", validation_size=4)
    train, validation = load_splits(args, conversational=False, seed=0)
    assert len(train) == 16 and len(validation) == 4
    assert split_overlap(train, validation) == []
    assert set(train.column_names) == {"prompt", "answer"} and isinstance(train[0]["prompt"], str)
    args.validation_size = 0.25  # a fraction works too
    train, validation = load_splits(args, conversational=True, seed=0)
    assert len(validation) == 5 and isinstance(validation[0]["prompt"], list)
    args.validation_size = 0
    assert load_splits(args, conversational=False, seed=0)[1] is None  # one file, no held-out rows: no validation


def test_dataset_name_is_required():
    with pytest.raises(ValueError, match="dataset_name"):
        load_splits(LooGspoScriptArguments(), conversational=False, seed=0)


def test_verifier_and_reward_functions_from_the_arguments():
    from trl_loo_gspo.config import LooGspoConfig

    training = LooGspoConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, max_completion_length=64)
    math_args = LooGspoScriptArguments(dataset_name="x", task="math")
    verifier = build_verifier(math_args)
    assert isinstance(verifier, MathVerifier)
    assert build_reward_funcs(math_args, verifier, training) == [verifier]  # no penalty: the verifier itself
    shaped_args = LooGspoScriptArguments(
        dataset_name="x",
        task="math",
        overlong_penalty=1.0,
        overlong_buffer=16,
        extra_reward_funcs=["trl_loo_gspo.demo.tiny.digit_fraction_reward"],
    )
    funcs = build_reward_funcs(shaped_args, verifier, training)
    assert isinstance(funcs[0], ShapedReward) and funcs[0].lambda_len == 1.0
    assert funcs[1].__name__ == "digit_fraction_reward"
    code = build_verifier(LooGspoScriptArguments(dataset_name="x", task="code", verifier_timeout=3))
    assert isinstance(code, CodeVerifier) and code.sandbox.limits.wall_timeout_s == 3
    with pytest.raises(ValueError, match="dotted import path"):
        build_reward_funcs(LooGspoScriptArguments(dataset_name="x", extra_reward_funcs=["nodots"]), verifier, training)


def test_process_feedback_asks_the_verifier_for_spans():
    from trl_loo_gspo.verifiers import CoqVerifier

    assert build_verifier(LooGspoScriptArguments(dataset_name="x", task="code"), emit_spans=True).emit_spans
    assert not build_verifier(LooGspoScriptArguments(dataset_name="x", task="code")).emit_spans
    coq = build_verifier(LooGspoScriptArguments(dataset_name="x", task="proofs"), emit_spans=True)
    assert isinstance(coq, CoqVerifier) and coq.emit_spans
    with pytest.raises(ValueError, match="math verifier has none"):
        build_verifier(LooGspoScriptArguments(dataset_name="x", task="math"), emit_spans=True)
