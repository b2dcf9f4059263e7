"""The device check's CPU dry run (issue 35): ``benchmarks/gpu/check.py --device cpu --tiny`` runs every section —
both trainers' throughput with and without dynamic sampling, the precision benchmark, the CUDA-able tests — so that
the script the GPU machine runs cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu" / "check.py"

pytestmark = pytest.mark.slow


def test_gpu_check_dry_run_on_cpu(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out), "--work", str(work)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.json", "gpu-check.md", "precision.json"]
    report = json.loads((out / "gpu-check.json").read_text())
    assert list(report["sections"]) == ["environment", "throughput", "precision", "tests"]
    assert all(section["ok"] for section in report["sections"].values())
    trainers = report["sections"]["throughput"]["result"]["trainers"]
    assert list(trainers) == ["stock", "ours", "ours+ds"]
    for name, figures in trainers.items():
        assert figures["steps"] == 4 and figures["timed_rounds"] == 1, name
        assert figures["step_s"] > 0 and 0 < figures["generation_share"] < 1, name
        assert figures["generated_tokens_per_s"] > 0 and figures["trained_tokens_per_s"] > 0, name
    # our loss logs the first update's ratio noise of each round (TRL's loss does not)
    assert "noise_first_updates" not in trainers["stock"]
    assert [e["step"] for e in trainers["ours"]["noise_first_updates"]] == [1, 3]
    assert report["sections"]["tests"]["result"]["summary"].startswith("1 passed")
    markdown = (out / "gpu-check.md").read_text()
    assert "| ours+ds |" in markdown and "| mode | T | pass |" in markdown
