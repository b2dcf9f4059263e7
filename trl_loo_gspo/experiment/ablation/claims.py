"""Claims on ablation runs, so that several ``trl-loo-gspo ablate`` processes on one plan share the work.

A worker claims run ``runs/<name>/seed<k>.json`` by taking a non-blocking ``filelock.FileLock`` on
``runs/<name>/seed<k>.claim`` for as long as it trains that run; other workers skip a run whose lock is held. The
operating system drops the lock when its process dies (killed, crashed), so a killed worker loses only the run it
was training and another worker takes it over. ``filelock`` is already installed with ``datasets`` and
``huggingface_hub``. (On a network file system, OS locks depend on the server: run the workers of one plan on one
machine.)
"""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout


def claim(record: Path) -> FileLock | None:
    """Claim the run whose record is ``record``: the held lock, or ``None`` when another worker holds it."""
    record.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(record.with_suffix(".claim"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock
