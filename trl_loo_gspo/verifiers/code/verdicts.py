"""The host's reading of a tests run: the runner's records and each test's judge report (:mod:`trl_loo_gspo.sandbox`).

The judge never shares a process with the program (``sandbox/judge.py``), so its report is the verdict; the host
only parses it (defensively: a judge killed mid-write leaves a truncated report, which fails the test) and names
the cause when a process was killed at a limit.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from typing import Any

#: The judge's reason when the candidate process went away before answering a call.
CANDIDATE_ENDED = "the program's process ended"


@dataclass(frozen=True)
class Verdict:
    """One test's outcome: ``weak`` tests were not judged (see ``test_plan``); ``program_error`` names the exception
    the program raised before any test ran."""

    passed: bool
    reason: str
    weak: bool = False
    program_error: str | None = None
    calls: int = 0


def channel_records(channel: bytes, nonce: str) -> list[list[Any]]:
    """The runner's records (lines tagged with ``nonce``, split on spaces, nonce dropped), in order.

    An ``ENTRY <i> <judge status> <candidate status> <n>`` header is followed by exactly ``n`` raw bytes (the judge's
    report), returned as the record's last element. Lines without the nonce are skipped.
    """
    records: list[list[Any]] = []
    pos, end = 0, len(channel)
    while pos < end:
        newline = channel.find(b"\n", pos)
        if newline < 0:
            break
        parts = channel[pos:newline].decode("utf-8", "replace").split(" ")
        pos = newline + 1
        if not parts or parts[0] != nonce:
            continue
        if len(parts) == 6 and parts[1] == "ENTRY" and parts[5].isdigit():
            size = int(parts[5])
            records.append(["ENTRY", parts[2], parts[3], parts[4], channel[pos : pos + size]])
            pos += size
        else:
            records.append(parts[1:])
    return records


def read_verdict(judge_status: str, candidate_status: str, payload: bytes) -> Verdict:
    """The verdict of one ``ENTRY`` record."""
    judge, candidate = _status(judge_status), _status(candidate_status)
    if judge != 0:  # the judge was killed: at its CPU limit (e.g. hashing what the program returned), or otherwise
        return Verdict(False, _status_reason(judge))
    try:
        report = json.loads(payload.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return Verdict(False, "malformed report")
    if not (isinstance(report, list) and report and isinstance(report[-1], int)):
        return Verdict(False, "malformed report")
    kind, rest, calls = report[0], report[1:-1], report[-1]
    reason = str(rest[0])[:200] if rest else ""
    if kind == "pass":
        return Verdict(True, "passed", calls=calls)
    if kind == "weak":
        return Verdict(False, reason, weak=True, calls=calls)
    if kind == "program_error":
        return Verdict(False, f"program raised {reason}", program_error=reason, calls=calls)
    if kind == "fail":
        if reason == CANDIDATE_ENDED and candidate is not None and _killed_by(candidate) != signal.SIGKILL:
            reason = _status_reason(candidate)  # the program's process ended on its own: say how
        return Verdict(False, reason, calls=calls)
    return Verdict(False, "malformed report")


def _status(text: str) -> int | None:
    return int(text) if text.lstrip("-").isdigit() else None


def _killed_by(status: int) -> int | None:
    return os.WTERMSIG(status) if status >= 0 and os.WIFSIGNALED(status) else None


def _status_reason(status: int | None) -> str:
    """``"cpu"`` for a process killed at its CPU limit (SIGXCPU), ``"killed by SIG..."`` for another signal, else
    ``"exit status N"``."""
    if status is None or status < 0 or not (os.WIFSIGNALED(status) or os.WIFEXITED(status)):
        return f"exit status {status}"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "cpu"
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {os.WEXITSTATUS(status)}"
