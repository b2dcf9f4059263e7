"""What a launch asked for against what accelerate set up (pure decisions; the trainer raises or warns).

Two launch mistakes train silently wrong on CPU machines (measured with accelerate 1.15, torch 2.13, 2 processes):

* ``torchrun`` / ``accelerate launch`` with 2 processes but without ``use_cpu`` on a machine without GPUs (or with
  ``--ddp_backend gloo``): each process reports ``num_processes == 2`` (or 1) and ``DistributedType.NO`` — nothing
  is all-reduced, every rank trains on its own rows with its own token count. This is refused.
* an FSDP (or DeepSpeed) accelerate config launched on CPU: accelerate only takes its FSDP branch for multi-device
  launch types, so the run is plain DDP (``MULTI_CPU``) with unsharded weights. Nothing else says so; this warns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelerate.utils import DistributedType
from accelerate.utils.environment import str_to_bool


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """accelerate's own reading of a flag variable (``parse_flag_from_env``), from the given mapping."""
    return bool(str_to_bool(environ.get(name, "false"), to_bool=True))


def requested_engine(environ: Mapping[str, str], args: Any) -> DistributedType | None:
    """The sharding engine the launch asked for: from ``accelerate launch``'s environment (``ACCELERATE_USE_FSDP`` /
    ``ACCELERATE_USE_DEEPSPEED``, set from the config file) or the training arguments (``fsdp``, ``deepspeed``)."""
    if _flag(environ, "ACCELERATE_USE_FSDP") or getattr(args, "fsdp", None):
        return DistributedType.FSDP
    if _flag(environ, "ACCELERATE_USE_DEEPSPEED") or getattr(args, "deepspeed", None):
        return DistributedType.DEEPSPEED
    return None


def launch_error(world_size: int, num_processes: int, distributed_type: DistributedType) -> str | None:
    """Why this process group would not train as one run (``None`` when it would)."""
    if world_size <= 1 and num_processes <= 1:
        return None
    if num_processes == 1 or distributed_type == DistributedType.NO:
        return (
            f"This process was launched as one of WORLD_SIZE={world_size} processes, but accelerate set up "
            f"{num_processes} process(es) with DistributedType.NO: no gradient is all-reduced and there is no global "
            "token count, so every process would train alone on its own rows. On CPU machines pass use_cpu=True "
            "(--use_cpu true; --ddp_backend gloo alone is not enough) with a multi-process launcher (e.g. "
            "recipes/accelerate/cpu-2proc.yaml); on GPUs check that each process sees a GPU."
        )
    return None


def engine_warning(requested: DistributedType | None, actual: DistributedType) -> str | None:
    """A warning when the launch asked for FSDP or DeepSpeed and accelerate set up something else."""
    if requested is None or requested == actual:
        return None
    name = "FSDP" if requested == DistributedType.FSDP else "DeepSpeed"
    cpu = (
        " accelerate only takes its FSDP branch for multi-device (GPU/XPU/NPU/...) launches, so a CPU launch of an "
        "FSDP config runs as plain DDP."
        if requested == DistributedType.FSDP and actual == DistributedType.MULTI_CPU
        else ""
    )
    return (
        f"The launch asked for {name} (accelerate config or training arguments), but accelerate set up "
        f"{actual.value}: the model is NOT sharded and every process holds a full copy.{cpu} Check the accelerate "
        "config and that every process sees its accelerator (docs/recipes.md, section 2)."
    )
