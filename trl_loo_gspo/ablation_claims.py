"""Claims on ablation runs, so that several ``trl-loo-gspo ablate`` processes on one plan share the work.

A worker claims run ``runs/<name>/seed<k>.json`` by creating ``runs/<name>/seed<k>.claim`` exclusively
(``O_CREAT | O_EXCL``, atomic on a local file system) with its host name and process id; other workers skip a run
with a live claim. A claim whose process is gone (killed, crashed) is stale and is taken over, so a killed worker
loses only the run it was training. Plain ``os`` calls: no library offers a cross-process "try once" file claim
with stale-owner recovery that is simpler than this.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _claim_path(record: Path) -> Path:
    return record.with_suffix(".claim")


def _owner_alive(text: str) -> bool:
    host, _, pid = text.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's claim (a shared file system): cannot check it, respect it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def claim(record: Path) -> bool:
    """Claim the run whose record is ``record``; ``False`` when another live process holds it."""
    path = _claim_path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # the second try follows the removal of a stale claim
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = path.read_text()
            except FileNotFoundError:  # released meanwhile
                continue
            if _owner_alive(owner):
                return False
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{socket.gethostname()}:{os.getpid()}")
        return True
    return False


def release(record: Path) -> None:
    """Drop this process's claim on ``record`` (no-op when there is none)."""
    _claim_path(record).unlink(missing_ok=True)
