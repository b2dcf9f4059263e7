"""Shared fixtures for trainer tests: a tiny local model, a deterministic rollout, a reference update.

The deterministic rollout (TRL's ``rollout_func``) makes completions a pure function of (prompt, answer index), so
two trainers — or one process and two — see exactly the same data and their updates can be compared.
"""

from __future__ import annotations

import copy
import hashlib
import os
import socket

import torch
from datasets import Dataset

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl_loo_gspo.algorithms import losses as loss_fns  # noqa: E402
from trl_loo_gspo.demo.tiny import addition_dataset, char_tokenizer, tiny_qwen2  # noqa: E402

MAX_COMPLETION = 8
DIGITS = "0123456789"
#: Where the trainer tests train: "cpu" (the default), or "cuda" for the GPU check (benchmarks/gpu/check.py).
TEST_DEVICE = os.environ.get("TRL_LOO_GSPO_TEST_DEVICE", "cpu")


def make_model_and_tokenizer(seed: int = 0):
    tokenizer = char_tokenizer()
    return tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=2, seed=seed), tokenizer


def free_port() -> int:
    """A free TCP port on the loopback interface, for a test's process-group rendezvous or server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _completion_text(prompt: str, j: int) -> tuple[str, bool]:
    """Deterministic completion for answer j of a prompt: varying length, some without EOS (truncated)."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    length = 1 + (h + 3 * j) % MAX_COMPLETION
    text = "".join(DIGITS[(h >> (4 * t + j)) % 10] for t in range(length))
    ends = (h + j) % 4 != 0
    return text, ends


def make_rollout(tokenizer, num_generations: int):
    """A TRL rollout_func: prompts arrive with each prompt's num_generations copies contiguous."""

    def rollout(prompts, trainer):
        prompt_ids, completion_ids, logprobs = [], [], []
        for row, prompt in enumerate(prompts):
            text, ends = _completion_text(prompt, row % num_generations)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][: MAX_COMPLETION - 1]
            if ends:
                ids = ids + [tokenizer.eos_token_id]
            prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            completion_ids.append(ids)
            logprobs.append([0.0] * len(ids))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout


def parity_reward(completions, **_):
    """Deterministic reward of the completion text: 1 for even length, 0 for odd, None (unscorable) for length 5."""
    out = []
    for text in completions:
        n = len(text)
        out.append(None if n == 5 else float(n % 2 == 0))
    return out


def train_dataset(n: int = 64):
    return addition_dataset(n, seed=1)


def base_kwargs(output_dir: str, **overrides):
    """Arguments shared by LooGspoConfig and GRPOConfig in comparisons: CPU, fp32, SGD, no grad clipping."""
    kwargs = dict(
        output_dir=output_dir,
        use_cpu=TEST_DEVICE == "cpu",
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=7,
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        num_generations=4,
        max_completion_length=MAX_COMPLETION,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_steps=1,
        epsilon=0.2,
        epsilon_high=0.3,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
    )
    kwargs.update(overrides)
    return kwargs


def reward_trainer(tmp_path, reward, dataset=None, **overrides):
    """Our trainer on the tiny model with ``reward`` as its reward function (16 rows of the parity task by default)."""
    from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

    model, tokenizer = make_model_and_tokenizer()
    return LooGspoTrainer(
        model=model,
        reward_funcs=reward,
        args=LooGspoConfig(**base_kwargs(str(tmp_path), **overrides)),
        train_dataset=train_dataset(16) if dataset is None else dataset,
        processing_class=tokenizer,
    )


def record_micro_batches(trainer_cls):
    """Subclass of a trainer class that records every micro-batch's inputs and loss."""

    class Recording(trainer_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.recorded = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            keep = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")
            self.recorded.append(
                ({k: inputs[k].detach().clone() for k in keep}, loss.detach().clone(), self.state.global_step)
            )
            return loss

    return Recording


def reference_gradient(trainer, model0, micro_batches, loss_aggregation: str = "token_total"):
    """Gradient of L (method §3.3) over the union of the given micro-batches (the whole optimizer step), by autograd.

    Uses the hand formula L = Σ T_i ℓ_i / Σ T_i (or the answer mean) on a copy of the initial model, on-policy
    (old log-probs = current log-probs, detached), with the trainer's clip bounds.
    """
    model = copy.deepcopy(trainer.model)  # the trainer's (patched) model class, with the initial weights
    model.load_state_dict(model0.state_dict())
    model.zero_grad()
    numerator, tokens, answers = 0.0, 0, 0
    for batch in micro_batches:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, batch["completion_ids"].size(1))
        mask = batch["completion_mask"]
        s = loss_fns.sequence_ratio(logps, logps.detach(), mask)
        losses = loss_fns.response_loss(s, batch["advantages"], trainer.epsilon_low, trainer.epsilon_high)
        lengths = mask.sum(-1)
        if loss_aggregation == "token_total":
            numerator = numerator + (lengths * losses).sum()
        else:
            numerator = numerator + (losses * (lengths > 0)).sum()
        tokens += int(lengths.sum())
        answers += int((lengths > 0).sum())
    loss = numerator / (tokens if loss_aggregation == "token_total" else answers)
    loss.backward()
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters() if p.grad is not None}
    return grads, loss


def param_delta(model_after, model0):
    before = dict(model0.named_parameters())
    return {name: (p.detach().cpu() - before[name].detach().cpu()) for name, p in model_after.named_parameters()}


def controlled_dataset(n: int = 48, seed: int = 0):
    """Prompts whose pass rate is controlled by a `kind` column: always right, always wrong, or mixed."""
    kinds = ["always", "never", "mixed"]
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(3, (n,), generator=gen).tolist()
    return Dataset.from_list([{"prompt": f"p{i}=", "kind": kinds[k]} for i, k in enumerate(picks)])


def controlled_rollout(tokenizer, num_generations: int):
    """Answer j of a group is '1' * (j + 1): the row's position in the *global* batch decides j, so that a group
    split across processes gets the same answers as in one process."""

    def rollout(prompts, trainer):
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        offset = trainer.accelerator.process_index * len(prompts)
        for row, prompt in enumerate(prompts):
            j = (offset + row) % num_generations
            ids = tokenizer("1" * (1 + j), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            out["prompt_ids"].append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out["completion_ids"].append(ids)
            out["logprobs"].append([0.0] * len(ids))
        return out

    return rollout


def controlled_reward(completions, kind, **_):
    """always → 1, never → 0, mixed → 1 for an even-length completion (2 of 4 answers)."""
    return [
        {"always": 1.0, "never": 0.0}.get(k, float(len(c) % 2 == 0)) for c, k in zip(completions, kind, strict=True)
    ]


def multistep_variants(a: int, b: int, c: int) -> list[str]:
    """Answer j of a multi-step prompt: right; right then a slip; wrong first step; true but unrelated steps."""
    return [
        f"{a}+{b}={a + b};{a + b}+{c}={a + b + c}",
        f"{a}+{b}={a + b};{a + b}+{c}={a + b + c + 1}",
        f"{a}+{b}={a + b + 1};{a + b + 1}+{c}={a + b + c + 1}",
        "1+1=2;2+2=4",
    ]


def multistep_operands(prompt: str) -> list[int]:
    return [int(x) for x in prompt.rstrip("=").split("+")]


def multistep_rollout(tokenizer, pick=None):
    """Answer of a row = ``multistep_variants(...)[j % 4]``, j the row's position in the *global* batch (a group split
    across processes gets the same answers as in one process); ``pick(operands, j)`` chooses the variant instead."""
    pick = pick or (lambda ops, j: j % 4)

    def rollout(prompts, trainer):
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        offset = trainer.accelerator.process_index * len(prompts)
        for row, prompt in enumerate(prompts):
            ops = multistep_operands(prompt)
            text = multistep_variants(*ops)[pick(ops, offset + row)]
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            out["prompt_ids"].append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out["completion_ids"].append(ids)
            out["logprobs"].append([0.0] * len(ids))
        return out

    return rollout


def controlled_trainer(trainer_cls, tmp_path, dataset=None, **overrides):
    """A ``trainer_cls`` (a ``LooGspoTrainer``) on the controlled task: a fresh tiny model, dynamic sampling, groups of
    ``num_generations=4``, the controlled dataset and rollout; ``overrides`` go to the config. Returns (trainer,
    tokenizer, the model before training)."""
    import copy

    from trl_loo_gspo import LooGspoConfig

    model, tokenizer = make_model_and_tokenizer()
    model0 = copy.deepcopy(model)
    kwargs = base_kwargs(str(tmp_path), num_generations=4, per_device_train_batch_size=8, dynamic_sampling=True)
    kwargs.update(overrides)
    trainer = trainer_cls(
        model=model,
        reward_funcs=[controlled_reward],
        args=LooGspoConfig(**kwargs),
        train_dataset=dataset if dataset is not None else controlled_dataset(),
        processing_class=tokenizer,
        rollout_func=controlled_rollout(tokenizer, 4),
    )
    return trainer, tokenizer, model0


# A tiny warm start for demo/ablation tests: seconds instead of the real ~20 s warm start.
TINY_POLICY = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    sft_min_steps=2,
    sft_max_steps=4,
    check_every=2,
    calibration_problems=8,
    target_pass_rate=0.0,
)


def small_sandbox_limits(**overrides):
    """Tight sandbox limits for the code-verifier tests (seconds, not minutes, per hostile program)."""
    from trl_loo_gspo.sandbox.bubblewrap import SandboxLimits

    values = dict(
        wall_timeout_s=2.0,
        cpu_time_s=2,
        memory_bytes=512 << 20,
        max_processes=16,
        file_size_bytes=4 << 20,
        open_files=64,
        tmpfs_bytes=8 << 20,
        output_bytes=64 << 10,
    )
    values.update(overrides)
    return SandboxLimits(**values)


def parity_trainer(trainer_cls, model, tokenizer, args, **kwargs):
    """A trainer on the deterministic rollout, the parity reward and the 64-prompt addition split."""
    return trainer_cls(
        model=model,
        reward_funcs=[parity_reward],
        args=args,
        train_dataset=train_dataset(),
        processing_class=tokenizer,
        rollout_func=make_rollout(tokenizer, args.num_generations),
        **kwargs,
    )


def run_recorded(trainer_cls, config_cls, tmp_path, **overrides):
    """Train a recording trainer on the deterministic rollout and parity reward; returns it and the initial model."""
    model, tokenizer = make_model_and_tokenizer()
    model0 = copy.deepcopy(model)
    args = config_cls(**base_kwargs(str(tmp_path), **overrides))
    trainer = parity_trainer(record_micro_batches(trainer_cls), model, tokenizer, args)
    trainer.train()
    return trainer, model0


def spy_rounds(trainer, record) -> None:
    """Call ``record(output, round_data, training)`` with each generation round's batch and :class:`RoundData` as the
    trainer hands them on (wraps ``trainer.process_feedback.token_advantages``, which every round calls once)."""
    token_advantages = trainer.process_feedback.token_advantages

    def spied(output, rewards, round_data, metrics, training):
        token_advantages(output, rewards, round_data, metrics, training)
        record(output, round_data, training)

    trainer.process_feedback.token_advantages = spied
