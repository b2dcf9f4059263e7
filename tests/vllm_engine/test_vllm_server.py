"""LooGspoTrainer through vLLM in server mode, against one ``trl vllm-serve`` subprocess for the module.

TRL's weight transfer to a server is NCCL-only (``VLLMClient.init_communicator`` refuses a CPU trainer), so the
fixture makes the communicator a no-op and syncs through the filesystem: TRL's (PEFT-merged) tensors are saved and
the server runs ``reload_weights`` on them. Generation, prompt de-duplication and logprobs stay TRL's.
Runs in the vLLM CI job (``.ci/vllm-job``); skipped where vLLM is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM tests run in the vLLM CI job: .ci/vllm-job")

from peft import LoraConfig  # noqa: E402
from trl.generation.vllm_client import VLLMClient  # noqa: E402

from tests.vllm_engine.harness import (  # noqa: E402
    SamplingFigures,
    Server,
    control_weight_sync,
    disk_weight_sync,
    launch_server,
    make_trainer,
    off_policy_problems,
    policy_shift,
    sampling_figures,
    save_tiny_policy,
    stop_server,
    vllm_config,
    wait_healthy,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """One server for the module (it keeps the last trainer's weights; each test's first sync resets them), and
    TRL's client patched for a CPU trainer while the module runs."""
    root = tmp_path_factory.mktemp("server")
    policy = save_tiny_policy(root / "policy")
    running = launch_server(policy, root / "server.log")
    try:
        print(f"vLLM server healthy {wait_healthy(running):.1f} s after its launch")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(VLLMClient, "init_communicator", lambda self, device=0: None)
            patch.setattr(VLLMClient, "update_named_params", disk_weight_sync(root / "weights"))
            yield running, policy
    finally:
        stop_server(running)


def train(
    server: tuple[Server, Path], tmp_path: Path, sync: bool, lora: bool = False
) -> tuple[SamplingFigures, float, int]:
    running, policy = server
    # LoRA moves the policy less per step: a higher learning rate keeps the shift well clear of the check's floor
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM") if lora else None
    learning_rate = 1e-1 if lora else 3e-2
    args = vllm_config(
        tmp_path, "server", learning_rate=learning_rate, vllm_server_base_url=running.base_url, vllm_server_timeout=60
    )
    trainer = make_trainer(policy, args, peft_config=peft_config)
    counter = control_weight_sync(trainer, enabled=sync)
    trainer.train()
    figures = sampling_figures(trainer.state.log_history)
    shift = policy_shift(policy, trainer.model, trainer.processing_class)
    print(f"server sync={sync} lora={lora}: {figures}, policy shift {shift:.3f} nats, syncs {counter}")
    return figures, shift, counter.calls


def test_server_samples_from_current_policy(server: tuple[Server, Path], tmp_path: Path) -> None:
    figures, shift, syncs = train(server, tmp_path, sync=True)
    assert syncs >= 4
    assert shift > 0.05, "the policy did not move: the on-policy check would prove nothing"
    assert off_policy_problems(figures) == []


def test_server_lora_samples_from_current_policy(server: tuple[Server, Path], tmp_path: Path) -> None:
    figures, shift, _ = train(server, tmp_path, sync=True, lora=True)
    assert shift > 0.05, "the LoRA policy did not move: the on-policy check would prove nothing"
    assert off_policy_problems(figures) == []


def test_server_without_sync_fails_the_check(server: tuple[Server, Path], tmp_path: Path) -> None:
    """Control: the server keeps the weights of the first sync only; the check must reject the run."""
    figures, shift, _ = train(server, tmp_path, sync=False)
    assert shift > 0.05
    assert figures.steps >= 2, "too few logged steps: the control would fail for the wrong reason"
    assert off_policy_problems(figures) != []
