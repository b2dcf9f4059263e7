"""Equal-budget ablations (``trl-loo-gspo ablate``, method §5.2): :mod:`.plan` (the YAML, its checks and the run
matrix), :mod:`.runner` (training the runs, their records and the report), :mod:`.check` (plan checks),
:mod:`.claims` (sharing the runs between processes), :mod:`.progress` (what it prints meanwhile) and :mod:`.stats`
(paired statistics)."""

from .plan import AblationPlan
from .runner import run_ablation

__all__ = ["AblationPlan", "run_ablation"]
