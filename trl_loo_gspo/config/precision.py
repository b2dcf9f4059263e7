"""The default precision on a machine without a bf16-capable accelerator.

``GRPOConfig`` leaves ``bf16`` unset and then turns it on (``bf16=True`` unless ``fp16``), and transformers refuses
that on a machine without a bf16 GPU ("Your setup doesn't support bf16/gpu"), so the README's drop-in snippet and
``LooGspoTrainer(args=None)`` would fail on a laptop. When the user did not choose (``bf16`` and ``fp16`` unset or
false) and transformers' own check says bf16 is not available, we train in float32 instead and say so once.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_NOTED = False

CPU_PRECISION_NOTE = (
    "No GPU with bf16 support found: training in float32 (bf16=False). Set bf16=False yourself to silence this, or "
    "bf16=True with use_cpu=True to train in bf16 on the CPU."
)


def bf16_supported(use_cpu: bool) -> bool:
    """transformers' own test for accepting ``bf16=True`` (``TrainingArguments._validate_args``)."""
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    return bool(use_cpu) or is_torch_bf16_gpu_available() or is_torch_xla_available()


def resolve_bf16(args) -> None:
    """Set ``args.bf16 = False`` when it is unset, fp16 is off and this machine has no bf16-capable accelerator.

    Runs before ``GRPOConfig.__post_init__``, which would otherwise default ``bf16`` to ``True``. ``use_cpu=True``
    counts as a choice (transformers accepts bf16 on the CPU then): ``bf16`` stays as TRL resolves it.
    """
    global _NOTED
    if args.bf16 is not None or args.fp16 or bf16_supported(args.use_cpu):
        return
    args.bf16 = False
    if not _NOTED:
        _NOTED = True
        logger.warning(CPU_PRECISION_NOTE)
