"""The host's verdict on one test from what its sandboxed child reported (see :mod:`trl_loo_gspo.sandbox.runner`).

A child reports JSON lines: ``["program_error", exc]`` (the program raised before the test), ``["p", k, values]``
(split assert ``k`` reached; ``values`` are ``[1, <plain data>]`` or ``[0, <why not>]``), ``["error", exc]`` (the
test raised: an in-sandbox assert failed, or a statement of the test raised), ``["end"]`` (the test ran to its end).
The child runs the program, so every line is untrusted: a malformed line fails the test, a split assert that must
report once and reports twice is ``tampered``, and the verdict of each split assert is computed here by
:func:`.assert_split.judge` on decoded plain data.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from .assert_split import Probe, ProbeError, SplitTest, judge
from .plain_data import PlainDataError, decode


def channel_records(channel: bytes, nonce: str) -> list[list[Any]]:
    """The runner's records (lines tagged with ``nonce``, split on spaces, nonce dropped), in order.

    An ``ENTRY <i> <status> <n>`` header is followed by exactly ``n`` raw bytes (the child's report), returned as
    the record's last element. Lines without the nonce are skipped (the channel is only the runner's, but a bug must
    not turn a stray line into a verdict).
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
        if len(parts) == 5 and parts[1] == "ENTRY" and parts[4].isdigit():
            size = int(parts[4])
            records.append(["ENTRY", parts[2], parts[3], channel[pos : pos + size]])
            pos += size
        else:
            records.append(parts[1:])
    return records


def parse_entry(status: str, payload: bytes) -> tuple[int, list[Any]]:
    """``(exit status, report lines)`` from an ``ENTRY`` record; a malformed line becomes ``["malformed"]``."""
    try:
        text = payload.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return -1, [["malformed"]]
    lines: list[Any] = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except (ValueError, RecursionError):
            lines.append(["malformed"])
    return int(status) if status.lstrip("-").isdigit() else -1, lines


def judge_entry(plan: SplitTest, status: int, lines: list[Any]) -> tuple[bool, str, str | None]:
    """``(passed, reason, program_error)`` for one test."""
    reports: dict[int, int] = {}
    ended = False
    for line in lines:
        kind = line[0] if isinstance(line, list) and line and isinstance(line[0], str) else "malformed"
        if ended or kind == "malformed" or kind not in ("program_error", "p", "error", "end"):
            return False, "malformed report", None
        if kind == "program_error":
            return False, f"program raised {_word(line[1:2])}", _word(line[1:2])
        if kind == "error":
            return False, _word(line[1:2]), None
        if kind == "end":
            ended = True
            continue
        probe = _probe(plan, line)
        if probe is None:
            return False, "malformed report", None
        reports[probe.index] = reports.get(probe.index, 0) + 1
        if probe.once and reports[probe.index] > 1:
            return False, "tampered", None
        passed, reason = judge(probe, _values(line[2], len(probe.calls)), plan.host_env)
        if not passed:
            return False, reason, None
    if status != 0:  # a wait status: a signal, or an exit code
        return False, _status_reason(status), None
    if not ended:
        return False, "not run", None
    if any(p.once and reports.get(p.index) != 1 for p in plan.probes):
        return False, "not run", None
    return True, "passed", None


def _status_reason(status: int) -> str:
    """``"cpu"`` for a child killed at its CPU limit (SIGXCPU), ``"killed by SIG..."`` for another signal, else
    ``"exit status N"``."""
    if status < 0 or not (os.WIFSIGNALED(status) or os.WIFEXITED(status)):
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


def _probe(plan: SplitTest, line: list[Any]) -> Probe | None:
    if len(line) != 3 or type(line[1]) is not int or not 0 <= line[1] < len(plan.probes):
        return None
    if type(line[2]) is not list:
        return None
    return plan.probes[line[1]]


def _values(raw: list[Any], n: int) -> list[Any]:
    values: list[Any] = []
    for j in range(n):
        item = raw[j] if j < len(raw) else None
        if type(item) is list and len(item) == 2 and item[0] == 1:
            try:
                values.append(decode(item[1]))
            except (PlainDataError, RecursionError, ValueError) as err:
                values.append(ProbeError(f"unserialisable: {err}"))
        elif type(item) is list and len(item) == 2 and item[0] == 0:
            values.append(ProbeError(_word([item[1]])))
        else:
            values.append(ProbeError("missing value"))
    return values


def _word(parts: list[Any]) -> str:
    return str(parts[0])[:200] if parts else "?"
