"""LooGspoTrainer through vLLM in colocate mode (one in-process engine shared by the module's trainers).

Runs in the vLLM CI job (``.ci/vllm-job``); skipped where vLLM is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM tests run in the vLLM CI job: .ci/vllm-job")

import trl.generation.vllm_generation as trl_vllm  # noqa: E402
from peft import LoraConfig  # noqa: E402

from tests.vllm_engine.harness import (  # noqa: E402
    SamplingFigures,
    cached_llm_factory,
    control_weight_sync,
    make_trainer,
    off_policy_problems,
    policy_shift,
    sampling_figures,
    save_tiny_policy,
    vllm_config,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The saved tiny policy, and TRL's ``LLM`` replaced by a cached eager fp32 engine for this module only."""
    folder = save_tiny_policy(tmp_path_factory.mktemp("policy"))
    factory = cached_llm_factory(trl_vllm.LLM)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trl_vllm, "LLM", factory)
        yield folder
        factory.engines.clear()


def train(policy: Path, tmp_path: Path, sync: bool, lora: bool = False) -> tuple[SamplingFigures, float, int]:
    # LoRA moves the policy less per step: a higher learning rate keeps the shift well clear of the check's floor
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM") if lora else None
    learning_rate = 1e-1 if lora else 3e-2
    trainer = make_trainer(
        policy, vllm_config(tmp_path, "colocate", learning_rate=learning_rate), peft_config=peft_config
    )
    counter = control_weight_sync(trainer, enabled=sync)
    trainer.train()
    figures = sampling_figures(trainer.state.log_history)
    shift = policy_shift(policy, trainer.model, trainer.processing_class)
    print(f"colocate sync={sync} lora={lora}: {figures}, policy shift {shift:.3f} nats, syncs {counter}")
    return figures, shift, counter.calls


def test_colocate_samples_from_current_policy(policy: Path, tmp_path: Path) -> None:
    figures, shift, syncs = train(policy, tmp_path, sync=True)
    assert syncs >= 4  # one per optimizer step: the sync path really ran
    assert shift > 0.05, "the policy did not move: the on-policy check would prove nothing"
    assert off_policy_problems(figures) == []


def test_colocate_lora_samples_from_current_policy(policy: Path, tmp_path: Path) -> None:
    figures, shift, _ = train(policy, tmp_path, sync=True, lora=True)
    assert shift > 0.05, "the LoRA policy did not move: the on-policy check would prove nothing"
    assert off_policy_problems(figures) == []


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_colocate_without_sync_fails_the_check(policy: Path, tmp_path: Path, lora: bool) -> None:
    """Control: the same run with the weight sync off (after the initial one) must be caught by the check; with LoRA
    too, whose policy moves least (~0.1 nats), so that the LoRA test above is shown to be able to fail."""
    figures, shift, _ = train(policy, tmp_path, sync=False, lora=lora)
    assert shift > 0.05
    assert figures.steps >= 2, "too few logged steps: the control would fail for the wrong reason"
    assert off_policy_problems(figures) != []
