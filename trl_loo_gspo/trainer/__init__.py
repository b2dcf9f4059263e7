"""Everything that touches TRL: :class:`LooGspoTrainer` and the components it owns (docs/architecture.md)."""

from .trainer import LooGspoTrainer

__all__ = ["LooGspoTrainer"]
