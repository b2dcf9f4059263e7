"""The trainer's extra state in checkpoints, through transformers' own mechanism.

``RunStateCallback`` is an ``ExportableState`` callback: ``Trainer._save_checkpoint`` calls its ``state()`` and
writes the result into ``trainer_state.json`` (``stateful_callbacks``) *before* the checkpoint is pushed to the Hub
or rotated. On resume, ``Trainer`` loads ``trainer_state.json`` before the optimizer; the trainer then reads the
saved dict back from ``state.stateful_callbacks`` (whatever ``restore_callback_states_from_checkpoint`` says: the
counters, registry and controller belong to the run, not to an optional callback).

What is saved: cumulative generated/effective tokens, the dynamic-sampling counters, the refill sampler, the
registry of filtered prompts, the entropy controller (state, target, calibration window).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

#: Extra-state file of checkpoints written before 0.x moved to ``stateful_callbacks`` (still read on resume).
LEGACY_STATE_FILE = "loo_gspo_state.json"


class RunStateCallback(TrainerCallback, ExportableState):
    """Saves the run state (``reader()``: the trainer's ``run_state``) with every checkpoint (see the module
    docstring). Transformers rebuilds it from a checkpoint with no arguments (and the saved ``snapshot`` as an
    attribute); the trainer then binds its reader again."""

    def __init__(self, reader: Callable[[], dict] | None = None) -> None:
        self.reader = reader

    def state(self) -> dict:
        snapshot = self.reader() if self.reader is not None else {}
        return {"args": {}, "attributes": {"snapshot": snapshot}}


#: Where 0.1's flat run state (one dict of counters) lives in the per-component state.
_FLAT_KEYS = {
    "generated_tokens_total": ("counters", "generated_tokens_total"),
    "effective_tokens_total": ("counters", "effective_tokens_total"),
    "sampling_counters": ("sampler", "sampling_counters"),
    "refill_sampler": ("sampler", "refill_sampler"),
    "filtered_registry": ("sampler", "filtered_registry"),
    "recheck_schedule": ("sampler", "recheck_schedule"),
}


def upgrade_run_state(state: dict[str, Any]) -> dict[str, Any]:
    """A run state saved by release 0.1 (flat keys), in today's layout (one entry per component); a state in
    today's layout comes back unchanged."""
    if "counters" in state or "generated_tokens_total" not in state:
        return state
    upgraded: dict[str, Any] = {}
    for key, (part, name) in _FLAT_KEYS.items():
        if key in state:
            upgraded.setdefault(part, {})[name] = state[key]
    if state.get("entropy_feedback") is not None:
        upgraded["entropy_feedback"] = state["entropy_feedback"]
    upgraded["reference_kl"] = {"due_step": int(state.get("kl_due_step", 0))}
    return upgraded


#: TRL's buffered generation round when a checkpoint falls inside one (one file per process).
ROUND_FILE = "generation_round-rank{rank}.pt"


def save_round_in_flight(output_dir: str, rank: int, step: int, buffered: list | None, per_round: int) -> None:
    """Save this process's buffered generation round and TRL's micro-step counter when a checkpoint falls inside a
    round (``step`` not a multiple of ``per_round`` = steps_per_generation × num_iterations). TRL checkpoints
    neither: a resume would regenerate the round from another sampler position, train its first slices twice and
    count its tokens twice."""
    if buffered is None or step % per_round == 0:
        return
    os.makedirs(output_dir, exist_ok=True)
    torch.save({"step": step, "buffered_inputs": buffered}, os.path.join(output_dir, ROUND_FILE.format(rank=rank)))


def load_round_in_flight(checkpoint: str, rank: int, device: Any) -> tuple[int, list] | None:
    """``(micro-step, buffered round)`` saved with ``checkpoint`` for this process, or ``None`` when the checkpoint
    sits on a round boundary. Refuses a checkpoint saved inside a round by a different number of processes."""
    path = os.path.join(checkpoint, ROUND_FILE.format(rank=rank))
    if not os.path.exists(path):
        others = [name for name in os.listdir(checkpoint) if name.startswith("generation_round-rank")]
        if others:
            raise ValueError(
                f"{checkpoint} was saved inside a generation round by {len(others)} processes and holds no round for "
                f"process {rank}: resume it with the same number of processes."
            )
        return None
    saved = torch.load(path, map_location=device, weights_only=True)
    return int(saved["step"]), saved["buffered_inputs"]


def saved_run_state(stateful_callbacks: dict, checkpoint: str | None) -> dict | None:
    """The run state saved with a checkpoint: from ``trainer_state.json``, else the legacy file, else ``None``."""
    entry = stateful_callbacks.get(RunStateCallback.__name__) if isinstance(stateful_callbacks, dict) else None
    if isinstance(entry, list):
        entry = entry[-1] if entry else None
    if isinstance(entry, dict) and entry.get("attributes", {}).get("snapshot"):
        return entry["attributes"]["snapshot"]
    if checkpoint is not None:
        path = os.path.join(checkpoint, LEGACY_STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    return None
