"""The trainer's boundary with TRL: the values it swaps into TRL's objects for one ``super()`` call, as context
managers, so that a swap is visibly scoped and always undone (also when the call raises). Used by ``trainer.py``
only (with ``forward.py``, the one place TRL's state changes: tests/test_architecture.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .generation import per_batch_metrics, restore_per_batch_metrics


@contextmanager
def swapped(obj: Any, **values: Any) -> Iterator[Any]:
    """Within the block, ``obj``'s attributes named in ``values`` hold those values; afterwards, whatever happens in
    the block, the values they held before."""
    saved = {name: getattr(obj, name) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield obj
    finally:
        for name, value in saved.items():
            setattr(obj, name, value)


@contextmanager
def rolled_back(metrics: dict[str, list], state: Any) -> Iterator[None]:
    """TRL's per-batch generation metrics (``num_tokens``, ``completions/*``) and the Trainer's
    ``state.num_input_tokens_seen`` as they were before the block: a sampling round's call describes rows that may
    never be trained (the trained batch logs its own)."""
    saved, seen = per_batch_metrics(metrics), state.num_input_tokens_seen
    try:
        yield
    finally:
        restore_per_batch_metrics(metrics, saved)
        state.num_input_tokens_seen = seen
