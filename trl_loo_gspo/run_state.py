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
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

#: Extra-state file of checkpoints written before 0.x moved to ``stateful_callbacks`` (still read on resume).
LEGACY_STATE_FILE = "loo_gspo_state.json"


class RunStateCallback(TrainerCallback, ExportableState):
    """Saves ``trainer.run_state()`` with every checkpoint (see the module docstring)."""

    def __init__(self, trainer: Any = None) -> None:
        self.trainer = trainer

    def state(self) -> dict:
        snapshot = self.trainer.run_state() if self.trainer is not None else {}
        return {"args": {}, "attributes": {"snapshot": snapshot}}


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
