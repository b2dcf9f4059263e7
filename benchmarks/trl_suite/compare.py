"""Compare per-test outcomes of two junit-xml reports (stock TRL vs the swapped import).

Prints the counts per outcome for each report and every test whose outcome differs; exits 1 when a test that
passed on stock did not pass on ours (a regression). Several xml files may be given per side (split runs).

    python compare.py --stock stock.xml [stock-tools.xml] --ours ours.xml [ours-tools.xml]
    python compare.py --stock stock.xml --ids passed,skipped     # the ids, one a line (for run.sh --ours-only)
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter

OUTCOMES = ("passed", "failed", "error", "skipped")


def outcomes(paths: list[str]) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the message)."""
    result: dict[str, tuple[str, str]] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                child = case.find(tag)
                if child is not None:
                    outcome = "failed" if tag == "failure" else tag
                    message = (child.get("message") or child.text or "").strip().splitlines()[:1]
                    message = message[0][:200] if message else ""
                    break
            result[name] = (outcome, message)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stock", nargs="+", required=True)
    parser.add_argument("--ours", nargs="+")
    parser.add_argument("--ids", metavar="OUTCOMES", help="print the ids of the stock tests with these outcomes")
    args = parser.parse_args()
    if args.ids:
        wanted = set(args.ids.split(","))
        print("\n".join(name for name, (outcome, _) in sorted(outcomes(args.stock).items()) if outcome in wanted))
        return 0
    if not args.ours:
        parser.error("--ours is required unless --ids is given")
    stock, ours = outcomes(args.stock), outcomes(args.ours)
    for label, run in (("stock", stock), ("ours", ours)):
        counts = Counter(outcome for outcome, _ in run.values())
        print(f"{label:5s} ({len(run)} tests): " + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES))
    absent = ("absent", "")
    not_run = Counter(stock[n][0] for n in stock.keys() - ours.keys())
    if not_run:
        print("not run on ours (run.sh --ours-only): " + ", ".join(f"{c} {o} on stock" for o, c in not_run.items()))
    differing = sorted(n for n in ours if stock.get(n, absent)[0] != ours[n][0])
    regressions = [n for n in differing if stock.get(n, absent)[0] == "passed"]
    print(f"differing outcomes: {len(differing)}; passed on stock but not on ours: {len(regressions)}")
    for name in differing:
        s, o = stock.get(name, absent), ours.get(name, absent)
        flag = "REGRESSION " if name in regressions else ""
        print(f"  {flag}{name}: stock {s[0]} -> ours {o[0]}")
        for label, (outcome, message) in (("stock", s), ("ours", o)):
            if message and outcome != "passed":
                print(f"      {label}: {message}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
