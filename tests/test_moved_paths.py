"""The module paths of release 0.1 that moved (``trl_loo_gspo/_compat.py``) keep working for users, with a
DeprecationWarning naming the new path, and the package itself no longer imports them."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import trl_loo_gspo
from trl_loo_gspo._compat import MOVED, PACKAGE

PACKAGE_DIR = Path(trl_loo_gspo.__file__).resolve().parent


def _forget(*names: str) -> None:
    """Drop old-path modules (and their submodules) from ``sys.modules``, so that importing them runs the finder."""
    for name in list(sys.modules):
        if any(name == old or name.startswith(old + ".") for old in names):
            del sys.modules[name]


def _moved_warnings(caught: list[warnings.WarningMessage], new: str) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning) and new in str(w.message)]


def test_old_module_path_is_the_new_module_with_a_warning():
    _forget("trl_loo_gspo.rewards")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("trl_loo_gspo.rewards.math")
    new = importlib.import_module("trl_loo_gspo.verifiers.math")
    assert old.MathVerifier is new.MathVerifier
    assert _moved_warnings(caught, "trl_loo_gspo.verifiers.math"), [str(w.message) for w in caught]
    assert "trl_loo_gspo.rewards.math" in _moved_warnings(caught, "trl_loo_gspo.verifiers.math")[0]


def test_from_old_package_import_name_gives_the_same_object_with_a_warning():
    _forget("trl_loo_gspo.rewards")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from trl_loo_gspo.rewards import MathVerifier
    from trl_loo_gspo.verifiers import MathVerifier as new

    assert MathVerifier is new
    assert _moved_warnings(caught, "trl_loo_gspo.verifiers"), [str(w.message) for w in caught]


@pytest.mark.parametrize("old", sorted(key for key in MOVED if key.startswith("rewards")))
def test_every_old_verifier_path_resolves(old):
    _forget(f"{PACKAGE}.rewards")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(f"{PACKAGE}.{old}")
    targets = [importlib.import_module(f"{PACKAGE}.{new}") for new in MOVED[old]]
    public = [name for name in dir(targets[0]) if not name.startswith("_")]
    assert public and all(getattr(module, name) is getattr(targets[0], name) for name in public)


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import in a package file (relative imports resolved)."""
    relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(relative.parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]  # from pkg import submodule
    return found


def test_the_package_does_not_import_old_paths():
    old_paths = {f"{PACKAGE}.{old}" for old in MOVED}
    offenders = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{line}: {module}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if path.name != "_compat.py"
        for line, module in _imported_modules(path)
        if module in old_paths
    ]
    assert offenders == [], "old module paths are for users only:\n" + "\n".join(offenders)
