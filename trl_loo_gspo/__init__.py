"""trl-loo-gspo: a drop-in TRL ``GRPOTrainer`` for RLVR with leave-one-out advantages, GSPO response-level
clipping and a global token-total loss denominator. The method, and the
§ numbers that comments, help texts and errors cite (``# §3.2``, "method §3.2"), are in ``docs/method.md``.

The top-level names are imported on first use (PEP 562), so that ``import trl_loo_gspo.verifiers`` — a reward
library any RL framework can use — loads neither torch, transformers nor TRL; ``from trl_loo_gspo import
LooGspoTrainer`` imports the trainer as before. The TRL range check runs at import either way (it reads package
metadata only).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._compat import check_trl_version

check_trl_version()

__version__ = "0.1.0"

#: Top-level names and the module that holds each, imported on first access.
_LAZY = {"LooGspoConfig": ".config", "LooGspoTrainer": ".trainer", "algorithms": ".algorithms"}

__all__ = ["LooGspoConfig", "LooGspoTrainer", "algorithms", "__version__"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from . import algorithms
    from .config import LooGspoConfig
    from .trainer import LooGspoTrainer


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if name == "algorithms" else getattr(module, name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
