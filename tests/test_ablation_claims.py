"""Several `ablate` processes on one plan share the work: claims, stale claims, and who writes the report."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from trl_loo_gspo.ablation import run_ablation
from trl_loo_gspo.ablation_claims import claim, release

from .test_ablation import fake_runner, plan_for


def test_a_claim_is_exclusive_while_its_process_lives(tmp_path):
    record = tmp_path / "runs" / "loo" / "seed0.json"
    assert claim(record) and not claim(record)  # this process holds it
    release(record)
    assert claim(record)


def test_a_stale_claim_of_a_dead_process_is_taken_over(tmp_path):
    record = tmp_path / "runs" / "loo" / "seed0.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record.parent.mkdir(parents=True)
    record.with_suffix(".claim").write_text(f"{socket.gethostname()}:{int(dead.stdout)}")
    assert claim(record)
    assert record.with_suffix(".claim").read_text() == f"{socket.gethostname()}:{os.getpid()}"


def test_runs_claimed_by_another_live_process_are_skipped_and_the_last_worker_reports(tmp_path):
    plan = plan_for(tmp_path)
    held = tmp_path / "out" / "runs" / "loo" / "seed1.json"
    held.parent.mkdir(parents=True)
    held.with_suffix(".claim").write_text(f"{socket.gethostname()}:{os.getppid()}")  # a live process: our parent
    calls = []
    assert run_ablation(plan, fake_runner(calls, {})) is None  # one run is still "being trained" elsewhere
    assert ("loo", 1) not in calls and len(calls) == 8
    assert not (tmp_path / "out" / "report.md").exists()  # no partial report
    assert not list((tmp_path / "out" / "runs").rglob("*.tmp*"))
    held.with_suffix(".claim").unlink()  # the other worker finished... by dying without a record: run it here
    calls.clear()
    records = run_ablation(plan, fake_runner(calls, {}))
    assert calls == [("loo", 1)] and len(records) == 9
    assert (tmp_path / "out" / "report.md").stat().st_size > 0
    assert not list((tmp_path / "out" / "runs").rglob("*.claim"))  # every claim released
