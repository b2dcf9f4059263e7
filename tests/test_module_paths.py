"""Module paths are real: the 0.1 paths that moved are gone (no forwarding shim: CHANGELOG.md lists where their
names live now), and every dotted ``trl_loo_gspo.…`` reference in the shipped code, docs and tests names a module
of the package, or a name its package exports."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from .test_docs import _shipped_texts

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "trl_loo_gspo"
REFERENCE = re.compile(r"trl_loo_gspo(?:\.[A-Za-z_]\w*)+")
#: References that are not module paths (attribute look-ups the tests make on purpose).
NOT_PATHS = {"trl_loo_gspo.__file__", "trl_loo_gspo.no_such_name"}


@pytest.mark.parametrize("old", ["trl_loo_gspo.core", "trl_loo_gspo.rewards.math", "trl_loo_gspo.sampling"])
def test_the_old_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert not [finder for finder in sys.meta_path if type(finder).__module__.startswith("trl_loo_gspo")]


def _resolves(reference: str) -> bool:
    """Whether ``trl_loo_gspo.a.b…`` names a package or module file, then (maybe) attributes of that module; or a
    name the enclosing package's ``__init__.py`` exports."""
    here = PACKAGE_DIR
    for part in reference.split(".")[1:]:
        if (here / part).is_dir():
            here = here / part
        elif (here / f"{part}.py").is_file():
            return True  # the rest are attributes of that module
        else:
            init = here / "__init__.py"
            return init.is_file() and re.search(rf"\b{re.escape(part)}\b", init.read_text()) is not None
    return True


def test_every_dotted_reference_names_a_real_module_or_export():
    stale = [
        f"{file.relative_to(ROOT)}:{text[: match.start()].count(chr(10)) + 1}: {match.group(0)}"
        for file, text in _shipped_texts()
        if file.name not in ("CHANGELOG.md", Path(__file__).name)  # these name the old paths on purpose
        for match in REFERENCE.finditer(text)
        if match.group(0) not in NOT_PATHS and not _resolves(match.group(0))
    ]
    assert stale == [], "references to module paths that do not exist:\n" + "\n".join(stale)
