"""Drop-in behaviour with TRL's own expectations: hooks work on a trainer that TRL code builds without __init__."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trl_loo_gspo import LooGspoTrainer


def test_generate_hook_works_before_init_sampling():
    """TRL's tests build a GRPOTrainer with ``object.__new__`` and call ``_generate``: our replay-aware override must
    defer to TRL (here: TRL's own error for a rollout_func missing keys), not fail on an unset attribute."""
    trainer = object.__new__(LooGspoTrainer)
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"), is_main_process=True, gather=lambda t: t)
    trainer.args = SimpleNamespace(report_to=[])
    trainer.model = SimpleNamespace(training=True)
    trainer.state = SimpleNamespace(global_step=1)
    trainer._last_loaded_step = 1
    trainer.use_vllm = False
    trainer.use_transformers_continuous_batching = False
    trainer.rollout_func = lambda prompts, trainer: {"prompt_ids": [[1]], "completion_ids": [[2]]}
    with pytest.raises(ValueError, match="rollout_func must return keys"):
        trainer._generate(["prompt"])
    assert trainer._replay is None
