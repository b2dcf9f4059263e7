"""The demo's embedded policy: a character tokenizer and a small Qwen2, warm-started by a short supervised phase.

Built locally, never downloaded. The warm start runs until the policy's *sampled* pass rate on a calibration subset
of the training split reaches ``target_pass_rate`` (so that GRPO groups have mixed outcomes), then the policy is
cached under ``cache_dir`` keyed by a hash of every setting; the next run with the same settings loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from ..tiny import char_tokenizer, tiny_qwen2
from .evaluate import pass_rates
from .multistep import MultiStepTask
from .task import AdditionTask

#: Bump when the way a policy is built changes, so that stale caches are not reused.
POLICY_FORMAT = 1
ALPHABET = "0123456789+="


@dataclass(frozen=True)
class PolicySpec:
    """Everything that determines the warm-started policy (and so its cache key)."""

    task: AdditionTask | MultiStepTask = field(default_factory=AdditionTask)
    hidden_size: int = 128
    num_hidden_layers: int = 2
    intermediate_size: int = 512
    sft_learning_rate: float = 1e-3
    sft_batch_size: int = 64
    sft_min_steps: int = 150
    sft_max_steps: int = 1000
    check_every: int = 50
    target_pass_rate: float = 0.30
    calibration_problems: int = 256
    seed: int = 0

    def key(self) -> str:
        payload = {"format": POLICY_FORMAT, **asdict(self)}
        if isinstance(self.task, MultiStepTask):  # (addition keys stay as they were: existing caches remain valid)
            payload["task_kind"] = self.task.policy_name
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    """``$TRL_LOO_GSPO_CACHE``, else ``$XDG_CACHE_HOME/trl_loo_gspo``, else ``~/.cache/trl_loo_gspo``."""
    if os.environ.get("TRL_LOO_GSPO_CACHE"):
        return Path(os.environ["TRL_LOO_GSPO_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trl_loo_gspo"


def load_or_build_policy(
    spec: PolicySpec,
    cache_dir: Path | None = None,
    fresh: bool = False,
    log: Callable[[str], None] = print,
):
    """Return ``(model, tokenizer, info)``; ``info["cached"]`` says whether the warm start was skipped."""
    prefix = getattr(spec.task, "policy_name", "addition")
    folder = (cache_dir or default_cache_dir()) / f"{prefix}-policy-{spec.key()}"
    meta_path = folder / "policy.json"
    if meta_path.exists() and not fresh:
        info = json.loads(meta_path.read_text())
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
        tokenizer.padding_side = "left"
        log(f"Loaded the warm-started policy from {folder}")
        return model, tokenizer, {**info, "cached": True, "path": str(folder)}

    log("Warm-starting the policy (supervised phase; cached for the next run)...")
    start = time.perf_counter()
    tokenizer = char_tokenizer(getattr(spec.task, "alphabet", ALPHABET))
    model = tiny_qwen2(
        tokenizer,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        intermediate_size=spec.intermediate_size,
        seed=spec.seed,
    )
    train, _ = spec.task.splits()
    steps, calibration = supervised_warm_start(model, tokenizer, train, spec, log)
    info = {
        "spec": asdict(spec),
        "key": spec.key(),
        "sft_steps": steps,
        "calibration_pass_rate": calibration,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(time.perf_counter() - start, 1),
    }
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    meta_path.write_text(json.dumps(info, indent=2))
    log(f"Warm start: {steps} steps, sampled pass rate {calibration:.2f}, {info['seconds']} s; cached in {folder}")
    return model, tokenizer, {**info, "cached": False, "path": str(folder)}


def supervised_warm_start(model, tokenizer, train, spec: PolicySpec, log: Callable[[str], None]):
    """Plain next-token training on ``prompt + answer + eos`` (loss on the answer and eos only).

    A hand loop rather than TRL's SFTTrainer: a few hundred steps of a 0.5M-parameter model, where the Trainer's
    setup would cost more than the training. Stops once the sampled pass rate on a calibration subset of the
    *training* split reaches ``spec.target_pass_rate`` (checked every ``spec.check_every`` steps after
    ``spec.sft_min_steps``), or at ``spec.sft_max_steps``. Returns ``(steps, calibration pass rate)``.
    """
    generator = torch.Generator().manual_seed(spec.seed)
    calibration = train.select(range(spec.calibration_problems))
    targets = train["solution"] if "solution" in train.column_names else train["answer"]
    texts = [p + a for p, a in zip(train["prompt"], targets, strict=True)]
    score = getattr(spec.task, "score", None)
    max_new_tokens = getattr(spec.task, "max_new_tokens", 6)
    prompt_lengths = [len(p) for p in train["prompt"]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.sft_learning_rate)
    model.train()
    rate = 0.0
    step = 0
    for step in range(1, spec.sft_max_steps + 1):
        index = torch.randint(len(texts), (spec.sft_batch_size,), generator=generator).tolist()
        batch = [texts[i] + tokenizer.eos_token for i in index]
        enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        width = labels.size(1)
        for row, i in enumerate(index):
            pad = width - int(enc["attention_mask"][row].sum())
            labels[row, : pad + prompt_lengths[i]] = -100  # left padding, then the prompt
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= spec.sft_min_steps and step % spec.check_every == 0:
            rate = pass_rates(
                model, tokenizer, calibration, samples=4, seed=spec.seed, score=score, max_new_tokens=max_new_tokens
            )["sampled"]
            log(f"  warm start step {step}: loss {loss.item():.3f}, sampled pass rate {rate:.2f}")
            if rate >= spec.target_pass_rate:
                break
    model.eval()
    return step, rate
