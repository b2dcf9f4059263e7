"""KL to the reference when β = 0 (``reference_kl_logging_steps``, docs/method.md §5.2): a mixin.

The method asks to record KL(policy ‖ reference) even when the loss has no KL term. Every N optimizer steps the
generation batch gets two extra forward passes (policy, reference) and the global token-weighted k3 KL is logged as
``kl``. The reference is the disabled PEFT adapter for LoRA runs, else a frozen copy of the initial model.
"""

from __future__ import annotations

import copy

import torch
from accelerate.utils import DistributedType, is_peft_model
from trl.trainer.utils import use_adapter

from . import core
from .sampling_rows import loss_mask


class ReferenceKLMixin:
    """Mixed into ``LooGspoTrainer``."""

    _kl_ref_model = None
    kl_due_step = 0  # the next optimizer step at or after which a generation round measures the KL (checkpointed)

    def _reference_for_kl_logging(self):
        """A frozen copy of the initial policy for ``reference_kl_logging_steps`` when TRL built no reference (β = 0,
        no PEFT adapter to disable); ``None`` when not needed."""
        if self.args.reference_kl_logging_steps is None or self.beta != 0.0 or is_peft_model(self.model):
            return None
        if self.accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
            raise ValueError(
                f"reference_kl_logging_steps={self.args.reference_kl_logging_steps} with beta=0 needs a frozen copy "
                "of the model, which is not supported with DeepSpeed or FSDP sharding here: use LoRA (the reference "
                "is the disabled adapter), beta > 0, or turn the measurement off with "
                "`--reference_kl_logging_steps None` (the shipped recipes set it: leaving the flag off the command "
                "line keeps the recipe's value)."
            )
        reference = copy.deepcopy(self.accelerator.unwrap_model(self.model)).eval()
        reference.requires_grad_(False)
        return reference

    def _log_reference_kl(self, output: dict) -> None:
        """Every ``reference_kl_logging_steps`` steps with β = 0: the global token-weighted k3 KL to the reference,
        on the first generation round at or after each multiple of N."""
        every = self.args.reference_kl_logging_steps
        if every is None or self.beta != 0.0 or self.state.global_step < self.kl_due_step:
            return
        # Generation rounds need not fall on multiples of N (steps_per_generation ≠ GA): measure at the first round
        # at or after each multiple, once.
        self.kl_due_step = (self.state.global_step // every + 1) * every
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep, batch = output["completion_ids"].size(1), self.args.per_device_train_batch_size
        with torch.no_grad():
            logps = output.get("old_per_token_logps")
            if logps is None:
                logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, batch)
            if self._kl_ref_model is not None:
                ref, _, _ = self._get_per_token_logps_and_entropies(self._kl_ref_model, ids, attention, keep, batch)
            else:  # PEFT: the base model is the policy with its adapter disabled (TRL's own reference)
                unwrapped = self.accelerator.unwrap_model(self.model)
                with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                    ref, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, batch)
        mask = loss_mask(output).to(logps.dtype)
        totals = torch.stack([(core.k3_kl(logps, ref) * mask).sum(), mask.sum()]).to(torch.float64)
        total, count = self.accelerator.reduce(totals, reduction="sum").tolist()
        self._metrics["train"]["kl"].append(total / max(count, 1.0))
