"""Dynamic sampling on a tiny model with a controlled pass rate per prompt (always right, always wrong, mixed)."""

import json
import math

import pytest
import torch
from datasets import Dataset

from trl_loo_gspo import LooGspoTrainer

from .helpers import (
    controlled_reward,
    controlled_trainer,
    param_delta,
    reference_gradient,
    spy_rounds,
)

pytestmark = pytest.mark.slow
K = 4  # the controlled rollout's group size


class Recording(LooGspoTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []
        self.recorded = []
        spy_rounds(self, self._record)

    def _record(self, output, round_data, training):
        if training:
            self.batches.append(
                {
                    "rewards": round_data.rewards_per_func.clone(),
                    "pad": round_data.padding.clone(),
                    "group_ids": round_data.group_ids.clone(),
                    "output": output,
                }
            )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        keep = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
        self.recorded.append(({k: inputs[k].detach().clone() for k in keep}, loss.detach(), self.state.global_step))
        return loss


def make(tmp_path, dataset=None, **overrides):
    trainer, _, model0 = controlled_trainer(Recording, tmp_path, dataset, **overrides)
    return trainer, model0


def group_spreads(rewards):
    r = rewards[:, 0].view(-1, K)
    return r.max(1).values - r.min(1).values


def test_no_zero_signal_group_reaches_the_loss_and_refill_happens(tmp_path):
    trainer, _ = make(tmp_path, max_steps=4)
    trainer.train()
    assert len(trainer.batches) == 4
    for batch in trainer.batches:
        assert not batch["pad"].any()
        assert (group_spreads(batch["rewards"]) > 0).all()
    logs = [h for h in trainer.state.log_history if "sampling/rounds" in h]
    assert max(h["sampling/rounds"] for h in logs) > 1  # refill rounds happened
    assert any(h["sampling/frac_all_correct"] > 0 for h in logs) and any(
        h["sampling/frac_all_wrong"] > 0 for h in logs
    )
    assert all(h["sampling/padded_fraction"] == 0 for h in logs)
    # every generated token is counted, the filtered ones included
    assert trainer.generated_tokens_total > trainer.effective_tokens_total
    assert logs[-1]["tokens/generated_per_effective"] > 1.0


def test_cap_pads_with_zero_weight_rows_and_loss_equals_the_valid_rows_alone(tmp_path):
    trainer, model0 = make(
        tmp_path, max_sampling_rounds=1, gradient_accumulation_steps=1, per_device_train_batch_size=16
    )
    with pytest.warns(UserWarning, match="max_sampling_rounds"):
        trainer.train()
    batch = trainer.batches[0]
    pad = batch["pad"]
    assert pad.any() and not pad.all()
    assert batch["output"]["completion_mask"][pad].sum() == 0  # no valid token: in neither numerator nor denominator
    assert torch.isnan(batch["rewards"][pad]).all()
    assert (batch["output"]["advantages"][pad] == 0).all()
    log = trainer.state.log_history[0]
    assert log["sampling/padded_fraction"] == pad.view(-1, K)[:, 0].float().mean().item() > 0
    valid_tokens = batch["output"]["completion_mask"][~pad].sum().item()
    assert log["tokens/loss_denominator"] == valid_tokens
    # the update is the gradient of the L of method.md §3.3 over the valid (non-padding) rows alone
    valid_only = []
    for inputs, _, _ in trainer.recorded:
        keep = inputs["completion_mask"].sum(-1) > 0
        valid_only.append({k: v[keep] for k, v in inputs.items()})
    grads, _ = reference_gradient(trainer, model0, valid_only)
    expected = {k: -trainer.args.learning_rate * g for k, g in grads.items()}
    for name, delta in param_delta(trainer.model, model0).items():
        torch.testing.assert_close(delta, expected[name], rtol=0, atol=1e-6)


def test_cap_can_raise_instead(tmp_path):
    never = Dataset.from_list([{"prompt": f"p{i}=", "kind": "never"} for i in range(16)])
    trainer, _ = make(tmp_path, dataset=never, max_sampling_rounds=2, on_sampling_exhausted="error")
    with pytest.raises(RuntimeError, match="max_sampling_rounds=2"):
        trainer.train()


def test_rollout_token_budget_stops_training_within_one_batch(tmp_path):
    trainer, _ = make(tmp_path, max_steps=50, rollout_token_budget=300, save_strategy="steps", save_steps=1000)
    trainer.train()
    assert trainer.state.global_step < 50
    per_step = max(h["tokens/generated"] for h in trainer.state.log_history if "tokens/generated" in h)
    assert 300 <= trainer.generated_tokens_total < 300 + per_step
    # stopped cleanly: a checkpoint at the stopping step, with the counters
    saved = json.loads((tmp_path / f"checkpoint-{trainer.state.global_step}" / "trainer_state.json").read_text())
    snapshot = saved["stateful_callbacks"]["RunStateCallback"]["attributes"]["snapshot"]
    assert snapshot["counters"]["generated_tokens_total"] == trainer.generated_tokens_total


def test_dynamic_sampling_passes_the_budget_by_at_most_one_plain_round(tmp_path):
    """Equal budget: a call that reaches the budget draws no further round (no warning, no error), so a run with
    dynamic sampling overshoots by at most one round of generation, as a run without it does."""
    plain, _ = make(tmp_path / "plain", dynamic_sampling=False, max_steps=1)
    plain.train()
    round_tokens = plain.generated_tokens_total  # one plain generation round
    budget = round_tokens + 1  # crossed inside the second batch, whose refill rounds would otherwise go on
    trainer, _ = make(
        tmp_path / "ds",
        max_steps=50,
        rollout_token_budget=budget,
        max_sampling_rounds=8,
        on_sampling_exhausted="error",
    )
    trainer.train()  # no RuntimeError for the padded last batch: the budget, not the round cap, stopped it
    assert budget <= trainer.generated_tokens_total < budget + round_tokens
    logs = [h for h in trainer.state.log_history if "sampling/rounds" in h]
    assert logs[-1]["sampling/rounds"] >= 1


def test_without_dynamic_sampling_degenerate_groups_reach_the_loss_with_zero_weight(tmp_path):
    trainer, _ = make(tmp_path, dynamic_sampling=False, max_steps=1)
    trainer.train()
    spreads = group_spreads(trainer.batches[0]["rewards"])
    assert (spreads == 0).any()  # the control: zero-signal groups are there (with Â = 0)
    assert math.isclose(trainer.state.log_history[0]["groups/frac_with_signal"], (spreads > 0).float().mean().item())


def test_probe_never_generates_the_continuation_for_filtered_prompts(tmp_path):
    """Each round is ONE generation call: the previous round's passing probes' continuations (one row per answer)
    plus the new prompts' probes. Continuations go only to prompts whose probe was mixed."""
    trainer, _ = make(tmp_path, max_steps=3, probe_generations=3)
    calls, continued, probed = [], [], []
    rollout, probe_round = trainer.rollout_func, trainer.sampler._probe_round

    def spy(prompts, trainer_):
        assert trainer_.num_generations == 4  # never changed to steer the backend
        calls.append(trainer_.answers_per_prompt)
        return rollout(prompts, trainer_)

    def spy_round(prompts, pending, rows_missing, final, probe_rates):
        continued.extend(group["prompt"]["prompt"] for group in pending)
        probed.extend(x["prompt"] for x in prompts)
        return probe_round(prompts, pending, rows_missing, final, probe_rates)

    trainer.rollout_func, trainer.sampler._probe_round = spy, spy_round
    kinds = {row["prompt"]: row["kind"] for row in trainer.train_dataset}
    trainer.train()
    rounds = sum(h["sampling/rounds"] for h in trainer.state.log_history if "sampling/rounds" in h)
    assert len(calls) == rounds  # one generation call per round
    assert set(calls) == {3, 1}  # probe-only calls (3 per prompt) and mixed calls (one row per answer)
    assert continued and all(kinds[p] == "mixed" for p in continued)  # never for always/never-right prompts
    assert {p for p in probed if kinds[p] != "mixed"}  # those were probed
    for batch in trainer.batches:
        assert (group_spreads(batch["rewards"]) > 0).all()  # full groups (probe + continuation) with a signal
    log = trainer.state.log_history[0]
    assert log["tokens/probe"] > 0 and log["tokens/continuation"] > 0
    assert sum(v for k, v in log.items() if k.startswith("probe/pass_rate_")) == pytest.approx(1.0)
    assert log["probe/pass_rate_0_of_3"] > 0 and log["probe/pass_rate_3_of_3"] > 0


def test_registry_excludes_filtered_prompts_from_refill_and_readmits_them(tmp_path):
    """Prompts of kind 'late' are always wrong before step 2 and mixed from then on: filtered, remembered, not
    redrawn by the refill sampler, then re-admitted every 2 steps, and the re-admitted ones pass."""
    kinds = ["always", "never", "mixed", "late"]
    dataset = Dataset.from_list([{"prompt": f"p{i}=", "kind": kinds[i % 4]} for i in range(64)])

    def reward(completions, kind, trainer_state, **_):
        out = []
        for c, k in zip(completions, kind, strict=True):
            if k == "late":
                k = "mixed" if trainer_state.global_step >= 2 else "never"
            out.append(controlled_reward([c], [k])[0])
        return out

    trainer, _ = make(tmp_path, dataset=dataset, max_steps=5, recheck_filtered_every=2, probe_generations=2)
    trainer.reward_funcs = [reward]
    drawn = []
    draw = trainer.sampler._refill.draw

    def spy(count, exclude=None):
        indices = draw(count, exclude)
        drawn.append((trainer.state.global_step, set(indices), set(trainer.filtered_registry)))
        return indices

    trainer.sampler._refill.draw = spy
    trainer.train()
    assert drawn and all(not (indices & registered) for _, indices, registered in drawn)
    logs = {h["step"]: h for h in trainer.state.log_history if "sampling/readmitted" in h}
    assert logs[1]["sampling/readmitted"] == 0 and logs[1]["sampling/registry_size"] > 0
    assert logs[3]["sampling/readmitted"] > 0  # step 2 (logged as step 3): the first re-check
    assert logs[3]["sampling/readmitted_passed"] > 0  # 'late' prompts now have mixed outcomes
    record = next(iter(trainer.filtered_registry.values()))
    assert set(record) == {"step", "pass_rate", "outcome"} and record["outcome"] in ("all_correct", "all_wrong")


def test_adaptive_group_size_gives_informative_prompts_more_answers_at_a_fixed_budget(tmp_path):
    from trl_loo_gspo.algorithms.advantages import loo_advantages

    trainer, _ = make(
        tmp_path,
        max_steps=2,
        per_device_train_batch_size=16,
        probe_generations=2,
        adaptive_group_size=True,
        max_generations=6,
    )
    trainer.train()
    for batch in trainer.batches:
        rewards = batch["rewards"][:, 0].double()
        assert rewards.numel() == 32  # the generation batch (16 per device × 2 steps) keeps its size
        ids = batch["group_ids"]
        sizes = torch.bincount(ids).tolist()
        assert sum(sizes) == 32 and max(sizes) == 6  # mixed probes (p = 0.5) get max_generations
    logs = [h for h in trainer.state.log_history if "sampling/groups" in h]
    assert all(h["sampling/groups"] < 32 / K for h in logs) or any(h["sampling/padded_fraction"] > 0 for h in logs)
    # LOO over the variable-size groups of the last batch reached the loss
    last = trainer.batches[-1]
    expected = loo_advantages(last["rewards"][:, 0].double(), last["group_ids"])
    torch.testing.assert_close(last["output"]["advantages"].double(), expected, rtol=0, atol=1e-6)
