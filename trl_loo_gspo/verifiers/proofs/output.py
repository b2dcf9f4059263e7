"""Reading ``coqc``'s output: open-goal counts of ``Show.``, the ``Print Assumptions`` report, error locations.

Nothing here decides a verdict on its own: :mod:`.coq` says which channel each verdict rests on.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["count_goals", "error_excerpt", "error_location", "parse_assumptions", "trusted_header"]

_GOALS_HEADER_RE = re.compile(r"(\d+) (?:focused )?goals?(?: |$)")
_GOAL_ENTRY_RE = re.compile(r"goal \d+ is:$")


def count_goals(report: str | None) -> int | None:
    """Open goals (focused + unfocused) in the output of ``Show.`` under ``Set Printing Unfocused``; ``None`` if odd.

    Formats (Coq 8.16 ``Printer.pr_open_subgoals``): ``No more goals.`` / ``All the remaining goals are on the
    shelf.`` (0); ``This subproof is complete, but there are some unfocused goals.`` ... ``N goals`` followed by
    the N unfocused goals (N); ``N goals`` or ``N focused goals (shelved: k)`` with the focused goals, then, when
    there are unfocused ones, ``*** Unfocused goals:`` and one ``goal k is:`` line each (N + their number). Only
    lines that begin outside a string literal are read — the ``"`` characters before them are even in number, as
    Coq prints a quote inside a string as ``""`` and identifiers cannot contain one — so a goal that mentions a
    string such as ``"\n*** Unfocused goals:\ngoal 9 is:"`` cannot change the count.
    """
    if not report:
        return None
    lines: list[str] = []
    quotes = 0
    for line in report.splitlines():
        if quotes % 2 == 0:
            lines.append(line)
        quotes += line.count('"')
    if not lines:
        return None
    if lines[0].startswith(("No more goals", "All the remaining goals are on the shelf")):
        return 0
    complete = lines[0].startswith("This subproof is complete")
    headers = [(i, match) for i, match in enumerate(map(_GOALS_HEADER_RE.match, lines)) if match is not None]
    if not headers or not (complete or headers[0][0] == 0):
        return None  # a format this parser does not know
    count = int(headers[0][1].group(1))
    if complete:
        return count
    rest = lines[1:]
    if "*** Unfocused goals:" in rest:
        rest = rest[rest.index("*** Unfocused goals:") + 1 :]
        count += sum(1 for line in rest if _GOAL_ENTRY_RE.match(line))
    return count


def parse_assumptions(report: str) -> tuple[list[str], list[str]]:
    """Axiom names, and other (unsafe) entries, from ``Print Assumptions`` output."""
    text = report.strip()
    if text.startswith("Closed under the global context"):
        return [], []
    axioms: list[str] = []
    unsafe: list[str] = []
    section = None
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue  # continuation of a multi-line type
        if line.rstrip().endswith(":") and " : " not in line:
            section = line.rstrip()[:-1]
            if section != "Axioms":
                unsafe.append(section)
            continue
        match = re.match(r"^(\S+) :", line)
        if match and section == "Axioms":
            axioms.append(match.group(1))
        elif match:
            unsafe.append(f"{section}: {match.group(1)}")
        else:
            unsafe.append(f"unrecognised: {line[:200]}")
    return axioms, unsafe


#: The location line of ``coqc``'s error: at the start of a line and directly followed by ``Error``; the first one
#: is taken (``coqc`` stops at its first error; text a failing tactic prints comes after it).
_LOCATION_RE = re.compile(r'^File "[^"\n]*", line (\d+), characters (\d+)-(\d+):\n?Error', re.M)


def trusted_header(theorem: str, preamble: str) -> tuple[str, int]:
    """The trusted head of a checked file — the preamble, the statement (with its final ``.``) and ``Proof.`` — and
    the number of the first line after it."""
    statement = theorem.strip()
    if not statement.endswith("."):
        statement += "."
    header = (preamble.strip() + "\n" if preamble.strip() else "") + statement + "\nProof.\n"
    return header, header.count("\n") + 1


def error_location(output: str, first_proof_line: int, end_line: int) -> dict[str, Any] | None:
    """Where ``coqc`` located its error (see :data:`_LOCATION_RE`), by region of the checked file; informational:
    a proof can print a line that looks like one, so no verdict depends on it."""
    match = _LOCATION_RE.search(output)
    if match is None:
        return None
    line, start, stop = (int(g) for g in match.groups())
    if line < first_proof_line - 1:
        region = "preamble"  # the trusted preamble or statement
    elif line == first_proof_line - 1:
        region = "proof_keyword"
    elif line < end_line:
        region = "proof"
    elif line == end_line:
        region = "qed"
    else:
        region = "footer"
    rel = line - first_proof_line + 1 if region == "proof" else line
    return {"region": region, "line": rel, "chars": [start, stop]}


def error_excerpt(output: str) -> str:
    """``coqc``'s error message from its first ``Error`` on (at most 1000 characters)."""
    index = output.find("Error")
    return (output[index:] if index >= 0 else output)[:1000].strip()
