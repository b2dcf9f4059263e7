"""Several `ablate` processes on one plan share the work: claims, claims of dead processes, and who reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trl_loo_gspo.experiment.ablation.claims import claim
from trl_loo_gspo.experiment.ablation.runner import run_ablation

from .test_ablation import fake_runner, plan_for

HOLD = (
    "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); time.sleep(600)"
)


def _held_by_another_process(record: Path) -> subprocess.Popen:
    """A second process that claims ``record`` (the same lock file) and keeps it until killed."""
    record.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(record.with_suffix(".claim"))], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_claim_is_exclusive_while_its_holder_lives(tmp_path):
    record = tmp_path / "runs" / "loo" / "seed0.json"
    lock = claim(record)
    assert lock is not None and claim(record) is None  # this process holds it
    lock.release()
    again = claim(record)
    assert again is not None
    again.release()


def test_the_claim_of_a_process_that_died_is_taken_over(tmp_path):
    record = tmp_path / "runs" / "loo" / "seed0.json"
    holder = _held_by_another_process(record)
    try:
        assert claim(record) is None  # alive: its run is skipped
    finally:
        holder.kill()
        holder.wait()
    lock = claim(record)  # killed: the operating system dropped its lock
    assert lock is not None
    lock.release()


def test_runs_claimed_by_another_live_process_are_skipped_and_the_last_worker_reports(tmp_path):
    plan = plan_for(tmp_path)
    held = tmp_path / "out" / "runs" / "loo" / "seed1.json"
    holder = _held_by_another_process(held)
    calls = []
    try:
        assert run_ablation(plan, fake_runner(calls, {})) is None  # one run is still "being trained" elsewhere
    finally:
        holder.kill()  # ... by a worker that then dies without writing its record
        holder.wait()
    assert ("loo", 1) not in calls and len(calls) == 8
    assert not (tmp_path / "out" / "report.md").exists()  # no partial report
    assert not list((tmp_path / "out" / "runs").rglob("*.tmp*"))
    calls.clear()
    records = run_ablation(plan, fake_runner(calls, {}))
    assert calls == [("loo", 1)] and len(records) == 9
    assert (tmp_path / "out" / "report.md").stat().st_size > 0
    for record in (tmp_path / "out" / "runs").rglob("*.json"):  # every claim released
        lock = claim(record)
        assert lock is not None
        lock.release()
