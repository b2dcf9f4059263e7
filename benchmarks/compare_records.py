"""Are two ablation run records the same run? Compares every field of two ``runs/<variant>/seed<k>.json`` records
(NaN equal to NaN), except the wall time (``seconds``) and the commit in the provenance (a clean clone of a later
commit with the same package source is the same code: the source hash decides). Exit status 0 when they agree.
Usage::

    python benchmarks/compare_records.py ORIGINAL.json RETRAINED.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

IGNORED = {"seconds"}
IGNORED_PROVENANCE = {"commit"}


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN, recursively through lists and mappings."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def differences(original: dict, retrained: dict) -> list[str]:
    """The fields in which two records differ (besides the ignored ones)."""
    out = []
    for key in sorted(set(original) | set(retrained)):
        if key in IGNORED:
            continue
        a, b = original.get(key), retrained.get(key)
        if key == "provenance" and isinstance(a, dict) and isinstance(b, dict):
            a = {k: v for k, v in a.items() if k not in IGNORED_PROVENANCE}
            b = {k: v for k, v in b.items() if k not in IGNORED_PROVENANCE}
        if not same(a, b):
            out.append(f"{key}: {a!r} != {b!r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("original")
    parser.add_argument("retrained")
    args = parser.parse_args()
    with open(args.original) as f, open(args.retrained) as g:
        original, retrained = json.load(f), json.load(g)
    found = differences(original, retrained)
    fields = len(set(original) - IGNORED)
    if found:
        print(f"{len(found)} of {fields} fields differ:", *found, sep="\n  ")
        sys.exit(1)
    print(
        f"the same run: all {fields} fields agree "
        f"(wall time {original.get('seconds')} s vs {retrained.get('seconds')} s)"
    )


if __name__ == "__main__":
    main()
