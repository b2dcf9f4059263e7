"""Compatibility: fail at import, with a clear message, outside the TRL range this package is tested against."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

#: Tested TRL range: the private hooks listed in docs/trl-compatibility.md are checked against these releases.
TRL_MIN = "1.16.0"
TRL_MAX_EXCLUSIVE = "1.17.0"


def check_trl_version(installed: str | None = None) -> str:
    """Return the installed TRL version, or raise ImportError if it is missing or outside the tested range."""
    if installed is None:
        try:
            installed = version("trl")
        except PackageNotFoundError as err:  # pragma: no cover - pip installs trl as a dependency
            raise ImportError(
                f"trl-loo-gspo needs TRL >= {TRL_MIN}, < {TRL_MAX_EXCLUSIVE}; TRL is not installed. "
                f"Run: pip install 'trl>={TRL_MIN},<{TRL_MAX_EXCLUSIVE}'"
            ) from err
    if not Version(TRL_MIN) <= Version(installed) < Version(TRL_MAX_EXCLUSIVE):
        raise ImportError(
            f"trl-loo-gspo is tested with TRL >= {TRL_MIN}, < {TRL_MAX_EXCLUSIVE}, but TRL {installed} is installed. "
            "It overrides private GRPOTrainer hooks (docs/trl-compatibility.md) that change between releases. "
            f"Run: pip install 'trl>={TRL_MIN},<{TRL_MAX_EXCLUSIVE}'"
        )
    return installed
