"""Running untrusted programs: the bubblewrap sandbox of the code verifier (:mod:`.bubblewrap`, its trusted in-sandbox
runner :mod:`.runner` and seccomp filter :mod:`.seccomp`) and the resource-limited runner of proof checkers
(:mod:`.limited_run`).

Standard library only (docs/architecture.md): nothing here imports torch, TRL or :mod:`trl_loo_gspo.verifiers`.
:mod:`.runner` (with :mod:`.wire`, :mod:`.candidate`, :mod:`.judge` before it) is never imported there:
:mod:`.bubblewrap` joins their texts, compiles them once and runs the code object with ``python -I -S``.
"""

from .bubblewrap import BWRAP_MISSING, Sandbox, SandboxLimits, SandboxRun
from .limited_run import OUTPUT_CAP, RunOutcome, run_limited

__all__ = ["BWRAP_MISSING", "OUTPUT_CAP", "RunOutcome", "Sandbox", "SandboxLimits", "SandboxRun", "run_limited"]
