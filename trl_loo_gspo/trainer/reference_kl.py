"""KL to the reference when β = 0 (``reference_kl_logging_steps``, docs/method.md §5.2): a component the trainer owns.

The method asks to record KL(policy ‖ reference) even when the loss has no KL term. Every N optimizer steps the
generation batch gets two extra forward passes (policy, reference) and the global token-weighted k3 KL is logged as
``kl``. The reference is the disabled PEFT adapter for LoRA runs, else a frozen copy of the initial model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from accelerate.utils import DistributedType, is_peft_model
from trl.trainer.utils import use_adapter

from ..algorithms.losses import k3_kl
from .rows import loss_mask


class ReferenceKL:
    """When the next measurement is due (checkpointed) and the frozen reference it measures against."""

    def __init__(self, every: int | None, batch_size: int, beta: float, model: Any, accelerator: Any) -> None:
        self.every = every if beta == 0.0 else None  # the plan's reference_kl_logging_steps
        self.batch_size = batch_size
        self.accelerator = accelerator
        self.due_step = 0  # the next optimizer step at or after which a generation round measures the KL
        self.reference = None
        if self.every is None or is_peft_model(model):
            return
        if accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
            raise ValueError(
                f"reference_kl_logging_steps={self.every} with beta=0 needs a frozen copy "
                "of the model, which is not supported with DeepSpeed or FSDP sharding here: use LoRA (the reference "
                "is the disabled adapter), beta > 0, or turn the measurement off with "
                "`--reference_kl_logging_steps None` (the shipped recipes set it: leaving the flag off the command "
                "line keeps the recipe's value)."
            )
        self.reference = copy.deepcopy(accelerator.unwrap_model(model)).eval()
        self.reference.requires_grad_(False)

    def log(self, metrics: dict[str, list], output: dict, global_step: int, model: Any, forward: Callable) -> None:
        """:meth:`measure`, logged as ``kl`` when measured."""
        kl = self.measure(output, global_step, model, forward)
        if kl is not None:
            metrics["kl"].append(kl)

    def measure(self, output: dict, global_step: int, model: Any, forward: Callable) -> float | None:
        """The global token-weighted k3 KL of this generation round's answers, on the first round at or after each
        multiple of N (rounds need not fall on multiples when steps_per_generation ≠ GA); else ``None``.

        ``forward(model, ids, attention, logits_to_keep, batch_size)`` is the trainer's per-token log-prob helper."""
        if self.every is None or global_step < self.due_step:
            return None
        self.due_step = (global_step // self.every + 1) * self.every
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep = output["completion_ids"].size(1)
        with torch.no_grad():
            logps = output.get("old_per_token_logps")
            if logps is None:
                logps, _, _ = forward(model, ids, attention, keep, self.batch_size)
            if self.reference is not None:
                ref, _, _ = forward(self.reference, ids, attention, keep, self.batch_size)
            else:  # PEFT: the base model is the policy with its adapter disabled (TRL's own reference)
                unwrapped = self.accelerator.unwrap_model(model)
                with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                    ref, _, _ = forward(model, ids, attention, keep, self.batch_size)
        mask = loss_mask(output).to(logps.dtype)
        totals = torch.stack([(k3_kl(logps, ref) * mask).sum(), mask.sum()]).to(torch.float64)
        total, count = self.accelerator.reduce(totals, reduction="sum").tolist()
        return total / max(count, 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"due_step": self.due_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.due_step = int(state["due_step"])
