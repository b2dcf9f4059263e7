"""The demo's embedded policy: a character tokenizer and a small Qwen2, warm-started by a short supervised phase.

Built locally, never downloaded. The warm start runs until the policy's *sampled* pass rate on a calibration subset
of the training split reaches ``target_pass_rate`` (so that GRPO groups have mixed outcomes), then the policy is
cached under ``cache_dir`` keyed by a hash of every setting; the next run with the same settings loads it. A cache
entry is written atomically and checked against the checksums it records; a damaged one is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from .evaluate import pass_rates
from .mixed import MixedSumTask
from .multistep import MultiStepTask
from .task import AdditionTask
from .tiny import char_tokenizer, tiny_qwen2

#: Bump when the way a policy is built changes, so that stale caches are not reused.
POLICY_FORMAT = 1
ALPHABET = "0123456789+="
#: Written last into a cache entry; lists every other file of the entry with its SHA-256.
META_FILE = "policy.json"


@dataclass(frozen=True)
class PolicySpec:
    """Everything that determines the warm-started policy (and so its cache key)."""

    task: AdditionTask | MultiStepTask | MixedSumTask = field(default_factory=AdditionTask)
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
    #: Label smoothing of the supervised phase's cross-entropy: the warm start keeps that much probability off the
    #: right token at every position, so its sampled answers are wrong much more often than its greedy ones (the
    #: room for RL's sharpening that a pretrained model has). 0: plain next-token training.
    sft_label_smoothing: float = 0.0

    def key(self) -> str:
        payload = {"format": POLICY_FORMAT, **asdict(self)}
        # fields added to a task later keep the keys (and caches) of tasks that leave them at their default
        for name, default in (
            ("tuning_pairs", 0),
            ("tuning_per_terms", 0),
            ("min_terms", 1),
            ("max_operand", None),
            ("answer_format", "steps"),
        ):
            if name in payload["task"] and payload["task"][name] == default:
                del payload["task"][name]
        if payload["sft_label_smoothing"] == 0.0:  # (fields added later keep the keys of specs without them)
            del payload["sft_label_smoothing"]
        if not isinstance(self.task, AdditionTask):  # (addition keys stay as they were: existing caches stay valid)
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
    """Return ``(model, tokenizer, info)``; ``info["cached"]`` says whether the warm start was skipped.

    A damaged cache entry (a file missing, truncated or not matching the checksum recorded when it was written, or
    one that fails to load) is reported in one line and rebuilt. Entries are written atomically (see
    :func:`write_cache_entry`), so an interrupted warm start leaves nothing that would be loaded.
    """
    prefix = getattr(spec.task, "policy_name", "addition")
    folder = (cache_dir or default_cache_dir()) / f"{prefix}-policy-{spec.key()}"
    if not fresh and folder.exists():
        try:
            return _load_entry(folder, log)
        except Exception as error:  # a damaged entry: any failure to read it means "rebuild"
            log(f"The cached policy in {folder} is damaged ({_one_line(error)}); rebuilding it.")

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
    write_cache_entry(folder, model, tokenizer, info)
    log(f"Warm start: {steps} steps, sampled pass rate {calibration:.2f}, {info['seconds']} s; cached in {folder}")
    return model, tokenizer, {**info, "cached": False, "path": str(folder)}


class DamagedCacheEntry(Exception):
    """A policy cache entry that is incomplete or does not match the checksums recorded when it was written."""


def _load_entry(folder: Path, log: Callable[[str], None]):
    """Load a cache entry after checking it against its manifest; raises if it is damaged."""
    info = check_cache_entry(folder)
    with _hf_progress_bars_off():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    tokenizer.padding_side = "left"
    log(f"Loaded the warm-started policy from {folder}")
    return model, tokenizer, {**info, "cached": True, "path": str(folder)}


def check_cache_entry(folder: Path) -> dict:
    """Return the entry's ``policy.json`` (without its file list) or raise :class:`DamagedCacheEntry`.

    ``policy.json`` is written last and lists every other file with its SHA-256. Entries written before the file
    list existed have none: they are only checked by loading them.
    """
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise DamagedCacheEntry(f"{META_FILE} is missing")
    try:
        info = json.loads(meta_path.read_text())
    except (OSError, ValueError) as error:
        raise DamagedCacheEntry(f"{META_FILE} is unreadable: {_one_line(error)}") from error
    for name, digest in info.pop("files", {}).items():
        path = folder / name
        if not path.is_file():
            raise DamagedCacheEntry(f"{name} is missing")
        if _sha256(path) != digest:
            raise DamagedCacheEntry(f"{name} does not match its checksum")
    return info


def write_cache_entry(folder: Path, model, tokenizer, info: dict) -> None:
    """Write a cache entry atomically: save into a staging folder beside ``folder``, then rename it into place.

    ``policy.json`` (with every file's SHA-256) is written last. If anything interrupts the write the staging folder
    is removed; a staging folder left by a killed process is never loaded (its name differs) and is swept by a later
    write once it is an hour old. An existing entry at ``folder`` (``--fresh``, or a damaged one) is replaced.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale_staging(folder)
    staging = folder.with_name(f".{folder.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    staging.mkdir()
    try:
        with _hf_progress_bars_off():
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
        files = {path.name: _sha256(path) for path in sorted(staging.iterdir()) if path.is_file()}
        (staging / META_FILE).write_text(json.dumps({**info, "files": files}, indent=2))
        _move_into_place(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # (gone already when the rename succeeded)


def _move_into_place(staging: Path, folder: Path) -> None:
    """Rename ``staging`` to ``folder``, replacing an existing ``folder`` (moved aside first, then deleted)."""
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{uuid.uuid4().hex[:8]}")
        folder.rename(old)
    try:
        staging.rename(folder)
    except OSError:
        if not (folder / META_FILE).is_file():  # unless another process has just written the same entry
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sweep_stale_staging(folder: Path, max_age_s: float = 3600.0) -> None:
    """Delete staging/old folders of ``folder`` left behind by killed processes (older than ``max_age_s``)."""
    for leftover in folder.parent.glob(f".{folder.name}.*"):
        try:
            if time.time() - leftover.stat().st_mtime > max_age_s:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass  # another process removed it first


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _one_line(error: BaseException, limit: int = 160) -> str:
    """An exception as one short line (safetensors and transformers errors can span several)."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    if not isinstance(error, DamagedCacheEntry):
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def _hf_progress_bars_off() -> Iterator[None]:
    """Silence transformers' "Loading weights" / "Writing model shards" bars (carriage returns in a log file)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


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
        if spec.sft_label_smoothing:
            logits = model(**enc).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
                label_smoothing=spec.sft_label_smoothing,
            )
        else:
            loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step >= spec.sft_min_steps and step % spec.check_every == 0:
            rate = pass_rates(
                model,
                tokenizer,
                calibration,
                samples=4,
                seed=spec.seed,
                score=score,
                max_new_tokens=max_new_tokens,
                lean=False,  # generate's draws: the policies already cached stay the ones rebuilt
            )["sampled"]
            log(f"  warm start step {step}: loss {loss.item():.3f}, sampled pass rate {rate:.2f}")
            if rate >= spec.target_pass_rate:
                break
    model.eval()
    return step, rate
