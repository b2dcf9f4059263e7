"""Compatibility: fail at import, with a clear message, outside the TRL range this package is tested against; and
keep the module paths of release 0.1 that moved in the layout of docs/architecture.md working for one release.

``import trl_loo_gspo.rewards.math`` (or ``from trl_loo_gspo.core import loo_advantages``) resolves to a stand-in
module that forwards every attribute to the module(s) that now hold it, with a ``DeprecationWarning`` naming the new
path. Written by hand: neither the standard library nor the packaging tools offer a module-rename shim.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any

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


PACKAGE = "trl_loo_gspo"

#: old path (relative to the package) -> new module(s) that hold its names, first match wins.
MOVED: dict[str, tuple[str, ...]] = {
    # pure functions over tensors
    "core": ("algorithms.advantages", "algorithms.losses", "algorithms.aggregation"),
    "sampling": ("algorithms.group_filter",),
    "controllers": ("algorithms.controllers",),
    "process": ("algorithms.spans",),
    "step_accounting": ("algorithms.step_accounting",),
    # configuration
    "objective": ("config.objective",),
    "precision": ("config.precision",),
    # trainer components
    "dynamic_sampling": ("trainer.rollout",),
    "sampling_rows": ("trainer.rows",),
    "entropy_feedback": ("trainer.entropy",),
    "reference_kl": ("trainer.reference_kl",),
    "process_feedback": ("trainer.process",),
    "forward": ("trainer.forward",),
    "loss_metrics": ("trainer.step",),
    "run_checks": ("trainer.checks",),
    "launch": ("trainer.launch",),
    "run_state": ("trainer.run_state",),
    "budget": ("trainer.budget",),
    "reporting": ("trainer.reporting",),
    "validation": ("trainer.validation",),
    "publishing": ("trainer.publishing",),
    # run records and the model card
    "registration": ("records.registration",),
    "hub": ("records.card",),
    # experiments and entry points
    "ablation": ("experiment.ablation.runner", "experiment.ablation.plan"),
    "ablation_check": ("experiment.ablation.check",),
    "ablation_claims": ("experiment.ablation.claims",),
    "ablation_stats": ("experiment.ablation.stats",),
    "data": ("experiment.data",),
    "train": ("experiment.build", "cli.train"),
    "train_parser": ("experiment.parser",),
    "tiny": ("demo.tiny",),
    # verifiers and the sandbox
    "rewards": ("verifiers",),
    "rewards.base": ("verifiers.base",),
    "rewards.math": ("verifiers.math",),
    "rewards.shaping": ("verifiers.shaping",),
    "rewards.fences": ("verifiers.text",),
    "rewards.code": ("verifiers.code.verifier",),
    "rewards.code_spans": ("verifiers.code.spans",),
    "rewards.code_analysis": ("verifiers.code.hacks",),
    "rewards.proofs": ("verifiers.proofs.coq", "verifiers.proofs", "verifiers.proofs.backend"),
    "rewards.coq_script": ("verifiers.proofs.script",),
    "rewards.sandbox": ("sandbox.bubblewrap",),
    "rewards.sandbox_runner": ("sandbox.runner",),
    "rewards.seccomp": ("sandbox.seccomp",),
    "rewards.limited_run": ("sandbox.limited_run",),
}


def new_paths(old: str) -> tuple[str, ...]:
    """Full new module paths for an old path relative to the package (``"rewards.math"``)."""
    return tuple(f"{PACKAGE}.{target}" for target in MOVED[old])


class _Forwarding(types.ModuleType):
    """Stand-in for a moved module: attributes are looked up in the new modules, in order."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for path in self.__dict__["_targets"]:
            module = importlib.import_module(path)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (moved to {', '.join(self._targets)}) has no {name!r}")

    def __dir__(self) -> list[str]:
        names: set[str] = set()
        for path in self.__dict__["_targets"]:
            names.update(dir(importlib.import_module(path)))
        return sorted(names)


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old paths of :data:`MOVED` (installed after the regular finders: a real module always wins)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        old = fullname[len(PACKAGE) + 1 :]
        if old not in MOVED:
            return None
        is_package = any(key.startswith(old + ".") for key in MOVED)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Forwarding(spec.name)
        module._targets = new_paths(spec.name[len(PACKAGE) + 1 :])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        targets = module.__dict__["_targets"]
        warnings.warn(
            f"{module.__name__} moved to {' and '.join(targets)} (docs/architecture.md); the old path works until "
            "the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        if module.__spec__ is not None and module.__spec__.submodule_search_locations is not None:
            module.__path__ = []  # a package: its old submodules resolve through this finder too
        for path in targets:
            importlib.import_module(path)


def install_moved_paths() -> None:
    """Add the finder once (idempotent)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
