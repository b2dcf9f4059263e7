"""Check a whole ablation plan before its first run: every key at every level, and every run's config built as a
``LooGspoConfig`` (the baseline's too). All problems are reported at once, naming the plan, the run and the key,
with a close match for a misspelled key; nothing is trained (no model or trainer is built)."""

from __future__ import annotations

import difflib
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

BASELINE_KEYS = ("name", "config", "trainer")
VARIANT_KEYS = ("name", "config", "base")


def _unknown(keys: Iterable[str], allowed: Iterable[str], where: str) -> list[str]:
    allowed = list(allowed)
    problems = []
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
            problems.append(f"{where}: unknown key {key!r}{hint}")
    return problems


def structure_problems(raw: dict[str, Any], plan_keys: Iterable[str], config_fields: Iterable[str]) -> list[str]:
    """Unknown or misplaced keys of the raw YAML mapping, at every level."""
    config_fields = list(config_fields)
    problems = _unknown(raw, plan_keys, "plan")
    common = raw.get("common") or {}
    if not isinstance(common, dict):
        problems.append("plan: `common` must be a mapping of config fields")
    else:
        problems += _unknown(common, config_fields, "common")
    runs = [("baseline", raw.get("baseline") or {}, BASELINE_KEYS)]
    variants = raw.get("variants") or []
    if not isinstance(variants, list):
        problems.append("plan: `variants` must be a list")
        variants = []
    for i, variant in enumerate(variants):
        runs.append(
            (
                f"variant {variant.get('name', f'#{i + 1}')!r}" if isinstance(variant, dict) else f"variant #{i + 1}",
                variant,
                VARIANT_KEYS,
            )
        )
    for where, run, allowed in runs:
        if not isinstance(run, dict):
            problems.append(f"{where}: must be a mapping with {', '.join(allowed)}")
            continue
        problems += _unknown(run, allowed, where)
        if where != "baseline" and "name" not in run:
            problems.append(f"{where}: missing `name`")
        config = run.get("config") or {}
        if not isinstance(config, dict):
            problems.append(f"{where}: `config` must be a mapping of config fields")
            continue
        problems += _unknown(config, config_fields, f"{where} config")
    return problems


def config_problems(
    runs: Iterable[tuple[str, dict, bool]], build: Callable[[str, dict, bool, bool], Any]
) -> list[str]:
    """Build each run's config with ``build(name, overrides, is_baseline, on_cpu)``; every error is one problem.
    A plan written for another machine (bf16 on GPUs) is checked with its precision and device set for this CPU."""
    problems = []
    for name, overrides, is_baseline in runs:
        where = "baseline" if is_baseline else f"variant {name!r}"
        try:
            try:
                build(name, overrides, is_baseline, False)
            except ValueError as error:
                if not _device_error(error):
                    raise
                # The plan is checked on this machine, not the one it is for: check its fields on the CPU.
                build(name, overrides, is_baseline, True)
        except (ValueError, TypeError) as error:
            problems.append(f"{where}: {error}")
    return problems


def _device_error(error: Exception) -> bool:
    """A refusal of a precision or device this machine does not have: transformers' own, or the recipe parser's
    (``experiment/parser.py``: "needs a GPU with bf16 support")."""
    text = str(error)
    return "bf16/gpu" in text or "needs a GPU with bf16 support" in text or ("fp16" in text and "device" in text)


def config_field_names() -> list[str]:
    from ...config import LooGspoConfig

    return [f.name for f in fields(LooGspoConfig) if f.init]


def scratch_dir() -> str:
    return tempfile.mkdtemp(prefix="ablation-check-")
