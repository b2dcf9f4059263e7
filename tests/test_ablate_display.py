"""What `trl-loo-gspo ablate` prints (issue #46): one line per finished run when stdout is not a terminal, one live
display per terminal with several workers (the first worker draws, the others stay silent until it ends), the report
phase announced with the files it writes, and every file written named (fake runners: no model)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trl_loo_gspo.experiment.ablation import inference
from trl_loo_gspo.experiment.ablation.progress import AblationProgress, display_lock_path
from trl_loo_gspo.experiment.ablation.report import REPORT_FILES
from trl_loo_gspo.experiment.ablation.runner import run_ablation

from .test_ablation import fake_runner, plan_for
from .test_ablation_claims import _held_by_another_process

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RUNS = [(name, seed) for seed in range(3) for name in ("grpo", "loo", "loo_dyn")]


class Terminal(io.StringIO):
    """A stream that says it is a terminal (what the live display draws on)."""

    def isatty(self) -> bool:
        return True


def reporting_runner(calls: list, after=None, curve_points: int = 2, process: bool = False):
    """A fake runner that reports rollout tokens like the real one; ``after(n)`` runs once the n-th run reported."""
    base = fake_runner(calls, {"loo": 0.05})

    def runner(plan, name, overrides, is_baseline, seed, progress):
        for tokens in (0, plan.rollout_tokens // 2, plan.rollout_tokens):
            progress(tokens)
            if after is not None and tokens == plan.rollout_tokens // 2:
                after(len(calls) + 1)
        record = base(plan, name, overrides, is_baseline, seed, progress)
        grid = [plan.rollout_tokens * i // (curve_points - 1) for i in range(curve_points)]
        record["curve"] = [[t, 0.4 + 0.1 * t / plan.rollout_tokens + 0.01 * seed] for t in grid]
        if process:
            record["process_log"] = [{"step": 1, "process/signal_mean": 0.5}]
        return record

    return runner


def lines_of(text: str) -> list[str]:
    return [line for line in ESCAPE.sub("", text).replace("\r", "\n").splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------- not a terminal: lines


def test_a_log_file_gets_one_plain_line_per_run_then_the_report_phase(tmp_path, capsys):
    plan = plan_for(tmp_path)
    run_ablation(plan, reporting_runner([]))
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "\r" not in out  # no redraws, no escape codes
    lines = out.splitlines()
    assert lines[0].startswith("study: 9 runs of 1,000 rollout tokens, scored on the validation split: 0 finished")
    assert f"worker {os.getpid()} prints one line per run it finishes" in lines[0]
    runs = lines[1:10]
    for index, ((name, seed), line) in enumerate(zip(RUNS, runs, strict=True), start=1):
        assert line.startswith(f"study {index}/9  {name} seed {seed}: validation pass rate 0."), line
        assert "1,000 rollout tokens" in line
    announce, wrote = lines[10:]
    assert announce.startswith(f"Writing the report to {plan.output_dir}/ (the curve fits can take a minute or two)")
    for name in REPORT_FILES:  # announced from the one list of the files the report can write
        assert name in announce
    assert wrote.startswith(f"Wrote {plan.output_dir}/: results.csv, report.md, pass_rate_vs_tokens.png (in ")


def test_what_a_run_prints_while_it_trains_is_left_out(tmp_path, capsys):
    """The trainer's objective line (stdout) would make two lines per run; warnings (stderr) stay."""
    base = reporting_runner([])

    def printing(*args):
        print("Objective: loss_type=loo_gspo, ...")
        print("a warning", file=sys.stderr)
        return base(*args)

    run_ablation(plan_for(tmp_path), printing)
    captured = capsys.readouterr()
    assert "Objective" not in captured.out and len(captured.out.splitlines()) == 1 + 9 + 2
    assert captured.err.count("a warning") == 9


def test_every_file_written_is_named_and_none_is_forgotten(tmp_path, capsys, monkeypatch):
    """A plan whose records give every output (curves with enough points, process feedback): the last line names all
    of :data:`REPORT_FILES`, and they are exactly the files the report wrote."""
    monkeypatch.setattr(inference, "CURVE_BOOTSTRAP", 20)  # (the report's refits: same code, less time)
    plan = plan_for(tmp_path)
    run_ablation(plan, reporting_runner([], curve_points=5, process=True))
    wrote = capsys.readouterr().out.splitlines()[-1]
    named = wrote.split(": ", 1)[1].rsplit(" (in ", 1)[0].split(", ")
    assert named == list(REPORT_FILES)
    out = Path(plan.output_dir)
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == sorted(REPORT_FILES)  # (no temporary figure left)


def test_a_resumed_ablation_says_what_was_finished_and_goes_to_the_report(tmp_path, capsys):
    plan = plan_for(tmp_path)
    run_ablation(plan, reporting_runner([]))
    capsys.readouterr()
    calls = []
    run_ablation(plan, reporting_runner(calls))
    lines = capsys.readouterr().out.splitlines()
    assert calls == [] and lines[0].startswith("study: 9 runs") and "9 finished, 0 to train" in lines[0]
    assert lines[1].startswith("Writing the report") and lines[2].startswith("Wrote ")


def test_a_worker_that_leaves_runs_to_another_says_so_in_one_line(tmp_path, capsys):
    plan = plan_for(tmp_path)
    holder = _held_by_another_process(tmp_path / "out" / "runs" / "loo" / "seed1.json")
    try:
        assert run_ablation(plan, reporting_runner([])) is None
    finally:
        holder.kill()
        holder.wait()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 8 + 1
    assert lines[-1] == (
        f"Worker {os.getpid()} is done: 1 run is still being trained by other workers; the last one to finish writes "
        "the report."
    )


def test_the_sweep_phase_is_announced_with_its_split(tmp_path, capsys):
    from .test_ablation_bases import bases_plan

    calls = []

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation"):
        calls.append(split)
        record = fake_runner([], {})(plan, name, overrides, is_baseline, seed, progress)
        return {**record, "split": split, "learning_rate": overrides.get("learning_rate")}

    plan = bases_plan(tmp_path)
    run_ablation(plan, runner)
    lines = capsys.readouterr().out.splitlines()
    sweep = [line for line in lines if line.startswith("sweep")]
    study = [line for line in lines if line.startswith("study")]
    assert sweep[0].startswith("sweep: ") and "scored on the tuning split" in sweep[0]
    assert len(sweep) == 1 + calls.count("tuning") and " lr " in sweep[1] and "tuning pass rate" in sweep[1]
    assert len(study) == 1 + calls.count("validation")


# ------------------------------------------------------------------------------------------------- a terminal


def test_one_worker_on_a_terminal_draws_a_live_display_with_a_line_per_run(tmp_path):
    screen = Terminal()
    plan = plan_for(tmp_path)
    run_ablation(plan, reporting_runner([]), progress=AblationProgress(screen, tmp_path / "display.lock", 0))
    text = screen.getvalue()
    assert "\x1b[" in text  # redrawn in place
    lines = lines_of(text)
    assert "study: finished" in text and "rollout tokens" in text  # the bars: the plan's runs, this run's tokens
    for name, seed in RUNS:
        assert sum(line.startswith("study ") and f"  {name} seed {seed}: " in line for line in lines) == 1
    assert lines[-2].startswith("Writing the report") and lines[-1].startswith("Wrote ")


def test_a_second_worker_on_the_terminal_stays_silent_and_takes_the_display_over_when_the_first_ends(tmp_path):
    """Deterministic: the worker holding the terminal's display lock (the first one started there) draws; the others
    print nothing; when it ends, the next worker to check takes the display over and goes on with the plan's lines."""
    lock = tmp_path / "display.lock"
    first, second = Terminal(), Terminal()
    drawing = AblationProgress(first, lock, 0).__enter__()
    assert drawing.mode == "live"

    def first_worker_ends(run: int) -> None:
        if run == 4:
            drawing.__exit__(None, None, None)

    plan = plan_for(tmp_path)
    silent = AblationProgress(second, lock, 0)
    run_ablation(plan, reporting_runner([], after=first_worker_ends), progress=silent)
    lines = lines_of(second.getvalue())
    took_over = next(i for i, line in enumerate(lines) if "the worker that drew this display has ended" in line)
    runs = [line for line in lines if line.startswith("study ")]
    assert took_over == 0  # silent while the first one drew
    assert [line.split("  ")[1].split(":")[0] for line in runs] == [f"{n} seed {s}" for n, s in RUNS[3:]]
    assert runs[0].startswith("study 4/9")
    assert lines[-1].startswith("Wrote ")


def test_the_drawing_worker_shows_the_runs_other_workers_finish(tmp_path):
    lock = tmp_path / "display.lock"
    screen = Terminal()
    plan = plan_for(tmp_path)
    with AblationProgress(screen, lock, 0) as drawing:
        other = AblationProgress(Terminal(), lock, 0)
        run_ablation(plan, reporting_runner([]), progress=other)  # another worker trains every run
        assert other.mode in ("silent", "lines")
        from trl_loo_gspo.experiment.ablation.runner import _labelled, run_path

        jobs = [(name, {}, name == "grpo", seed, run_path(plan, name, seed)) for name, seed in RUNS]
        for path in [job[4] for job in jobs[3:]]:  # (as if they were finished while this one watched)
            path.rename(path.with_suffix(".later"))
        drawing.phase("validation", _labelled(jobs), plan.rollout_tokens)
        for path in [job[4] for job in jobs[3:]]:
            path.with_suffix(".later").rename(path)
        drawing.poll()
    lines = lines_of(screen.getvalue())
    assert lines[0].startswith("study: 9 runs") and "3 finished, 6 to train" in lines[0]
    shown = [line for line in lines if line.endswith("(another worker)")]
    assert [line.split("  ")[1].split(":")[0] for line in shown] == [f"{n} seed {s}" for n, s in RUNS[3:]]
    assert shown[0].startswith("study 4/9") and shown[-1].startswith("study 9/9")


def test_the_display_lock_is_one_per_terminal(tmp_path):
    pty = pytest.importorskip("pty")
    first, first_slave = pty.openpty()
    second, second_slave = pty.openpty()
    try:
        again = os.open(os.ttyname(first_slave), os.O_RDWR)
        try:
            with os.fdopen(os.dup(first_slave), "w") as a, os.fdopen(os.dup(again), "w") as b:
                with os.fdopen(os.dup(second_slave), "w") as c:
                    assert display_lock_path(a) == display_lock_path(b) != display_lock_path(c)
                    assert display_lock_path(a) is not None
            assert display_lock_path(io.StringIO()) is None
        finally:
            os.close(again)
    finally:
        for fd in (first, first_slave, second, second_slave):
            os.close(fd)


TWO_WORKERS = r"""
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.test_ablate_display import reporting_runner
from tests.test_ablation import plan_for
from trl_loo_gspo.experiment.ablation.progress import AblationProgress
from trl_loo_gspo.experiment.ablation.runner import run_ablation

tmp = Path(sys.argv[1])
run_ablation(plan_for(tmp), reporting_runner([], after=lambda n: time.sleep(1.0)),
             progress=AblationProgress(lock_path=tmp / "display.lock", poll_seconds=0.1))
"""


@pytest.mark.slow
def test_two_worker_processes_on_one_terminal_print_each_run_once(tmp_path):
    """The README's `ablate plan &` then `ablate plan` on one pseudo-terminal (started together: either may draw):
    every run appears once, one worker's display at a time (the lines of the screen, escape codes removed)."""
    pty = pytest.importorskip("pty")
    import select

    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120"}
    argv = [sys.executable, "-c", TWO_WORKERS, str(tmp_path), str(Path(__file__).parents[1])]
    workers = [subprocess.Popen(argv, stdout=slave, stderr=slave, env=env) for _ in range(2)]
    output = b""

    def read(timeout: float) -> None:
        nonlocal output
        ready, _, _ = select.select([master], [], [], timeout)
        if ready:
            output += os.read(master, 1 << 16)

    while any(w.poll() is None for w in workers):
        read(0.2)
    read(0.2)
    os.close(slave)
    os.close(master)
    assert [w.returncode for w in workers] == [0, 0], output.decode(errors="replace")[-3000:]
    lines = lines_of(output.decode(errors="replace"))
    for name, seed in RUNS:
        finished = [line for line in lines if line.startswith("study ") and f"  {name} seed {seed}: " in line]
        assert len(finished) == 1, lines
    assert sum(line.startswith("study: 9 runs") for line in lines) == 1  # one header: the second worker is silent
    assert sum(line.startswith("Wrote ") for line in lines) == 1
    records = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out" / "runs").rglob("*.json"))
    assert len(records) == 9 and all(json.loads((tmp_path / p).read_text())["provenance"] for p in records)
