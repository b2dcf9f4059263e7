"""Where a run record came from, so that a record made by other code or for another config is never reused silently.

Each record carries ``provenance``: the package version, the git commit (when the package runs from a checkout), a
hash of the package's source files (uncommitted edits included; the check that decides; the modules that only
write the report from records are left out: :data:`REPORT_ONLY`), the versions of the
libraries that set the training defaults (torch, transformers, TRL, peft), and a hash of everything that defines
the run: the task, the seed, the budget and evaluation settings, the policy spec, the recipe text and flags, and the
run's own settings (``common`` + its overrides — with the learning rate a sweep chose —, baseline or not) and the
split it is scored on. A demo task's data splits are generated from the task name, its options and the split seed by
the package's code, so the two hashes cover them; a recipe's datasets are covered by
name/path through the recipe text (their contents are not hashed).
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ...records import registration

PACKAGE = Path(__file__).resolve().parents[2]
_LIBRARIES = ("torch", "transformers", "trl", "peft")


#: Modules that only read run records to write the report (they train nothing and change no record), left out of
#: the source hash so that a report can be improved and rewritten from committed records without retraining them.
REPORT_ONLY = tuple(
    f"experiment/ablation/{name}.py"
    for name in ("report", "inference", "curves", "exact", "multiplicity", "secondaries", "curve_pairs")
)


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """SHA-256 over the package's ``.py`` files (relative path and bytes, in path order), except
    :data:`REPORT_ONLY`."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in REPORT_ONLY:
            continue
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout the package was imported from, or ``None`` (an installed wheel, an export, no git;
    never the commit of a repository the export sits in: :func:`trl_loo_gspo.records.registration.git_commit`)."""
    return registration.git_commit(PACKAGE)


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_provenance(
    plan: Any,
    name: str,
    overrides: dict,
    is_baseline: bool,
    seed: int,
    split: str = "validation",
    eval_every_tokens: int | None = None,
) -> dict[str, Any]:
    """The provenance of run (``name``, ``seed``) of ``plan`` scored on ``split`` (module docstring), evaluated every
    ``eval_every_tokens`` (default: the plan's spacing for ``split``)."""
    recipe = Path(plan.recipe).read_text() if plan.recipe else None
    tuning = split == "tuning"
    spec = {
        "task": plan.task,
        "task_options": plan.task_options,
        "split_seed": plan.split_seed,
        "eval_split": split,
        "seed": seed,
        "rollout_tokens": plan.sweep.get("rollout_tokens", plan.rollout_tokens) if tuning else plan.rollout_tokens,
        "eval_every_tokens": eval_every_tokens
        or (plan.sweep.get("eval_every_tokens", plan.eval_every_tokens) if tuning else plan.eval_every_tokens),
        "eval_samples": plan.eval_samples,
        "policy": plan.policy,
        "recipe": recipe,
        "recipe_overrides": plan.recipe_overrides,
        "common": plan.common,
        "overrides": overrides,
        "baseline": is_baseline,
        "stock_baseline": is_baseline and plan.stock_baseline,
    }
    if plan.eval_curve_samples is not None:  # (absent otherwise: the hashes of plans without it are unchanged)
        spec["eval_curve_samples"] = plan.eval_curve_samples
    config = json.dumps(spec, sort_keys=True, default=str).encode()
    return {
        "package_version": _version("trl-loo-gspo"),
        "commit": git_commit(),
        "source_hash": source_hash(),
        "libraries": {lib: _version(lib) for lib in _LIBRARIES},
        "config_hash": hashlib.sha256(config).hexdigest(),
    }


class StaleRecordsError(ValueError):
    """Records in the output directory were made by other code or for another config."""


def stale_reason(record: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """Why a record cannot stand for the run ``expected`` describes, or ``None`` when it can."""
    found = record.get("provenance")
    if not isinstance(found, dict):
        return "no provenance (made before records carried one)"
    if found.get("config_hash") != expected["config_hash"]:
        return "another config"
    if found.get("source_hash") != expected["source_hash"]:
        commit = found.get("commit") or "unknown commit"
        return f"other code ({commit[:12]}{', edited' if found.get('commit') == expected['commit'] else ''})"
    if found.get("libraries") != expected["libraries"]:
        return f"other library versions ({found.get('libraries')})"
    return None
