"""The offline demo: deterministic task with disjoint splits, exact verifier, end-to-end run, policy cache."""

import json

import pytest

from trl_loo_gspo.demo.policy import PolicySpec, load_or_build_policy
from trl_loo_gspo.demo.run import DemoConfig, run_demo
from trl_loo_gspo.demo.task import AdditionTask, addition_reward, verify

from .helpers import TINY_POLICY


def test_task_is_deterministic_and_splits_are_disjoint_by_content():
    task = AdditionTask(digits=2, validation_pairs=100, seed=3)
    train, validation = task.splits()
    again_train, again_validation = AdditionTask(digits=2, validation_pairs=100, seed=3).splits()
    assert train["prompt"] == again_train["prompt"] and validation["prompt"] == again_validation["prompt"]
    assert not set(train["prompt"]) & set(validation["prompt"])
    # a+b and b+a always sit in the same split (a commutative duplicate would leak the answer)
    held = set(validation["prompt"])
    for prompt in held:
        a, b = prompt[:-1].split("+")
        assert f"{b}+{a}=" in held
    assert len(train) + len(validation) == 100 * 100  # every ordered pair exactly once
    other, _ = AdditionTask(digits=2, validation_pairs=100, seed=4).splits()
    assert other["prompt"] != train["prompt"]
    for row in validation:
        a, b = row["prompt"][:-1].split("+")
        assert int(row["answer"]) == int(a) + int(b)


def test_task_settings_are_validated():
    with pytest.raises(ValueError, match="digits"):
        AdditionTask(digits=0)
    with pytest.raises(ValueError, match="validation_pairs"):
        AdditionTask(digits=1, validation_pairs=55)


@pytest.mark.parametrize(
    ("completion", "score"),
    [("46", 1.0), (" 46\n", 1.0), ("45", 0.0), ("046", 0.0), ("46 46", 0.0), ("", 0.0), ("4x", 0.0), ("+=", 0.0)],
)
def test_verifier_scores_right_wrong_and_garbage(completion, score):
    assert verify(completion, "46") == score


def test_reward_function_accepts_plain_and_conversational_completions():
    plain = addition_reward(["12", "13"], answer=["12", "12"])
    chat = addition_reward([[{"role": "assistant", "content": "12"}]], answer=["12"])
    assert plain == [1.0, 0.0] and chat == [1.0]


def test_demo_config_needs_a_budget():
    with pytest.raises(ValueError, match="budget"):
        DemoConfig(rollout_tokens=0)
    with pytest.raises(ValueError, match="minutes"):
        DemoConfig(minutes=0)


@pytest.mark.slow
def test_demo_end_to_end_with_a_tiny_budget_and_cache(tmp_path):
    def demo(out, **kwargs):
        return run_demo(
            DemoConfig(
                output_dir=str(tmp_path / out),
                cache_dir=str(tmp_path / "cache"),
                rollout_tokens=300,
                prompts_per_step=4,
                num_generations=4,
                eval_samples=1,
                curve_points=2,
                quiet=True,
                policy_overrides=TINY_POLICY,
                **kwargs,
            )
        )

    first = demo("first", baseline=True)
    for name in ("metrics.json", "learning_curve.png"):
        assert (tmp_path / "first" / name).stat().st_size > 0
    metrics = json.loads((tmp_path / "first" / "metrics.json").read_text())
    assert set(metrics["runs"]) == {"LOO-GSPO", "stock GRPO"}
    for run in metrics["runs"].values():
        assert run["rollout_tokens"] >= 300
        assert run["curve"][0]["rollout_tokens"] == 0 and run["curve"][-1]["rollout_tokens"] == run["rollout_tokens"]
        assert 0.0 <= run["after"]["sampled"] <= 1.0
    assert metrics["policy"]["cached"] is False
    assert first["table"].row_count == 2

    second = demo("second")
    assert second["policy"]["cached"] is True
    assert second["policy"]["key"] == first["policy"]["key"]
    assert second["runs"]["LOO-GSPO"]["before"] == first["runs"]["LOO-GSPO"]["before"]  # the same cached policy

    fresh = demo("fresh", fresh=True)
    assert fresh["policy"]["cached"] is False


def test_policy_cache_key_changes_with_any_setting():
    base = PolicySpec()
    assert base.key() == PolicySpec().key()
    assert base.key() != PolicySpec(seed=1).key()
    assert base.key() != PolicySpec(task=AdditionTask(seed=1)).key()
    assert base.key() != PolicySpec(hidden_size=64).key()


@pytest.mark.slow
def test_minutes_budget_stops_and_baseline_gets_the_same_tokens(tmp_path):
    metrics = run_demo(
        DemoConfig(
            output_dir=str(tmp_path / "out"),
            cache_dir=str(tmp_path / "cache"),
            rollout_tokens=0,
            minutes=0.02,
            baseline=True,
            prompts_per_step=4,
            num_generations=4,
            eval_samples=1,
            quiet=True,
            policy_overrides=TINY_POLICY,
        )
    )
    ours, stock = metrics["runs"]["LOO-GSPO"], metrics["runs"]["stock GRPO"]
    assert ours["steps"] >= 1
    assert stock["rollout_tokens"] >= ours["rollout_tokens"]  # stock trained until it had spent as many tokens
    assert stock["rollout_tokens"] - ours["rollout_tokens"] < 4 * 4 * 4  # ... and stopped within one step


def test_cli_parses_demo_flags(monkeypatch):
    import trl_loo_gspo.demo.run as run_module
    from trl_loo_gspo.cli import main

    seen = {}

    def fake_run_demo(config):
        seen["config"] = config
        return {"interrupted": False}

    monkeypatch.setattr(run_module, "run_demo", fake_run_demo)
    assert main(["demo", "--seed", "3", "--rollout-tokens", "1000", "--baseline", "--output-dir", "x"]) == 0
    config = seen["config"]
    assert (config.seed, config.rollout_tokens, config.baseline, config.output_dir) == (3, 1000, True, "x")
    seen.clear()
    main(["demo", "--minutes", "2"])
    assert seen["config"].minutes == 2.0
    with pytest.raises(SystemExit):
        main(["demo", "--minutes", "2", "--rollout-tokens", "5"])  # one budget at a time


def test_load_or_build_policy_round_trip(tmp_path):
    spec = PolicySpec(**TINY_POLICY)
    model, tokenizer, info = load_or_build_policy(spec, tmp_path, log=lambda _: None)
    again, tokenizer2, info2 = load_or_build_policy(spec, tmp_path, log=lambda _: None)
    assert not info["cached"] and info2["cached"]
    assert tokenizer2.padding_side == "left" and tokenizer2.pad_token == tokenizer.pad_token
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert (a == b).all(), name
