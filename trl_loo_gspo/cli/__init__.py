"""The ``trl-loo-gspo`` command line: :func:`main` dispatches to ``train`` (:mod:`.train`), ``demo`` and ``ablate``
(:mod:`.main`). The console script ``trl-loo-gspo`` and ``python -m trl_loo_gspo`` call :func:`main`."""

from .main import main

__all__ = ["main"]
