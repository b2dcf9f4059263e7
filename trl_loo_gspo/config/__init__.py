"""Configuration: :class:`LooGspoConfig` (TRL's ``GRPOConfig`` plus one flag per component, fields kept as the
user wrote them) and the frozen :class:`Objective` it resolves to (:mod:`trl_loo_gspo.config.objective`)."""

from .fields import LooGspoConfig
from .objective import LooGspoConfigWarning, Objective, resolve

__all__ = ["LooGspoConfig", "LooGspoConfigWarning", "Objective", "resolve"]
