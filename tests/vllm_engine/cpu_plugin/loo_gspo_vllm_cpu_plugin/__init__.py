"""vLLM general plugin (test harness): CPU linear layers keep their weights and compute with ``F.linear``.

After loading, vLLM's CPU backend packs each 2-D linear weight for oneDNN / sgl-kernel and replaces the parameter with
an empty one that has no ``weight_loader`` (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``). TRL's
colocate weight sync then fails, and ``reload_weights`` succeeds without changing what the packed kernels compute.
This plugin swaps that dispatch for one that leaves ``layer.weight`` in place and reads it at every call, so both
sync paths change what vLLM samples. vLLM loads it in every process (engine core and server workers included)
through the ``vllm.general_plugins`` entry point. The cost: vLLM's own CPU GEMM kernels are not exercised.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_original: Callable[[torch.nn.Module, bool], None] | None = None


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


def keep_weights_dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Replacement of ``dispatch_cpu_unquantized_gemm``: 2-D weights stay parameters; other layers unchanged."""
    weight = layer.weight
    if weight.ndim != 2 or weight.is_meta:
        assert _original is not None
        _original(layer, remove_weight)
        return
    layer.cpu_linear = _linear
    layer.loo_gspo_keeps_weight = True  # lets a test check that the plugin ran in the engine process


def register() -> None:
    """Entry point: patch the module attribute that vLLM's linear and embedding layers import at load time."""
    global _original
    from vllm.model_executor.layers import utils

    if utils.dispatch_cpu_unquantized_gemm is keep_weights_dispatch:
        return
    _original = utils.dispatch_cpu_unquantized_gemm
    utils.dispatch_cpu_unquantized_gemm = keep_weights_dispatch
