"""trl-loo-gspo: a drop-in TRL ``GRPOTrainer`` for RLVR with leave-one-out advantages, GSPO response-level
clipping and a global token-total loss denominator. The method, and the
§ numbers that comments, help texts and errors cite (``# §3.2``, "method §3.2"), are in ``docs/method.md``."""

from ._compat import check_trl_version, install_moved_paths

check_trl_version()
install_moved_paths()  # the 0.1 module paths keep working for one release

from . import algorithms  # noqa: E402
from .config import LooGspoConfig  # noqa: E402
from .trainer import LooGspoTrainer  # noqa: E402

__version__ = "0.1.0"

__all__ = ["LooGspoConfig", "LooGspoTrainer", "algorithms", "__version__"]
