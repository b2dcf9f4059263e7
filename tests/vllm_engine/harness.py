"""Test harness of the vLLM CI job (``.ci/vllm-job``): a servable tiny policy, CPU engine settings, a server-mode
weight sync over the filesystem, and the check that vLLM sampled from the current policy.

Only the test modules under ``tests/vllm_engine`` import this, after ``pytest.importorskip("vllm")``; nothing here
changes the library. Every patch is scoped to a ``pytest.MonkeyPatch`` context of a fixture.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
from trl_loo_gspo.demo.tiny import addition_dataset, char_tokenizer, tiny_qwen2

SKIP_REASON = "vLLM tests run in the vLLM CI job: .ci/vllm-job"
# 128 hidden / 4 heads = head_dim 32: the smallest head size vLLM's CPU attention serves (16 is refused).
HIDDEN_SIZE = 128
MAX_COMPLETION = 8
# vLLM computes in fp32 like the trainer (its CPU default would be bf16), so that a synced engine agrees to ~1e-5.
ENGINE_DTYPE = "float32"


def save_tiny_policy(folder: Path) -> Path:
    """A seeded random tiny Qwen2 (hidden 128, 2 layers, ~0.5M parameters) with its char tokenizer, in ``folder``."""
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=HIDDEN_SIZE, num_hidden_layers=2, seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def digit_reward(completions: list, **_: object) -> list[float]:
    """1 when one of the first 4 characters is a digit: a random policy passes ~60%, so groups both spread and
    agree (dynamic sampling has work), and a high learning rate moves the policy within a few steps."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(any(ch.isdigit() for ch in text[:4])) for text in texts]


def vllm_config(output_dir: Path, mode: str, **overrides: Any) -> LooGspoConfig:
    """LooGspoConfig of a short vLLM run on CPU: dynamic sampling, the two-stage probe, adaptive group sizes."""
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,  # GRPOConfig defaults to bf16, 7x slower on CPUs without bf16 units
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
        learning_rate=3e-2,  # high on purpose: the policy must move measurably in a few steps
        lr_scheduler_type="constant",
        max_steps=6,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=MAX_COMPLETION,
        dataloader_num_workers=0,
        dynamic_sampling=True,
        probe_generations=2,
        adaptive_group_size=True,
        max_sampling_rounds=4,  # fewer all-padding batches once the policy saturates the reward
        use_vllm=True,
        vllm_mode=mode,
        vllm_gpu_memory_utilization=0.3,  # a fraction of NUMA node 0's RAM on CPU; VLLM_CPU_KVCACHE_SPACE wins
    )
    kwargs.update(overrides)
    return LooGspoConfig(**kwargs)


def make_trainer(policy: Path, args: LooGspoConfig, peft_config: Any = None) -> LooGspoTrainer:
    tokenizer = char_tokenizer()
    return LooGspoTrainer(
        model=str(policy),
        reward_funcs=digit_reward,
        args=args,
        train_dataset=addition_dataset(64, seed=3),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


@dataclass
class SyncCounter:
    calls: int = 0
    pushed: int = 0


def control_weight_sync(trainer: LooGspoTrainer, enabled: bool) -> SyncCounter:
    """Count TRL's weight syncs; with ``enabled=False`` only the first one (the initial policy) reaches vLLM.

    The first sync always runs, so that an engine shared between tests starts from this trainer's initial policy:
    a no-sync run then samples from a stale policy only because the sync is off, not because of an earlier test.
    """
    generation = trainer.vllm_generation
    original = generation.sync_weights
    counter = SyncCounter()

    def sync_weights() -> None:
        counter.calls += 1
        if enabled or counter.pushed == 0:
            original()
            counter.pushed += 1

    generation.sync_weights = sync_weights
    return counter


# --- colocate mode -------------------------------------------------------------------------------------------------


def cached_llm_factory(llm_class: type) -> Callable[..., Any]:
    """Stand-in for ``vllm.LLM`` in TRL's colocate code: one engine per model path (engine start is 10-80 s on CPU),
    eager (no torch.compile) and fp32. TRL's own arguments pass through unchanged otherwise."""
    engines: dict[str, Any] = {}

    @functools.wraps(llm_class)
    def build(**kwargs: Any) -> Any:
        model = kwargs["model"]
        if model not in engines:
            kwargs.update(enforce_eager=True, dtype=ENGINE_DTYPE)
            engines[model] = llm_class(**kwargs)
        return engines[model]

    build.engines = engines  # type: ignore[attr-defined]
    return build


# --- server mode ---------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    base_url: str
    log: Path
    launched: float  # time.monotonic() at launch


def launch_server(policy: Path, log: Path) -> Server:
    """Start ``trl vllm-serve`` (which execs ``vllm serve``) on a free loopback port, in its own process group,
    without waiting for it (see wait_healthy)."""
    port = free_port()
    trl_cli = Path(sys.executable).with_name("trl")
    command = [str(trl_cli), "vllm-serve", "--model", str(policy), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--gpu_memory_utilization", "0.3", "--dtype", ENGINE_DTYPE, "--enforce_eager", "true"]
    command += ["--max_model_len", "128", "--log_level", "warning"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Server(process, f"http://127.0.0.1:{port}", log, time.monotonic())


def wait_healthy(server: Server, timeout_s: float = 300.0) -> float:
    """Seconds from launch until ``/health`` answered; raises with the log's tail if the server died or timed out."""
    while time.monotonic() - server.launched < timeout_s:
        if server.process.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {server.process.returncode}:\n{tail(server.log)}")
        try:
            if requests.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return time.monotonic() - server.launched
        except requests.ConnectionError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vLLM server not healthy after {timeout_s:.0f} s:\n{tail(server.log)}")


def stop_server(server: Server) -> None:
    """Terminate the server's process group (it was started in a new session: only its own processes)."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=30)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def disk_weight_sync(folder: Path) -> Callable[..., None]:
    """Replacement of ``VLLMClient.update_named_params`` for a CPU trainer (TRL's transfer is NCCL-only).

    TRL hands over the policy's tensors under vLLM's names (PEFT adapters already merged by TRL); they are saved as
    one safetensors file in a fresh folder, and the server reloads its weights from there (``reload_weights``
    through ``/collective_rpc``). TRL resets the prefix cache itself after the sync.
    """
    folder.mkdir(parents=True, exist_ok=True)
    count = 0

    def update_named_params(client: Any, metadata: list, named_params: Iterator[tuple[str, torch.Tensor]]) -> None:
        nonlocal count
        count += 1
        target = folder / f"sync-{count}"
        target.mkdir()
        tensors = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in named_params}
        save_file(tensors, str(target / "model.safetensors"))
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(target)}}
        response = client.session.post(f"{client.base_url}/collective_rpc", json=rpc, timeout=120)
        if response.status_code != 200:
            raise RuntimeError(f"reload_weights failed: {response.status_code} {response.text}")
        shutil.rmtree(folder / f"sync-{count - 1}", ignore_errors=True)

    return update_named_params


# --- the on-policy check -------------------------------------------------------------------------------------------

RATIO = "sampling/importance_sampling_ratio"
LOGP_DIFF = "sampling/sampling_logp_difference"
PADDED = "sampling/padded_fraction"


@dataclass
class SamplingFigures:
    """TRL's logged sampler-vs-policy figures over the steps that can show a stale sampler (see sampling_figures)."""

    steps: int
    ratio_min: float
    ratio_mean: float
    ratio_max: float
    logp_diff_mean: float
    logp_diff_max: float
    padded_steps: int = 0


def sampling_figures(log_history: list[dict], skip_steps: int = 1) -> SamplingFigures:
    """Extremes of TRL's per-step sampling metrics, skipping the first ``skip_steps`` logged steps (the first
    generation uses the initial weights, which every engine holds: it proves nothing). Steps whose batch holds
    dynamic-sampling padding rows (``sampling/padded_fraction`` > 0) count too: the trainer recomputes these metrics
    over the answers (TRL computes them before the padding rows are masked, which reported |log p_vLLM| of a padding
    row's token, ~ln 50 nats here, whatever the sync did); ``padded_steps`` says how many such steps were checked."""
    # a batch of padding only (every group filtered) has no answer, so no figure (logged as None)
    rows = [row for row in log_history if row.get(f"{RATIO}/mean") is not None][skip_steps:]
    clean = rows
    padded = sum(1 for row in rows if row.get(PADDED, 0.0))
    if not clean:
        return SamplingFigures(0, math.nan, math.nan, math.nan, math.nan, math.nan, padded)
    return SamplingFigures(
        steps=len(clean),
        ratio_min=min(row[f"{RATIO}/min"] for row in clean),
        ratio_mean=sum(row[f"{RATIO}/mean"] for row in clean) / len(clean),
        ratio_max=max(row[f"{RATIO}/max"] for row in clean),
        logp_diff_mean=max(row[f"{LOGP_DIFF}/mean"] for row in clean),
        logp_diff_max=max(row[f"{LOGP_DIFF}/max"] for row in clean),
        padded_steps=padded,
    )


def off_policy_problems(
    figures: SamplingFigures, min_steps: int = 2, ratio_tol: float = 0.05, logp_tol: float = 0.02
) -> list[str]:
    """Why the figures do not show on-policy sampling; empty when vLLM sampled from the current policy.

    Per-sequence IS ratios must stay within 1 ± ratio_tol and the worst step's mean |log p_policy - log p_vLLM|
    within logp_tol nats (fp32 on both sides gives ~1e-6; a stale sampler gives tenths to nats).
    """
    problems = []
    if figures.steps < min_steps:
        problems.append(
            f"only {figures.steps} logged steps after the first update (need {min_steps}; "
            f"{figures.padded_steps} of them with padding rows)"
        )
        return problems
    if not 1 - ratio_tol <= figures.ratio_min <= figures.ratio_max <= 1 + ratio_tol:
        problems.append(f"IS ratio range [{figures.ratio_min:.4f}, {figures.ratio_max:.4f}] leaves 1 ± {ratio_tol}")
    if not figures.logp_diff_mean <= logp_tol:
        problems.append(f"mean |Δ log p| up to {figures.logp_diff_mean:.4f} nats > {logp_tol}")
    return problems


@torch.no_grad()
def policy_shift(policy: Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> float:
    """Mean KL(current || initial) of the next-character distribution over fixed prompts, in nats per position."""
    initial = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32).eval()
    prompts = [row["prompt"] for row in addition_dataset(16, seed=11)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    was_training = model.training
    model.eval()
    current = model(**batch).logits.float().log_softmax(-1)
    model.train(was_training)
    before = initial(**batch).logits.float().log_softmax(-1)
    kl = (current.exp() * (current - before)).sum(-1)
    mask = batch["attention_mask"].bool()
    return float(kl[mask].mean())
