"""Where the trainer's parts meet (issue #23): each test reproduces one defect of the trainer's earlier design, where
a step's data travelled between mixins through attributes."""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.multistep import MultiStepTask, MultiStepVerifier
from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2
from trl_loo_gspo.trainer.validation import ValidationCallback

from .helpers import (
    base_kwargs,
    controlled_dataset,
    controlled_reward,
    controlled_rollout,
    controlled_trainer,
    make_model_and_tokenizer,
    multistep_rollout,
    spy_rounds,
)

pytestmark = pytest.mark.slow
K = 4


class Spy(LooGspoTrainer):
    """Records each round's data as the trainer hands it to the metrics, and the sampler's probe calls."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rounds, self.probe_calls, self.batches = [], [], []
        probe_round, sample = self.sampler._probe_round, self.sampler.sample

        def spy_probe_round(prompts, pending, rows_missing, final, probe_rates):
            self.probe_calls.append({"final": final, "new_prompts": len(prompts), "pending": len(pending)})
            return probe_round(prompts, pending, rows_missing, final, probe_rates)

        def spy_sample(inputs, metrics):
            final_inputs, replay = sample(inputs, metrics)
            self.batches.append((final_inputs, replay))
            return final_inputs, replay

        self.sampler._probe_round, self.sampler.sample = spy_probe_round, spy_sample
        spy_rounds(self, lambda output, round_data, training: self.rounds.append(round_data))


def controlled(tmp_path, dataset=None, **overrides):
    trainer, tokenizer, _ = controlled_trainer(Spy, tmp_path, dataset, **overrides)
    return trainer, tokenizer


# ------------------------------------------------------------------ defect 1: process feedback + padding
def half_without_signal_rollout(tokenizer):
    """Prompts with an odd operand sum get the right answer four times (no signal); the others the four variants."""
    return multistep_rollout(tokenizer, pick=lambda ops, j: 0 if sum(ops) % 2 else j % 4)


def test_process_feedback_trains_on_a_padded_batch(tmp_path):
    tokenizer = char_tokenizer("0123456789+=;")
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=2, seed=0)
    train, _ = MultiStepTask(train_problems=32, validation_problems=4, seed=1).splits()
    kwargs = base_kwargs(str(tmp_path), max_completion_length=24, max_steps=2, num_generations=K)
    kwargs.update(dynamic_sampling=True, max_sampling_rounds=1, process_advantage_coef=0.3)
    trainer = Spy(
        model=model,
        reward_funcs=[MultiStepVerifier(emit_spans=True)],
        args=LooGspoConfig(**kwargs),
        train_dataset=train,
        processing_class=tokenizer,
        rollout_func=half_without_signal_rollout(tokenizer),
    )
    with pytest.warns(UserWarning, match="max_sampling_rounds"):
        trainer.train()  # crashed with TypeError: 'NoneType' object is not subscriptable
    padded = [r for r in trainer.rounds if bool(r.padding.any())]
    assert padded, "the harness must pad"
    for round_data in padded:
        assert all(round_data.span_signals[i]["spans"] is None for i in round_data.padding.nonzero().flatten())
    assert trainer.state.global_step == 2


# ------------------------------------------------------------------ defect 2: the probe's last round
def test_the_last_round_draws_no_probe_that_cannot_be_continued(tmp_path):
    trainer, _ = controlled(tmp_path, probe_generations=2, max_sampling_rounds=2, max_steps=2)
    with pytest.warns(UserWarning):
        trainer.train()
    finals = [call for call in trainer.probe_calls if call["final"]]
    assert finals
    assert all(call["new_prompts"] == 0 for call in finals)  # was 4 new probed prompts per final round, discarded
    probe_tokens = sum(h.get("tokens/probe", 0) for h in trainer.state.log_history)
    assert probe_tokens > 0


# ------------------------------------------------------------------ defect 7: the diagnosis names the cause
def test_nothing_trained_names_the_cause_when_every_batch_was_padding(tmp_path):
    never = Dataset.from_list([{"prompt": f"p{i}=", "kind": "never"} for i in range(16)])
    trainer, _ = controlled(tmp_path, dataset=never, max_sampling_rounds=2, max_steps=1)
    with pytest.warns(UserWarning):
        trainer.train()
    reason = trainer.nothing_trained()
    # the reward is 0 for every answer: the cause is the reward, not the round cap (more rounds cannot help);
    # the round-cap advice where the reward does vary: tests/test_run_messages.py
    assert "the reward is constant over every group" in reason and "cannot help" in reason
    assert "within each group all answers had the same reward" not in reason


# ------------------------------------------------------------------ defect 8: padding rows are not answers
def test_padding_rows_stay_out_of_trl_metrics_and_keep_their_own_prompt(tmp_path):
    trainer, tokenizer = controlled(
        tmp_path, max_sampling_rounds=1, gradient_accumulation_steps=1, per_device_train_batch_size=16
    )
    with pytest.warns(UserWarning, match="max_sampling_rounds"):
        trainer.train()
    (final_inputs, replay), log = trainer.batches[0], trainer.state.log_history[0]
    assert bool(replay.local_padding.any()) and not bool(replay.local_padding.all())
    # real answers are '1' * (j + 1) + EOS (>= 2 tokens); the one-token padding rows were counted before
    assert log["completions/min_length"] >= 2
    assert log["completions/clipped_ratio"] == 0.0  # every real answer ends with EOS
    assert log["groups/frac_with_signal"] == 1.0  # every kept group has a signal; the padding block is no group
    prompt_ids = replay.generation[0]
    for row, pad in enumerate(replay.local_padding.tolist()):
        if pad:
            assert tokenizer(final_inputs[row]["prompt"], add_special_tokens=False)["input_ids"] == prompt_ids[row]
    real_rows = int((~replay.local_padding).sum())
    real_tokens = sum(
        len(p) + len(c) for p, c, pad in zip(*replay.generation[:2], replay.local_padding, strict=True) if not pad
    )
    assert real_rows < len(final_inputs) and trainer.state.num_input_tokens_seen == real_tokens


# ------------------------------------------------------------------ defect 9: state a resume needs
def test_run_state_carries_validation_and_process_feedback(tmp_path):
    trainer, _ = controlled(tmp_path, dynamic_sampling=False)
    task_rows = Dataset.from_list([{"prompt": "p1=", "kind": "always"}])
    callback = ValidationCallback(trainer, task_rows, verifier=controlled_reward, every_tokens=100, at_start=False)
    trainer.add_callback(callback)
    callback.history = [{"tokens": 0.0, "pass_at_1": 0.25}, {"tokens": 120.0, "pass_at_1": 0.5}]
    callback.next_checkpoint = 200
    trainer.process_feedback.signal_history.extend([0.1, 0.2])
    trainer.process_feedback.pass_history.extend([0.5, 0.4])
    state = copy.deepcopy(trainer.run_state())

    fresh, _ = controlled(tmp_path / "again", dynamic_sampling=False)
    restored = ValidationCallback(fresh, task_rows, verifier=controlled_reward, every_tokens=100, at_start=True)
    fresh.add_callback(restored)
    fresh.load_run_state(state)
    assert restored.history == callback.history and restored.next_checkpoint == 200
    feedback = fresh.process_feedback
    assert list(feedback.signal_history) == [0.1, 0.2] and list(feedback.pass_history) == [0.5, 0.4]


# ------------------------------------------------------------------ defect 14: TRL's metric names
def test_trl_gspo_form_of_dapo_logs_trl_clip_metric_names(tmp_path):
    model, tokenizer = make_model_and_tokenizer()
    args = LooGspoConfig(**base_kwargs(str(tmp_path), loss_type="dapo", importance_sampling_level="sequence"))
    assert args.objective.uses_own_loss
    trainer = LooGspoTrainer(
        model=model,
        reward_funcs=[controlled_reward],
        args=args,
        train_dataset=controlled_dataset(),
        processing_class=tokenizer,
        rollout_func=controlled_rollout(tokenizer, K),
    )
    trainer.train()
    log = trainer.state.log_history[0]
    for name in ("low_mean", "low_min", "high_mean", "high_max", "region_mean"):
        assert f"clip_ratio/{name}" in log
    assert log["clip_ratio/region_mean"] == pytest.approx(log["clip_ratio/low_mean"] + log["clip_ratio/high_mean"])
    assert log["clip_ratio/low_mean"] == pytest.approx(log["clip_ratio/low_tokens"])


# ------------------------------------------------------------------ defect 13: environments own their prompts
def test_a_dataset_without_prompts_is_accepted_when_an_environment_owns_them():
    from trl_loo_gspo.trainer.checks import check_dataset

    rows = Dataset.from_list([{"environment": "math"}, {"environment": "code"}])
    with pytest.raises(ValueError, match="no 'prompt' column"):
        check_dataset(rows, "train_dataset", require_rows=True)
    check_dataset(rows, "train_dataset", require_rows=True, require_prompt=False)


def test_the_trainer_defers_to_trl_on_prompts_when_an_environment_is_given(tmp_path, monkeypatch):
    import trl_loo_gspo.trainer.checks as checks_module
    import trl_loo_gspo.trainer.trainer as trainer_module

    seen = []
    monkeypatch.setattr(checks_module, "check_dataset", lambda *a, **k: seen.append(k["require_prompt"]))

    class Refused(Exception):
        pass

    def stop(*args, **kwargs):
        raise Refused

    monkeypatch.setattr(trainer_module.GRPOTrainer, "__init__", stop)
    rows = Dataset.from_list([{"environment": "math"}])
    args = LooGspoConfig(**base_kwargs(str(tmp_path)))
    with pytest.raises(Refused):
        LooGspoTrainer("unused", None, args, train_dataset=rows, environment_factory=lambda: None)
    assert seen == [False, False]
    with pytest.raises(Refused):
        LooGspoTrainer("unused", [controlled_reward], args, train_dataset=rows)
    assert seen[2:] == [True, True]


# ------------------------------------------------------------------ defect 8 with vLLM: IS metrics over answers only
@pytest.mark.parametrize("sequence_level", [False, True])
def test_vllm_sampling_metrics_are_recomputed_over_the_answers(sequence_level):
    from trl_loo_gspo.trainer.step import resample_sampling_metrics

    torch.manual_seed(0)
    old = torch.randn(4, 3, dtype=torch.float64)
    sampled = old + 0.01 * torch.randn(4, 3, dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.long)
    mask[3] = 0  # a padding row after the trainer zeroed its mask
    diff = (old - sampled) * mask
    ratio = torch.exp(diff.sum(-1, keepdim=True)) if sequence_level else torch.exp(diff)
    ratio[3] = 0.0  # how TRL saw the padding row (its old log-probs were never computed)
    output = {
        "completion_mask": mask,
        "importance_sampling_ratio": ratio,
        "sampling_per_token_logps": sampled,
        "old_per_token_logps": old,
    }
    names = [f"sampling/importance_sampling_ratio/{s}" for s in ("min", "mean", "max")]
    names += [f"sampling/sampling_logp_difference/{s}" for s in ("mean", "max")]
    metrics = {name: [-1.0] for name in names}  # TRL's values, padding included
    resample_sampling_metrics(metrics, output, sequence_level, lambda t: t)
    real = ratio[:3].flatten()
    assert metrics["sampling/importance_sampling_ratio/mean"][-1] == pytest.approx(float(real.mean()))
    assert metrics["sampling/importance_sampling_ratio/min"][-1] == pytest.approx(float(real.min()))
    assert metrics["sampling/importance_sampling_ratio/min"][-1] > 0.9  # the padding row's 0 is gone
    delta = (old - sampled).abs()[:3]
    assert metrics["sampling/sampling_logp_difference/mean"][-1] == pytest.approx(float(delta.mean()))
    assert metrics["sampling/sampling_logp_difference/max"][-1] == pytest.approx(float(delta.max()))


def test_vllm_sampling_metrics_of_a_batch_of_padding_only_are_dropped():
    from trl_loo_gspo.trainer.step import resample_sampling_metrics

    output = {
        "completion_mask": torch.zeros(2, 3, dtype=torch.long),  # every row padding
        "importance_sampling_ratio": torch.zeros(2, 1, dtype=torch.float64),
        "sampling_per_token_logps": torch.zeros(2, 3, dtype=torch.float64),
        "old_per_token_logps": torch.ones(2, 3, dtype=torch.float64),
    }
    metrics = {"sampling/importance_sampling_ratio/mean": [1.0, 0.0], "sampling/sampling_logp_difference/max": [0.0]}
    resample_sampling_metrics(metrics, output, True, lambda t: t)
    assert metrics == {"sampling/importance_sampling_ratio/mean": [1.0], "sampling/sampling_logp_difference/max": []}
