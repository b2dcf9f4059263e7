"""One owner per run limit: a rollout-token budget, given as the config field or as a ``RolloutTokenBudget``
callback, is the trainer's one ``RunPlan``; the sampling rounds inside a step stop at it in the trainer, the demo
and the ablation runner alike (trainer/budget.py)."""

from types import SimpleNamespace

import pytest
from datasets import Dataset

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.task import AdditionTask, AdditionVerifier
from trl_loo_gspo.trainer.budget import RolloutTokenBudget
from trl_loo_gspo.trainer.run_plan import RunPlan
from trl_loo_gspo.verifiers.base import VerifierResult

from .helpers import TINY_POLICY, controlled_trainer

ROUNDS = 20  # the round cap: a step that ignored the budget would draw all of them (every group is filtered)


def test_the_plan_takes_the_smallest_budget_given_either_way():
    args = SimpleNamespace(rollout_token_budget=500)
    assert RunPlan.resolve(SimpleNamespace(rollout_token_budget=None)) == RunPlan(None)
    assert RunPlan.resolve(args).rollout_token_budget == 500
    callbacks = [RolloutTokenBudget(), RolloutTokenBudget(60), object()]
    assert RunPlan.resolve(args, callbacks).rollout_token_budget == 60
    assert RunPlan.resolve(SimpleNamespace(rollout_token_budget=40), callbacks).rollout_token_budget == 40
    plan = RunPlan(100)
    assert plan.tokens_left(30) == 70 and plan.tokens_left(130) == 0 and RunPlan().tokens_left(10**9) is None
    assert plan.reached(100) and not plan.reached(99) and not RunPlan().reached(10**9)
    assert plan.progress(130) == 100 and RunPlan().progress(130) == 130
    assert plan.with_callbacks(callbacks).rollout_token_budget == 60  # folded onto the configured budget
    assert RunPlan(configured_budget=500).with_callbacks([RolloutTokenBudget(700)]).rollout_token_budget == 500
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="budget"):
            RolloutTokenBudget(bad)


def test_the_0x_callback_form_with_a_trainer_still_works_and_warns():
    with pytest.warns(FutureWarning, match="RolloutTokenBudget\\(budget, progress\\)"):
        legacy = RolloutTokenBudget(object(), 60, print)
    assert legacy.budget == 60 and legacy.progress is print
    with pytest.warns(FutureWarning):
        assert RolloutTokenBudget(None, 40).budget == 40  # (trainer=None, budget) as 0.x tests wrote it


def _rounds(trainer) -> list[int]:
    return [h["sampling/rounds"] for h in trainer.state.log_history if "sampling/rounds" in h]


@pytest.mark.slow
@pytest.mark.parametrize("given_as", ["config", "callback"])
def test_a_budget_given_either_way_stops_the_rounds_inside_a_step(tmp_path, given_as):
    never = Dataset.from_list([{"prompt": f"p{i}=", "kind": "never"} for i in range(32)])  # every group filtered
    config = {"rollout_token_budget": 60} if given_as == "config" else {}
    trainer, _, _ = controlled_trainer(
        LooGspoTrainer, tmp_path, never, max_steps=1, max_sampling_rounds=ROUNDS, **config
    )
    if given_as == "callback":
        trainer.add_callback(RolloutTokenBudget(60))
    trainer.train()
    assert trainer.run_plan.rollout_token_budget == 60
    assert _rounds(trainer) == [2]  # 56 tokens a round: the second reaches 60, and no third is drawn
    assert trainer.generated_tokens_total == 112


def _zero_verifier():
    class Zero(AdditionVerifier):
        def verify(self, completion, answer=None, **_):
            return VerifierResult(0.0, "fail")  # every group all wrong: dynamic sampling filters them all

    return Zero()


@pytest.mark.slow
def test_the_demo_budget_stops_the_rounds_inside_a_step(tmp_path, monkeypatch):
    from trl_loo_gspo.demo import run as demo_run

    def filtering_config(demo, output_dir):
        settings = demo_run.common_args(demo, output_dir)
        return LooGspoConfig(**settings, dynamic_sampling=True, max_sampling_rounds=ROUNDS)

    monkeypatch.setattr(demo_run, "recommended_config", filtering_config)
    monkeypatch.setattr(demo_run, "addition_reward", lambda completions, **_: [0.0] * len(completions))
    budget, per_round = 40, 4 * 4 * 4  # 4 prompts x 4 answers x at most digits + 2 = 4 tokens
    metrics = demo_run.run_demo(
        demo_run.DemoConfig(
            output_dir=str(tmp_path / "out"),
            cache_dir=str(tmp_path / "cache"),
            rollout_tokens=budget,
            prompts_per_step=4,
            num_generations=4,
            eval_samples=1,
            curve_points=1,
            quiet=True,
            policy_overrides=TINY_POLICY,
        )
    )
    run = metrics["runs"]["LOO-GSPO"]
    assert run["steps"] == 1
    assert budget <= run["rollout_tokens"] < budget + per_round  # not ROUNDS rounds in the one step


@pytest.mark.slow
def test_the_ablation_budget_stops_the_rounds_inside_a_step(tmp_path, monkeypatch):
    from trl_loo_gspo.experiment.ablation import runner
    from trl_loo_gspo.experiment.ablation.plan import AblationPlan

    plan = AblationPlan(
        output_dir=str(tmp_path / "out"),
        seeds=[0],
        rollout_tokens=40,
        eval_every_tokens=40,
        eval_samples=1,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": "dyn", "config": {}}],
        common={"per_device_train_batch_size": 16, "num_generations": 4},
        policy=TINY_POLICY,
    )
    monkeypatch.setattr(runner, "demo_task", lambda plan, seed: (AdditionTask(seed=seed), _zero_verifier()))
    overrides = {"dynamic_sampling": True, "max_sampling_rounds": ROUNDS}
    record = runner.run_one(plan, "dyn", overrides, False, 0)
    assert record["steps"] == 1
    assert 40 <= record["generated_tokens"] < 40 + 16 * 4  # one round is at most 16 rows x 4 tokens


@pytest.mark.slow
def test_the_objective_is_resolved_once_per_run_not_per_step(tmp_path, monkeypatch):
    """The run plan resolves the objective once, at construction; no hook, loss or metric resolves it again while
    training (issue 44: 23 resolutions in 2 optimizer steps before)."""
    from trl_loo_gspo.config import objective as objective_module
    from trl_loo_gspo.trainer import loss as loss_module

    calls = []
    original = objective_module.resolve

    def counted(config):
        calls.append(1)
        return original(config)

    monkeypatch.setattr(objective_module, "resolve", counted)
    monkeypatch.setattr(loss_module, "resolve", counted)
    trainer, _, _ = controlled_trainer(LooGspoTrainer, tmp_path, max_steps=2, steps_per_generation=4)
    built = len(calls)  # the config's own validation, TRL's constructor check and the run plan
    plan = trainer.run_plan
    trainer.add_callback(RolloutTokenBudget(10**6))
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(calls) == built  # 0 while training: no hook, loss or record resolves it again
    assert trainer.objective is plan.objective and trainer.run_plan.sampling is plan.sampling
    assert trainer.run_plan.rollout_token_budget == 10**6  # the budget is folded again when training starts
    assert trainer.sampler.plan is plan.sampling  # the sampler reads the run plan's sampling settings


def test_adding_a_budget_callback_draws_no_already_one_warning(tmp_path, caplog):
    """The trainer's own budget callback is a class of its own (PlanBudget): a user's RolloutTokenBudget is not
    "already there" for Transformers' callback handler (issue 46: a six-line warning in each demo and ablation run)."""
    import logging

    from trl_loo_gspo.trainer.budget import PlanBudget

    trainer, _, _ = controlled_trainer(LooGspoTrainer, tmp_path, max_steps=1)
    assert sum(isinstance(cb, PlanBudget) for cb in trainer.callback_handler.callbacks) == 1
    with caplog.at_level(logging.WARNING):
        trainer.add_callback(RolloutTokenBudget(60))
    assert "there is already one" not in caplog.text
    with caplog.at_level(logging.WARNING):
        trainer.add_callback(PlanBudget())  # the check itself still works: a second PlanBudget draws it
    assert "there is already one" in caplog.text
